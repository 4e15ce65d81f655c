"""The trigger form of every sync DAG: its Params (checked by Airflow when a run is triggered)
and the DAG's documentation. Plain data: a declarative DAG would carry the same.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from airflow.sdk import Param

__all__ = ["DAG_DOC", "trigger_params"]

# Airflow validates Params with jsonschema but without a format checker, so "format: date-time"
# only drives the UI's picker; the pattern is what refuses "last tuesday" at trigger time.
_ISO_8601 = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$"


def _any_case(word: str) -> str:
    """``token`` -> ``[tT][oO]...``: the pattern also runs in the browser's trigger form, where
    Python's inline ``(?i)`` flag is not valid JavaScript."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


# A key that is a URL with userinfo or a credential query parameter (the engine's check,
# include.config.url_secret, is the authority; this refuses the trigger before a run exists).
_SECRET_WORDS = ("token", "secret", "password", "passwd", "signature", "auth", "api_key", "apikey", "credential")
_SECRET_KEY_PATTERN = (
    r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"
    rf"|[?&;]([^=&#]*[_-])?({'|'.join(_any_case(w) for w in _SECRET_WORDS)})="
    rf"|[?&;]({'|'.join(_any_case(w) for w in ('key', 'sig', 'pwd', 'pass'))})="
)

_PARAMS: dict[str, Param] = {
    "full_resync": Param(
        False,
        type="boolean",
        title="Full resync",
        description="Ignore stored versions and re-process every item (validators are not sent).",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Discover and report what would change; write nothing to the index or the state.",
    ),
    "max_items": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        maximum=1_000_000,
        title="Max items",
        description="Fetch at most this many new or changed items in this run (empty: no limit).",
    ),
    "window_start": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=_ISO_8601,
        title="Window start",
        description=(
            "Only items modified at or after this time (ISO 8601, e.g. 2026-11-01T00:00:00+00:00). "
            "Empty: no lower bound. Backfill runs use their data interval instead."
        ),
    ),
    "window_end": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=_ISO_8601,
        title="Window end",
        description="Only items modified before this time (ISO 8601). Empty: no upper bound.",
    ),
    "only_keys": Param(
        [],
        type="array",
        items={"type": "string", "minLength": 1, "maxLength": 2048, "not": {"pattern": _SECRET_KEY_PATTERN}},
        uniqueItems=True,
        maxItems=10_000,
        title="Only these items",
        description=(
            "Re-sync exactly these items: page URLs (web), file paths (files), doc tokens (Feishu), "
            "<book_id>/<doc_id> (Yuque). One per line; empty means every item. A URL carrying a "
            "credential (token query parameter, user:password@) is refused: use the source's Connection."
        ),
    ),
    "allow_mass_delete": Param(
        False,
        type="boolean",
        title="Allow mass delete",
        description="Let this run delete more than the source's mass-delete threshold of its documents.",
    ),
}

DAG_DOC = """\
### Sync `{source_id}`

Keeps the `{index}` index ({backend}) in sync with this {kind} source, pulling only what
changed since the last successful run.

`discover` → one lane per batch of {batch_size}: `fetch` → `parse` → `chunk` →{embed} `upsert` →
`commit` (state is committed only after the index write succeeded) → `summary`.

Trigger with a config to override: `full_resync`, `dry_run`, `max_items`, `window_start` /
`window_end`, `only_keys`, `allow_mass_delete`. Per-run, per-item lineage:
`python -m plugins.engine.cli run <run_id>`.
"""


def trigger_params() -> dict[str, Any]:
    """A DAG's own copies of the Params: a Param keeps the value it last resolved, so shared
    objects would make one DAG's trigger (or a test resolving a value) every other DAG's default."""
    return copy.deepcopy(_PARAMS)
