"""Functions run in separate worker processes (spawned) by the multi-process tests."""

from __future__ import annotations

from typing import Any


def token_worker(settings: dict[str, Any], folder: str, start: Any, phase2: Any, results: Any) -> None:
    from plugins.connectors.feishu.client import FeishuClient, FeishuSettings

    try:
        with FeishuClient(FeishuSettings(**settings)) as client:
            results.put(("ready", None))
            start.wait(60)
            results.put(("phase1", len(list(client.list_folder(folder)))))
            phase2.wait(60)
            results.put(("phase2", len(list(client.list_folder(folder)))))
    except Exception as exc:  # surface the failure to the parent instead of hanging it
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def download_worker(settings: dict[str, Any], tokens: list[str], start: Any, results: Any) -> None:
    from plugins.connectors.feishu.client import FeishuClient, FeishuSettings

    try:
        with FeishuClient(FeishuSettings(**settings)) as client:
            client.tokens.get()
            results.put(("ready", None))
            start.wait(60)
            sizes = [len(client.download_file(t, max_bytes=1 << 20).data) for t in tokens]
            results.put(("done", sizes))
    except Exception as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}"))
