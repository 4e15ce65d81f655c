"""Run ASGI apps (FastAPI simulators, fault servers) on 127.0.0.1 in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

__all__ = ["free_port", "serve_asgi"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_asgi(app: Any, port: int | None = None, host: str = "127.0.0.1", **tls: str) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (or another loopback ``host``) over a real socket; yields the
    base URL (no trailing slash). ``tls``: uvicorn's ``ssl_certfile`` / ``ssl_keyfile``, for https."""
    port = port or free_port()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", access_log=False, **tls)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"asgi-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"ASGI server on port {port} did not start")
        time.sleep(0.02)
    try:
        yield f"{'https' if tls else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
