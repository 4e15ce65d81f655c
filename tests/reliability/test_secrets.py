"""No secret or token in any log line (issue 10, item 4).

A Feishu and a Yuque sync run through the simulators (real sockets on 127.0.0.1) with known,
distinctive credentials, including the paths most likely to leak one: a tenant token expiring
mid-run (99991663, refresh, retry) and a revoked Yuque token (401). Every log record of the whole
run is captured at DEBUG — root plus the ``httpx``/``httpcore``/project loggers, message, args and
exception text — together with stdout/stderr, the state database, the index and the staging area,
and none may contain the app secret, any tenant token the simulator issued, or the Yuque token.
The shared Redis caches (token, request budgets) may hold the tenant token as a *value* — that is
their job — but no key may name the secret or a token, and no value may hold the app secret.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from include.config import SourceConfig
from plugins.engine import run_pipeline
from tests.simulators.feishu import FeishuSimulator, demo_drive
from tests.simulators.yuque import YuqueSimulator
from tests.support.server import serve_asgi
from tests.yuque.sheet_models import GOLDEN

_LOGGERS = ("", "httpx", "httpcore", "tributary", "include", "plugins", "urllib3", "airflow")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def all_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record any logger emits during the test, at DEBUG, even from non-propagating ones.

    Airflow configures logging (dictConfig) the first time it is imported, replacing the root
    handlers and disabling loggers that existed before; that happens first, then the collector
    is attached and every project/HTTP logger is enabled at DEBUG.
    """
    import airflow.settings  # noqa: F401  - trigger Airflow's logging set-up before attaching
    from airflow.sdk import BaseHook  # noqa: F401

    handler = _Collect()
    touched: list[tuple[logging.Logger, int, bool]] = []
    names = set(_LOGGERS) | {n for n in logging.root.manager.loggerDict if n.startswith(_LOGGERS[1:])}
    for name in sorted(names):
        logger = logging.getLogger(name)
        touched.append((logger, logger.level, logger.disabled))
        logger.setLevel(logging.DEBUG)
        logger.disabled = False
        if not name or not logger.propagate:
            logger.addHandler(handler)
    yield handler.records
    for logger, level, disabled in touched:
        logger.setLevel(level)
        logger.disabled = disabled
        if handler in logger.handlers:
            logger.removeHandler(handler)


def _log_text(records: list[logging.LogRecord]) -> str:
    parts = []
    for r in records:
        parts.append(f"{r.name} {r.levelname} {r.getMessage()} {r.args!r} {r.exc_text or ''}")
        if r.exc_info and r.exc_info[1] is not None:
            parts.append(repr(r.exc_info[1]))
        parts.append(repr({k: v for k, v in vars(r).items() if k not in ("msg", "args", "exc_info")}))
    return "\n".join(parts)


def _files_text(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def _assert_absent(secrets: set[str], **haystacks: str | bytes) -> None:
    for where, text in haystacks.items():
        for secret in secrets:
            needle = secret.encode() if isinstance(text, bytes) else secret
            assert needle not in text, f"secret {secret[:6]}… found in {where}"


def test_feishu_sync_with_token_expiry_logs_no_secret_or_token(
    all_logs: list[logging.LogRecord],
    capfd: pytest.CaptureFixture[str],
    tributary_home: Path,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "SECRET-feishu-" + uuid.uuid4().hex
    sim = FeishuSimulator(app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret=secret, export_pending_polls=1)
    with serve_asgi(sim.app) as url:
        conn = {"conn_type": "http", "login": sim.app_id, "password": secret, "host": url}
        monkeypatch.setenv("AIRFLOW_CONN_FEISHU_DEFAULT", json.dumps(conn))
        monkeypatch.setenv("TRIBUTARY_REDIS_URL", redis_url)
        drive = demo_drive(sim)
        source = SourceConfig(
            kind="feishu",
            name="drive",
            conn_id="feishu_default",
            options={"folders": [drive["root"]], "export_poll_interval": 0.05, "export_poll_max_interval": 0.2},
            batch_size=4,
        )
        tokens: set[str] = set()
        first = run_pipeline(source)
        tokens |= set(sim._tokens)
        assert first.status == "success" and first.counts["new"] == 6

        # the token dies mid-life: business calls answer 99991663, the client refreshes and retries
        sim.expire_tokens()
        sim.edit(drive["docx"], "# 产品介绍\n令牌过期后重新获取。")
        second = run_pipeline(source)
        tokens |= set(sim._tokens)
        assert second.status == "success" and second.counts["changed"] == 1
        assert sim.counters["token_rejections"] >= 1  # the expiry path really ran

    assert len(tokens) >= 2 and all(t.startswith("t-") for t in tokens)
    # the capture is real: every request line (httpx) and the wire-level DEBUG lines (httpcore)
    assert sum(r.name == "httpx" for r in all_logs) >= 10 and any(r.name.startswith("httpcore") for r in all_logs)
    out, err = capfd.readouterr()
    _assert_absent(
        {secret, *tokens},
        logs=_log_text(all_logs),
        stdout=out,
        stderr=err,
        home_files=_files_text(tributary_home),  # state DB, index, any retained staging
    )

    client = redis.Redis.from_url(redis_url)
    keys = [k.decode() for k in client.keys("*")]
    assert keys, "the Feishu token cache and budgets should live in Redis"
    for key in keys:
        assert secret not in key and not any(t in key for t in tokens)
        if client.type(key) == b"string":
            assert secret.encode() not in (client.get(key) or b"")
        elif client.type(key) == b"zset":
            assert not any(secret.encode() in m for m in client.zrange(key, 0, -1))
    client.close()


def test_yuque_sync_and_revoked_token_log_no_token(
    all_logs: list[logging.LogRecord],
    capfd: pytest.CaptureFixture[str],
    tributary_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "YQTOKEN-" + uuid.uuid4().hex
    sim = YuqueSimulator()
    sim.add_account("alice", token=token)
    kb = sim.add_repo("alice", "kb", "知识库")
    sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。")
    sim.add_doc(kb, "销售表", format="lakesheet", sheets=GOLDEN)
    sim.add_doc(kb, "停电公告", format="html", body="<h1>停电公告</h1><p>周五晚上机房检修停电。</p>")
    with serve_asgi(sim.app) as url:
        extra = {"backoff_initial": 0.01, "backoff_max": 0.05, "max_retry_after": 0.05}
        conn = {"conn_type": "yuque", "host": url, "password": token, "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_YUQUE_DEFAULT", json.dumps(conn))
        source = SourceConfig(kind="yuque", name="kb", conn_id="yuque_default", options={})
        first = run_pipeline(source)
        assert first.status == "success" and first.counts["new"] == 3

        # the token is revoked: every call answers 401 and the run reports the failure
        del sim.tokens[token]
        try:
            second = run_pipeline(source)
            revoked_status = second.status
        except Exception as exc:  # a failed discovery may surface as an exception: its text counts too
            revoked_status = "raised"
            logging.getLogger("tributary.test").exception("revoked-token run raised: %s", exc)
        assert revoked_status != "success" or second.counts["new"] == 0

    assert sum(r.name == "httpx" for r in all_logs) >= 5
    assert any("401" in r.getMessage() for r in all_logs)  # the revoked-token path was logged
    out, err = capfd.readouterr()
    _assert_absent({token}, logs=_log_text(all_logs), stdout=out, stderr=err, home_files=_files_text(tributary_home))
