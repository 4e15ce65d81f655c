"""The whole-run secret scan really finds leaks (issue 10, item 4).

``tests/conftest.py`` scans every file of the test session at its end for every secret the
simulators registered (``tests/support/leakscan.py``). These tests show the parts work — the
simulators register what they issue, the scanner finds a secret anywhere in a file (also across
its read-chunk boundary and among prefix-sharing secrets) and reports the file and the kind, never
the value — and that the session hook fails a pytest run in which a secret was planted in an
Airflow task log file and in captured stdout, while the same run with the secret masked passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.simulators.feishu import FeishuSimulator
from tests.simulators.yuque import YuqueSimulator
from tests.support import leakscan
from tests.support.server import serve_asgi

ROOT = Path(__file__).resolve().parents[2]


def test_simulators_register_every_secret_they_issue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(leakscan.ENV, str(tmp_path))
    app_secret = "app-secret-" + uuid.uuid4().hex
    sim = FeishuSimulator(app_id="cli_reg", app_secret=app_secret)
    sim.token_lifetime = 60  # < 30 min left: every request issues a new token
    with serve_asgi(sim.app) as url:
        issued = []
        for _ in range(3):
            body = {"app_id": "cli_reg", "app_secret": app_secret}
            answer = httpx.post(f"{url}/open-apis/auth/v3/tenant_access_token/internal", json=body).json()
            issued.append(answer["tenant_access_token"])
    yuque = YuqueSimulator()
    yuque.add_account("alice", token="yq-account-" + uuid.uuid4().hex)
    direct = "yq-direct-" + uuid.uuid4().hex
    yuque.tokens[direct] = "alice"  # tests also write the table directly

    registered = leakscan.load_secrets(tmp_path)
    assert len(set(issued)) == 3
    assert {v: k for v, k in registered.items() if k == "feishu tenant_access_token"}.keys() == set(issued)
    assert registered[app_secret] == "feishu app_secret"
    assert [k for v, k in registered.items() if v.startswith("yq-")] == ["yuque token", "yuque token"]
    assert registered[direct] == "yuque token"


def test_this_sessions_registry_is_fed() -> None:
    """The registry the session-end scan reads is live in this very run (set by tests/conftest.py)."""
    registry = Path(os.environ[leakscan.ENV])
    secret = "session-secret-" + uuid.uuid4().hex
    FeishuSimulator(app_secret=secret)
    assert leakscan.load_secrets(registry)[secret] == "feishu app_secret"


def test_scanner_finds_planted_secrets_and_names_only_file_and_kind(tmp_path: Path) -> None:
    tokens = {f"t-{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}": "feishu tenant_access_token" for _ in range(300)}
    planted, boundary = sorted(tokens)[:2]
    secrets = {**tokens, "s3cret-" + "a" * 12: "feishu app_secret", "s3cret-" + "a" * 12 + "-longer": "yuque token"}
    task_log = tmp_path / "airflow" / "logs" / "dag_id=d" / "run_id=r" / "task_id=fetch" / "attempt=1.log"
    task_log.parent.mkdir(parents=True)
    task_log.write_text(f"line one\nAuthorization: Bearer {planted} sent\n", encoding="utf-8")
    # a secret split across the scanner's read chunks must still be found
    big = tmp_path / "tributary" / "staging" / "big.bin"
    big.parent.mkdir(parents=True)
    head = b"x" * (leakscan._CHUNK - 10)
    big.write_bytes(head + boundary.encode() + b"y" * 100)
    # the longer of two prefix-sharing secrets
    (tmp_path / "component.log").write_text("key=s3cret-" + "a" * 12 + "-longer;\n", encoding="utf-8")
    clean = tmp_path / "captured" / "tests" / "00000-clean.txt"
    clean.parent.mkdir(parents=True)
    clean.write_text("token=*** secret=***\n" + "t-" + "0" * 40 + "\n", encoding="utf-8")  # shaped like one, not one

    result = leakscan.scan([tmp_path], secrets)
    found = {(f.path.relative_to(tmp_path).as_posix(), f.kind) for f in result.findings}
    assert found == {
        ("airflow/logs/dag_id=d/run_id=r/task_id=fetch/attempt=1.log", "feishu tenant_access_token"),
        ("tributary/staging/big.bin", "feishu tenant_access_token"),
        ("component.log", "feishu app_secret"),  # the shorter secret is a prefix of the longer one
        ("component.log", "yuque token"),
    }
    assert result.files == 4 and result.by_category["airflow task logs"] == 1
    assert result.by_category["captured test output"] == 1 and result.by_category["component logs"] == 1
    # what a finding carries is the path and the kind: the value is nowhere in it
    assert not any(s in repr(result.findings) for s in secrets)


def test_scanner_excludes_the_registry_and_old_files(tmp_path: Path) -> None:
    secret = "app-secret-" + uuid.uuid4().hex
    registry = tmp_path / "secrets"
    registry.mkdir()
    (registry / "secrets-1.jsonl").write_text(json.dumps(["feishu app_secret", secret]) + "\n")
    old = tmp_path / "home" / "logs" / "old.log"
    old.parent.mkdir(parents=True)
    old.write_text(secret)
    os.utime(old, (1_000_000, 1_000_000))
    result = leakscan.scan([tmp_path], leakscan.load_secrets(registry), exclude=[registry])
    assert [f.path for f in result.findings] == [old]  # found while no cut-off applies
    home = tmp_path / "home"
    result = leakscan.scan([home], {secret: "feishu app_secret"}, modified_since={home: 2_000_000})
    assert result.findings == [] and result.files == 0


def _nested_pytest(tmp_path: Path, secret: str, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRIBUTARY_LEAK_PLANT": secret, "TRIBUTARY_LEAK_MODE": mode}
    env.pop(leakscan.ENV)  # the nested session sets up its own registry and Airflow home
    env.pop("AIRFLOW_HOME", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / mode)]
    args += ["tests/reliability/_leak_plant.py", "-o", "addopts="]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_session_scan_fails_the_run_on_a_planted_leak(tmp_path: Path) -> None:
    secret = "PLANTED-" + uuid.uuid4().hex
    leaked = _nested_pytest(tmp_path, secret, "leak")
    out = leaked.stdout + leaked.stderr
    assert "1 passed" in out  # the test itself passed: only the scan fails the session
    assert leaked.returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    task_log = tmp_path / "leak" / "test_plant0" / "airflow" / "logs" / "dag_id=sync_feishu_x"
    assert f"SECRET LEAK: a feishu app_secret appears in {task_log}/run_id=manual/task_id=fetch/attempt=1.log" in out
    assert "SECRET LEAK: a yuque token appears in " in out and "/captured/tests/" in out
    assert "2 leaks" in out
    assert secret not in out and secret[::-1] not in out  # it names the file and the kind, never the value

    masked = _nested_pytest(tmp_path, secret, "clean")
    out = masked.stdout + masked.stderr
    assert masked.returncode == 0, out[-3000:]
    assert "for 2 registered secrets (1 feishu app_secret, 1 yuque token); 0 leaks" in out
    assert "SECRET LEAK" not in out
