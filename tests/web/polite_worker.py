"""One crawl in its own process, for the shared-politeness test:
``python -m tests.web.polite_worker CONFIG_JSON``; prints the discovery stats as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from include.config import SourceConfig
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.web import WebConnector


def main() -> None:
    config = json.loads(sys.argv[1])
    stage_dir = Path(config.pop("stage_dir"))
    stage_dir.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1_000_000))

    def stage(key: str, data: bytes, file_name: str = "") -> str:
        path = stage_dir / f"{next(counter):06d}.bin"
        path.write_bytes(data)
        return str(path)

    source = SourceConfig(kind="web", name=config.pop("name"), options=config)
    with WebConnector(source) as connector:
        found = connector.discover(DiscoveryRequest(known={}, stage=stage))
    print(json.dumps({"stats": found.stats, "keys": sorted(found.all_keys or ())}))


if __name__ == "__main__":
    main()
