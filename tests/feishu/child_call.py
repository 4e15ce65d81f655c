"""Run one Feishu client call in a child process, under an address-space limit.

A body that gets past the caps must not take the shared test machine's memory with it: the
child runs under ``RLIMIT_AS`` and reports what it saw (outcome, wall time, peak RSS) as one
JSON line. Also a measuring tool for RELIABILITY.md figures (a simulator is started here)::

    python -m tests.feishu.child_call json    # a 1 GiB JSON answer (gzip on the wire), default cap
    python -m tests.feishu.child_call bomb    # a download as gzip of gzip, 1 GiB decoded, 100 MiB cap
    python -m tests.feishu.child_call error   # a 404 download answer of 1 GiB (gzip on the wire)
    python -m tests.feishu.child_call bomb --code-root /tmp/old-tree   # the same on other code
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["call_in_child"]

_ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30

_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (__LIMIT__, __LIMIT__))
    sys.path.insert(0, __ROOT__)
    from plugins.connectors.feishu.client import FeishuClient, FeishuSettings

    started = time.monotonic()
    try:
        with FeishuClient(FeishuSettings(**__SETTINGS__)) as client:
            if __FILE__:
                data = client.download_file(__FILE__, max_bytes=__MAX_BYTES__).data
            else:
                data = client.root_folder_token().encode()
        outcome = {"error": None, "body_bytes": len(data)}
    except MemoryError:
        outcome = {"error": "MemoryError"}
    except Exception as exc:
        outcome = {"error": type(exc).__name__, "message": str(exc)[:300],
                   "retryable": getattr(exc, "retryable", None), "limit": getattr(exc, "limit", None)}
    outcome["seconds"] = round(time.monotonic() - started, 2)
    outcome["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(outcome))
    """
)


def call_in_child(
    settings: dict[str, Any],
    *,
    file_token: str | None = None,
    max_bytes: int = 100 * 1024 * 1024,
    address_space: int = 1_500_000_000,
    code_root: Path = _ROOT,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """``download_file(file_token)`` (or ``root_folder_token()`` without one) with a client of
    ``settings`` (FeishuSettings fields), run on the code under ``code_root``; the outcome."""
    script = (
        _CHILD.replace("__LIMIT__", str(address_space))
        .replace("__ROOT__", repr(str(code_root)))
        .replace("__SETTINGS__", repr(settings))
        .replace("__FILE__", repr(file_token))
        .replace("__MAX_BYTES__", str(max_bytes))
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=code_root, capture_output=True, text=True, timeout=timeout, check=False
    )
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise AssertionError(f"child gave no outcome (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def _case(sim: Any, name: str) -> dict[str, Any]:
    """Set the simulator up for one case; the call's keyword arguments."""
    hostile = sim.hostile
    if name == "json":
        hostile.pad_json, hostile.pad_gzip = GIB, True
        hostile.only = lambda path: path.endswith("/root_folder/meta")
        return {}
    if name == "bomb":
        hostile.bomb_downloads = GIB
        return {"file_token": sim.add("file", "bomb.bin", content=b"small")}
    hostile.pad_json, hostile.pad_gzip, hostile.pad_errors = GIB, True, True
    hostile.only = lambda path: path.endswith("/download")
    return {"file_token": "boxcnNoSuchFile00000000000"}


def main(argv: list[str] | None = None) -> None:
    from tests.simulators.feishu import FeishuSimulator
    from tests.support.server import serve_asgi

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=["json", "bomb", "error"])
    parser.add_argument("--code-root", type=Path, default=_ROOT)
    parser.add_argument("--address-space", type=int, default=3_000_000_000)
    args = parser.parse_args(argv)
    sim = FeishuSimulator()
    kwargs = _case(sim, args.case)
    with serve_asgi(sim.app) as url:
        settings = {"app_id": sim.app_id, "app_secret": sim.app_secret, "host": url, "max_attempts": 1}
        outcome = call_in_child(settings, address_space=args.address_space, code_root=args.code_root, **kwargs)
    print(json.dumps({"case": args.case, "code_root": str(args.code_root), **outcome}))


if __name__ == "__main__":
    main()
