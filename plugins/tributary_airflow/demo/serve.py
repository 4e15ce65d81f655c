"""Serve the demo site on 127.0.0.1 (``python -m plugins.tributary_airflow.demo.serve --port 8765``).

Python's static file server answers ``If-Modified-Since`` with 304, which is all the demo
needs to show an incremental resync; the crawler tests use nginx for ETags as well.
"""

from __future__ import annotations

import argparse
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"

__all__ = ["SITE", "serve_directory"]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def serve_directory(root: Path, port: int = 0) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start a static server for ``root`` on 127.0.0.1 in a daemon thread (port 0: any free one)."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, name="demo-site", daemon=True)
    thread.start()
    return server, thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--root", type=Path, default=SITE)
    args = parser.parse_args()
    server, thread = serve_directory(args.root, args.port)
    print(f"serving {args.root} on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    thread.join()


if __name__ == "__main__":
    main()
