"""A deliberate leak, run only by ``test_leakscan.py::test_session_scan_fails_the_run_on_a_planted_leak``
in a nested pytest session (the file name does not match ``test_*.py``, so the suite never collects
it by itself). ``TRIBUTARY_LEAK_PLANT`` names the secret; ``TRIBUTARY_LEAK_MODE=clean`` writes the
same log lines with the secret masked, as Airflow's secrets masker would.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.simulators.feishu import FeishuSimulator
from tests.simulators.yuque import YuqueSimulator


def test_plant(tmp_path: Path) -> None:
    secret = os.environ["TRIBUTARY_LEAK_PLANT"]
    token = "yq-" + secret[::-1]
    clean = os.environ.get("TRIBUTARY_LEAK_MODE") == "clean"
    FeishuSimulator(app_secret=secret)  # the simulators register what they are given
    YuqueSimulator().add_account("alice", token=token)
    # an Airflow task log file where a LocalExecutor/Celery worker would write it
    log = tmp_path / "airflow" / "logs" / "dag_id=sync_feishu_x" / "run_id=manual" / "task_id=fetch" / "attempt=1.log"
    log.parent.mkdir(parents=True)
    shown = "***" if clean else secret
    log.write_text(f"[info] token request app_id=cli_x app_secret={shown} status=200\n", encoding="utf-8")
    # and the captured stdout of the test
    print(f"X-Auth-Token: {'***' if clean else token}")
