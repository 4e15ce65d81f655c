"""Issue 20.13: 300 exports under the 100/min limits and the 10-minute file expiry, none expired.

The real service's clock is scaled by ``SCALE`` = 20 so the test runs in seconds: one real
minute is three seconds here (at 60, a loaded CI host stalled the test's threads long enough for
exports to expire: the margin is the file's life in real seconds). Scaled alike, on both sides:

- the per-app limits of export create / poll / download (100 per minute -> 100 per 3 s):
  enforced by the simulator (``enforce_limits``, 429 beyond) and budgeted by the client
  (``rate_limits``), as the real gateway and our budget do;
- the export file's life after its task ends (600 s -> 30 s, ``export_file_ttl``);
- the render time of a document (30 s -> 1.5 s) and the poll back-off (1-8 s -> 150-400 ms).

Only ratios matter for expiry (calls per window against the file's life), so the scaled run
faces the same arithmetic as a real one. Three batches of 100 run in parallel against the one
app budget, as the DAG's mapped fetch tasks do.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from include.config import SourceConfig
from include.contract import Change, ChangeKind
from plugins.connectors.base import ConnectorContext
from plugins.connectors.feishu.connector import FeishuConnector
from tests.simulators.feishu import FeishuSimulator

pytestmark = pytest.mark.slow

SCALE = 20.0
PER_MINUTE = 100
EXPORT_APIS = ("export_create", "export_poll", "export_download")


def _scaled_connector() -> FeishuConnector:
    window = 60.0 / SCALE
    opts = {
        "folders": [],
        "export_poll_interval": 1.0 / SCALE * 3,
        "export_poll_max_interval": 8.0 / SCALE,
        "export_deadline_seconds": 900.0 / SCALE * 4,
        "rate_limits": {api: [[PER_MINUTE, window]] for api in EXPORT_APIS},
        "client": {"rate_limit_max_wait": 60},
    }
    return FeishuConnector(SourceConfig(kind="feishu", name="big", options=opts), ConnectorContext(redis_url=None))


def test_13_a_large_first_sync_downloads_every_export_before_it_expires(sim: FeishuSimulator, feishu_conn: str) -> None:
    sim.enforce_limits = {api: (PER_MINUTE, 60.0 / SCALE) for api in EXPORT_APIS}
    sim.export_file_ttl = 600.0 / SCALE
    sim.export_render_seconds = 30.0 / SCALE
    sim.export_pending_polls = 0
    folder = sim.add_folder("大量文档")
    tokens = [sim.add("docx", f"文档{i}", folder, f"# 文档{i}\n正文 {i}") for i in range(300)]
    batches = [tokens[i : i + 100] for i in range(0, 300, 100)]

    def fetch(batch: list[str]):
        with _scaled_connector() as c:
            changes = [Change(t, ChangeKind.NEW, title=t, metadata={"feishu_type": "docx"}) for t in batch]
            return c.fetch_batch(changes)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(fetch, batches))
    fetched = {d.item_key for docs, _ in results for d in docs}
    failures = [f for _, fs in results for f in fs]
    assert failures == [] and fetched == set(tokens)
    assert sim.counters["export_downloads_expired"] == 0
    assert sim.counters["export_creations"] == 300  # nothing had to be exported twice
