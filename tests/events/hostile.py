"""Hostile callers against a real receiver process, run inside a loopback-only network namespace
(``unshare -n``: nothing can leave the machine whatever the code does).

``python -m tests.events.hostile <dir>`` starts the receiver (uvicorn, one process, the test
receiver of :mod:`tests.events.support`) on 127.0.0.1, measures it, attacks it, measures again
and prints one JSON line; ``... serve <dir> <port>`` is that server.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.events.support import YUQUE_SECRET, default_sources, feishu_event, feishu_request, receiver, sign

CAP = 65_536
TEN_MB = 10 * 1024 * 1024


def serve(tmp: Path, port: int) -> None:
    import uvicorn

    r = receiver(tmp, sources=default_sources(max_body_bytes=CAP, max_per_minute=600))
    uvicorn.run(r.app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _proc(pid: int) -> dict[str, int]:
    """RSS (KiB), threads and child processes of ``pid`` (from /proc)."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    children = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children += 1
    return {"rss_kib": int(status["VmRSS"].split()[0]), "threads": int(status["Threads"]), "children": children}


def _stream_ten_mb(port: int, path: str, declared: bool) -> dict[str, Any]:
    """Send 10 MB (chunked, or with its real Content-Length) in 64 KiB pieces until the server
    answers or cuts us off; -> what was sent and the status line."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {TEN_MB}\r\n\r\n" if declared else "Transfer-Encoding: chunked\r\n\r\n"
    sock.sendall(head.encode())
    sent, piece = 0, b"[" * 65_536
    sock.settimeout(0.5)
    answer = b""
    try:
        while sent < TEN_MB and not answer:
            frame = piece if declared else f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            try:
                sock.sendall(frame)
                sent += len(piece)
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break
            with contextlib.suppress(TimeoutError, BlockingIOError):  # no answer yet: keep sending
                answer = sock.recv(4096)
        sock.settimeout(10)
        while not answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sock.close()
    return {"sent": sent, "status": answer.split(b"\r\n", 1)[0].decode(errors="replace")}


def _slow_headers(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that send half a request line and stop (slowloris)."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /tributary/events/feishu/docs HTTP/1.1\r\nHost: x\r\nContent-Le")
        socks.append(s)
    return socks


def _forged(http: httpx.Client, i: int) -> int:
    body = json.dumps(feishu_event(event_id=f"forged-{i}")).encode()
    headers = {**sign(body, "not-the-key"), "Content-Type": "application/json"}
    return http.post("/feishu/docs", content=body, headers=headers).status_code


def attack(tmp: Path) -> dict[str, Any]:
    port = 18_765
    server = subprocess.Popen([sys.executable, "-m", "tests.events.hostile", "serve", str(tmp), str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    http.post("/feishu/nosuch")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise
                    time.sleep(0.2)
            body, headers = feishu_request(feishu_event(event_id="warm-up"))
            assert http.post("/feishu/docs", content=body, headers=headers).status_code == 200
            before = _proc(server.pid)
            out: dict[str, Any] = {"before": before}
            out["chunked"] = _stream_ten_mb(port, "/feishu/docs", declared=False)
            out["declared"] = _stream_ten_mb(port, "/feishu/docs", declared=True)
            slow = _slow_headers(port, 50)
            with ThreadPoolExecutor(20) as pool:
                out["forged"] = sorted(set(pool.map(lambda i: _forged(http, i), range(300))))
            nested = b"[" * (CAP - 10)
            out["nested"] = http.post(f"/yuque/kb?secret={YUQUE_SECRET}", content=nested).status_code
            statuses = []
            for i in range(1000):
                b, h = feishu_request(feishu_event(event_id=f"burst-{i}"))
                statuses.append(http.post("/feishu/docs", content=b, headers=h).status_code)
            out["burst"] = {str(s): statuses.count(s) for s in sorted(set(statuses))}
            for s in slow:
                s.close()
            time.sleep(1)  # let the server notice the closed connections before it is measured
            out["after"] = _proc(server.pid)
            b, h = feishu_request(feishu_event(event_id="after-all"))
            out["still_serving"] = http.post("/feishu/docs", content=b, headers=h).status_code
        return out
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        result = attack(Path(sys.argv[1]))
        print(json.dumps(result))
        os._exit(0)
