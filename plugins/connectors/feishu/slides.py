"""Slides: the documented export API does not take them; asked once per source, the answer kept.

``export_task/create`` documents ``type`` doc/docx/sheet/bitable and ``file_extension``
docx/pdf/xlsx/csv (so do lark-openapi-mcp and larksuite/cli); slides -> pptx came from a weak
source. So the first discovery that has a slides item to fetch creates one export of it. Refused
as a parameter (400 1069904 / 1069918), the source notes it (``include.stores.source_notes``,
per app: another Connection asks again) and from then on every slides item is skipped with the
reason ``slides_not_exportable``: a skip in the run's counts and lineage, never a failure, so
never a quarantine, and no further request. Accepted, the note says so and slides are exported
like any document. A fetch that is refused anyway (the API changed) notes the refusal too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from include.contract import Change, ChangeKind
from plugins.connectors.base import FetchError
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError, FeishuParamError

__all__ = ["SKIP_REASON", "SlidesGate", "is_slides_refusal"]

log = logging.getLogger(__name__)

SKIP_REASON = "slides_not_exportable"
_REFUSAL_CODES = frozenset({1069904, 1069918})  # invalid param, extension/type mismatch


def is_slides_refusal(exc: FeishuError) -> bool:
    return isinstance(exc, FeishuParamError) and exc.code in _REFUSAL_CODES


class SlidesGate:
    """Whether this source's app may export slides, from its note or from one probe."""

    def __init__(self, notes: Callable[[], Any], source_id: str, app_id: str) -> None:
        self._notes = notes  # opened on first use: most sources have no slides
        self._source = source_id
        self._name = f"feishu.slides_export:{app_id}"

    def known(self) -> bool | None:
        note = self._notes().get(self._source, self._name)
        return None if note is None else bool(note.get("exportable"))

    def remember(self, exportable: bool, code: int | None = None) -> None:
        self._notes().put(self._source, self._name, {"exportable": exportable, "code": code})

    def exportable(self, client: FeishuClient, probe: Change, extension: str) -> bool:
        """The note's answer, else the answer to one export of ``probe`` (kept in the note). A
        failure that says nothing about slides (network, that item gone) decides nothing."""
        if (known := self.known()) is not None:
            return known
        try:
            client.create_export(probe.item_key, "slides", extension)
        except FeishuError as exc:
            if not is_slides_refusal(exc):
                return True
            log.warning("Feishu refused to export slides (%s); slides are skipped from now on", exc.code)
            self.remember(False, exc.code)
            return False
        self.remember(True)
        return True

    def split(self, client: FeishuClient, changes: list[Change], extension: str) -> tuple[list[Change], list[Change]]:
        """(changes to keep, slides to skip): slides to fetch are skipped when not exportable."""
        wanted = [
            c for c in changes if c.metadata.get("feishu_type") == "slides" and c.kind is not ChangeKind.UNCHANGED
        ]
        if not wanted or self.exportable(client, wanted[0], extension):
            return changes, []
        skipped = {c.item_key for c in wanted}
        return [c for c in changes if c.item_key not in skipped], wanted

    def note_fetch_refusals(self, failures: list[tuple[str, FetchError]]) -> None:
        if any(exc.reason == SKIP_REASON for _key, exc in failures):
            self.remember(False)
