"""Fetch one URL with the web ``Fetcher`` in a child process, under an address-space limit.

A decompression bomb that gets past the size cap must not take the shared test machine's
memory with it: the child runs under ``RLIMIT_AS`` and reports what it saw (outcome, wall
time, peak RSS) as one JSON line. Also a measuring tool for RELIABILITY.md figures::

    python -m tests.web.child_fetch bomb    # Content-Encoding: gzip, gzip (4 GiB decoded)
    python -m tests.web.child_fetch slow    # one byte every 5 s, default timeouts
    python -m tests.web.child_fetch bomb --code-root /tmp/old-tree   # the same on other code
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["fetch_in_child"]

_ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import asyncio, json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (__LIMIT__, __LIMIT__))
    sys.path.insert(0, __ROOT__)
    from plugins.connectors.web.fetcher import Fetcher, FetcherConfig
    from plugins.connectors.web.ssrf import AddressGuard

    async def main():
        fetcher = Fetcher(FetcherConfig(user_agent="Tributary-test", **__CONFIG__), AddressGuard(allow=["127.0.0.1"]))
        try:
            return await fetcher.fetch(__URL__)
        finally:
            await fetcher.aclose()

    started = time.monotonic()
    try:
        result = asyncio.run(main())
        outcome = {"error": result.error, "status": result.status, "body_bytes": len(result.body),
                   "wire_bytes": result.wire_bytes, "attempts": result.attempts, "message": result.message}
    except MemoryError:
        outcome = {"error": "MemoryError"}
    outcome["seconds"] = round(time.monotonic() - started, 2)
    # VmHWM, not ru_maxrss: Linux carries the pre-exec (forking pytest) peak into ru_maxrss
    # (exec_mmap keeps the old mm's high-water mark), so a 1 GB test process read as this child's
    with open("/proc/self/status") as status:
        hwm_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    outcome["peak_rss_mb"] = round(hwm_kb / 1024, 1)
    print(json.dumps(outcome))
    """
)


def fetch_in_child(
    url: str,
    config: dict[str, Any],
    *,
    address_space: int = 1_500_000_000,
    code_root: Path = _ROOT,
    timeout: float = 900,
) -> dict[str, Any]:
    """Run ``Fetcher.fetch(url)`` in a fresh interpreter limited to ``address_space`` bytes."""
    source = (
        _CHILD.replace("__LIMIT__", str(address_space))
        .replace("__ROOT__", repr(str(code_root)))
        .replace("__CONFIG__", repr(config))
        .replace("__URL__", repr(url))
    )
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        # A MemoryError can also surface outside the try (in the event loop, at exit).
        return {"error": f"child exited {done.returncode}", "stderr": done.stderr[-2000:]}
    return json.loads(lines[-1])


def main() -> None:
    from tests.support.server import serve_asgi
    from tests.web.fault_server import FaultSite

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=["bomb", "slow"])
    parser.add_argument("--code-root", type=Path, default=_ROOT)
    parser.add_argument("--total-timeout", type=float, default=120.0)
    parser.add_argument("--retries", type=int, default=3)
    args = parser.parse_args()
    site = FaultSite(trickle_seconds=5.0)
    with serve_asgi(site.app()) as base:
        if args.case == "bomb":
            url, config = f"{base}/bomb/gzip-gzip", {"max_body_bytes": 20 * 1024 * 1024}
        else:
            url = f"{base}/trickle.html"
            config = {"total_timeout_seconds": args.total_timeout, "retries": args.retries}
        outcome = fetch_in_child(url, config, code_root=args.code_root)
    outcome["requests_seen_by_server"] = len(site.hits)
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
