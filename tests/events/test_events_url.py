"""``python -m plugins.engine.cli events-url``: the URL to paste, with Yuque's secret, Feishu's events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from plugins.engine.cli import main
from plugins.engine.cli_events import api_base_url
from tests.conftest import ROOT
from tests.support.airflow import write_sources

pytestmark = pytest.mark.airflow  # Connections are read through Airflow's secrets backends

SOURCES = [
    {"kind": "yuque", "name": "kb", "conn_id": "yuque_kb", "options": {"namespaces": ["alice/kb"]},
     "events": {"mode": "callback"}},
    {"kind": "feishu", "name": "docs", "conn_id": "feishu_docs", "options": {"folders": ["fld1"]},
     "events": {"mode": "callback"}},
    {"kind": "files", "name": "local", "options": {"root": "/tmp"}},
]  # fmt: skip


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tributary_home: Path) -> Path:
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", SOURCES)))
    monkeypatch.setenv(
        "AIRFLOW_CONN_YUQUE_KB",
        json.dumps({"conn_type": "yuque", "password": "yuque-token-0123", "extra": {"webhook_secret": "s3cr&t/1"}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_FEISHU_DOCS",
        json.dumps(
            {
                "conn_type": "feishu",
                "login": "cli_x",
                "password": "app-secret-0123",
                "extra": {"verification_token": "vt-0123456789"},
            }
        ),
    )
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    return tmp_path


def test_yuque_url_carries_the_secret_quoted(configured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events-url", "yuque:kb", "--json", "--base-url", "https://airflow.example.com/"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["url"] == "https://airflow.example.com/tributary/events/yuque/kb?secret=s3cr%26t%2F1"
    assert info["missing_extras"] == [] and info["event_types"] == ["publish", "update", "delete"]


def test_feishu_text_names_the_events_to_enable(configured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events-url", "feishu:docs", "--base-url", "https://af.example.com"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "https://af.example.com/tributary/events/feishu/docs"
    assert "drive.file.edit_v1" in out and "drive.file.created_in_folder_v1" in out
    assert "secret=" not in out  # Feishu authenticates by signature and token, nothing in the URL


def test_base_url_from_airflow_config(configured: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = configured / "af"
    home.mkdir()
    (home / "airflow.cfg").write_text("[api]\nbase_url = http://10.0.0.5:9090/\n")
    assert api_base_url({"AIRFLOW_HOME": str(home)}) == "http://10.0.0.5:9090"
    assert (
        api_base_url({"AIRFLOW_HOME": str(home), "AIRFLOW__API__BASE_URL": "https://x.example"}) == "https://x.example"
    )
    assert api_base_url({"AIRFLOW_HOME": str(configured / "none")}) == "http://127.0.0.1:8080"


def test_kinds_without_callbacks_and_unknown_sources_fail_plainly(
    configured: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events-url", "files:local"]) == 2
    assert main(["events-url", "yuque:nope"]) == 2
    err = capsys.readouterr().err
    assert "takes no callbacks" in err and "yuque:nope" in err


def test_module_entry_point_prints_the_url(configured: Path) -> None:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "plugins.engine.cli", "events-url", "yuque:kb", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "AIRFLOW__API__BASE_URL": "http://127.0.0.1:28080"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["url"].startswith("http://127.0.0.1:28080/tributary/events/yuque/kb?secret=")
