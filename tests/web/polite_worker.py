"""One crawl in its own process, for the shared-politeness test:
``python -m tests.web.polite_worker CONFIG_JSON``; prints the discovery stats as JSON."""

from __future__ import annotations

import json
import sys

from include.config import SourceConfig
from include.staging import StagingArea
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.web.connector import WebConnector


def main() -> None:
    config = json.loads(sys.argv[1])
    stage = StagingArea.at(config.pop("stage_dir")).stage_raw  # what the engine hands the connector
    source = SourceConfig(kind="web", name=config.pop("name"), options=config)
    with WebConnector(source) as connector:
        found = connector.discover(DiscoveryRequest(known={}, stage=stage))
    print(json.dumps({"stats": found.stats, "keys": sorted(found.all_keys or ())}))


if __name__ == "__main__":
    main()
