"""Start a real nginx (Debian ``nginx-light``) on 127.0.0.1 for a directory, with an access log
the tests can read (request start time, status, bytes sent, validators received)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port

__all__ = ["AccessEntry", "NginxServer", "nginx_binary", "requires_nginx", "serve_nginx"]

# Tab-separated; nginx escapes tabs inside values, so splitting on tabs is safe.
_LOG_FORMAT = "\\t".join(
    [
        "$msec",
        "$request_time",
        "$status",
        "$bytes_sent",
        "$request_method",
        "$request_uri",
        "$http_if_none_match",
        "$http_user_agent",
    ]
)


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


requires_nginx = pytest.mark.skipif(
    nginx_binary() is None, reason="nginx binary missing (apt-get install nginx-light; .ci/run installs it)"
)


@dataclass(frozen=True, slots=True)
class AccessEntry:
    start: float  # when nginx started reading the request (msec - request_time), epoch seconds
    status: int
    bytes_sent: int
    method: str
    path: str
    if_none_match: str
    user_agent: str


_PING = "/__ping__"  # the path serve_nginx probes until nginx answers


@dataclass(slots=True)
class NginxServer:
    base: str
    root: Path
    log_path: Path

    def access_log(self) -> list[AccessEntry]:
        entries = []
        for line in self.log_path.read_text().splitlines():
            msec, request_time, status, sent, method, path, inm, agent = line.split("\t")
            if path == _PING:
                # The readiness probe: nginx logs a request after answering it, so the probe's line
                # can land after clear_log() truncated the file.
                continue
            entries.append(
                AccessEntry(
                    start=float(msec) - float(request_time),
                    status=int(status),
                    bytes_sent=int(sent),
                    method=method,
                    path=path,
                    if_none_match="" if inm == "-" else inm,
                    user_agent=agent,
                )
            )
        return entries

    def clear_log(self) -> None:
        # nginx keeps the file open in append mode: truncating in place is safe.
        with open(self.log_path, "w"):
            pass


@contextmanager
def serve_nginx(root: Path, workdir: Path, extra: str = "") -> Iterator[NginxServer]:
    """Serve ``root`` with nginx in the foreground; ``extra`` goes into the server block."""
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx binary missing")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "access.log"
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read pytest's 0700 tmp dirs
    conf = f"""
{user}
worker_processes 1;
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    log_format tributary '{_LOG_FORMAT}';
    access_log {log_path} tributary;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
        {extra}
    }}
}}
"""
    conf_path = workdir / "nginx.conf"
    conf_path.write_text(conf)
    proc = subprocess.Popen(
        [binary, "-p", str(workdir), "-c", str(conf_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                httpx.get(base + _PING, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        server = NginxServer(base, root, log_path)
        server.clear_log()
        yield server
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful stop of master and workers
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
