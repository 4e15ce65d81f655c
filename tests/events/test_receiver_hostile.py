"""An attacker against a real receiver process in a loopback-only network namespace: oversized
bodies (chunked and declared), half-sent requests, forged signatures, nested JSON and a burst of
1,000 callbacks; afterwards the server has no more processes, bounded memory and still serves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from include.stores.events import EventStore
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _refusal() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare(1) or ip(8) missing"
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"no network namespace here: {probe.stderr.strip()[:200]}"


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux's")
def test_hostile_streams_leave_the_receiver_bounded_and_serving(tmp_path: Path) -> None:
    reason = _refusal()
    if reason:
        pytest.skip(reason)
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.events.hostile", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert " 413 " in seen["chunked"]["status"] + " ", seen
    assert seen["chunked"]["sent"] < 10 * 1024 * 1024, seen  # cut off long before the 10 MB
    assert " 413 " in seen["declared"]["status"] + " ", seen
    assert seen["forged"] == [401], seen
    assert seen["nested"] == 400, seen
    assert seen["burst"] == {"200": 599, "429": 401}, seen  # 600 a minute, one taken by the warm-up
    assert seen["still_serving"] in (200, 429), seen  # answered (the minute's budget is spent)
    before, after = seen["before"], seen["after"]
    assert after["children"] == before["children"] == 0, seen
    assert after["rss_kib"] - before["rss_kib"] < 64 * 1024, seen  # no body was kept
    assert after["threads"] <= before["threads"] + 41, seen  # at most anyio's worker pool more
    store = EventStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        stats = store.stats("feishu:docs")
    finally:
        store.close()
    assert stats.received == 600
    assert stats.refused["bad_signature"] == 300 and stats.refused["too_large"] == 2
    assert stats.refused["rate_limited"] >= 401
