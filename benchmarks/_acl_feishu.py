"""Part (c) of ``python -m benchmarks acl``: permission-sync requests for 5,000 Feishu documents.

It needs the Feishu permission reader (``plugins/connectors/feishu/permissions.py``) and its
simulator routes (``tests/simulators/_feishu_permissions.py``), built beside this benchmark.
Neither was in the tree when this part was written, so it reports itself as not measured, with
the reason, rather than a figure of a reader that does not exist.
"""

from __future__ import annotations

import importlib.util
from typing import Any

_NEEDED = ("plugins.connectors.feishu.permissions", "tests.simulators._feishu_permissions")


def _missing() -> list[str]:
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def run_feishu(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, facts); no rows while the reader is missing."""
    missing = _missing()
    if missing:
        reason = f"not measured: {', '.join(missing)} not in the tree at run time"
    else:
        reason = "not measured: the Feishu reader landed after this part was written (its measurement is still to add)"
    return [], {"summary": reason, "measured": False}
