"""Shared pieces of the web crawler tests: a static-file server and a connector factory."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from include.config import SourceConfig
from include.contract import Change, ChangeKind, VersionEvidence
from include.staging import StagingArea
from plugins.connectors.base import Discovery, DiscoveryRequest
from plugins.connectors.web.connector import WebConnector


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Python's own static file server (Last-Modified / If-Modified-Since / 304) on 127.0.0.1."""
    with serve_handler(functools.partial(_QuietHandler, directory=str(root))) as url:
        yield url


@contextmanager
def serve_handler(handler: Any) -> Iterator[str]:
    """A threading HTTP server of ``handler`` on a free 127.0.0.1 port: its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def make_connector(name: str = "site", **options: Any) -> WebConnector:
    defaults: dict[str, Any] = {"delay_seconds": 0, "allowlist": ["127.0.0.1"], "retries": 0, "concurrency": 2}
    defaults.update(options)
    return WebConnector(SourceConfig(kind="web", name=name, options=defaults))


class Run:
    """One discovery with a staging directory, and what it produced."""

    def __init__(self, connector: WebConnector, stage_dir: Path, known: dict[str, VersionEvidence] | None = None):
        stage = StagingArea.at(stage_dir).stage_raw  # what the engine hands the connector
        self.discovery: Discovery = connector.discover(DiscoveryRequest(known=dict(known or {}), stage=stage))

    @property
    def changes(self) -> list[Change]:
        return self.discovery.changes

    def keys(self, kind: ChangeKind) -> set[str]:
        return {c.item_key for c in self.changes if c.kind == kind}

    def known(self) -> dict[str, VersionEvidence]:
        """What the engine would store after indexing this run's documents."""
        return {c.item_key: c.version for c in self.changes if c.kind != ChangeKind.DELETED}
