"""A run window for a crawl: which fetched pages a backfill over ``[start, end)`` processes.

A backfill (or a run given ``window_start`` / ``window_end``) re-syncs what was modified inside
its interval. A web server says when a page was modified only through ``Last-Modified``
(RFC 9110 s8.8.2), so that header decides:

- a date inside ``[start, end)``: the page is processed as in any run;
- a date outside it: the page is reported ``outside_window``: not staged, parsed or indexed,
  but still listed (it exists, so it is never deleted for it) and its links still followed;
- no date, or one that does not parse as an HTTP-date (RFC 9110 s5.6.7): processed, and
  counted apart as ``undated_in_window``, since the server gives nothing to judge it by.

The crawl itself is unchanged: every page is still requested (with its validators), because
only the response tells the date.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import MutableMapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import Enum

__all__ = ["ModifiedWindow", "WindowPlace"]


class WindowPlace(Enum):
    INSIDE = "inside"
    OUTSIDE = "outside"
    UNDATED = "undated"


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    # a naive window bound (a hand-typed conf) is read as UTC, as Airflow's data intervals are
    return moment.replace(tzinfo=dt.UTC) if moment is not None and moment.tzinfo is None else moment


@dataclass(frozen=True, slots=True)
class ModifiedWindow:
    """``[start, end)``; either bound may be open (None)."""

    start: dt.datetime | None = None
    end: dt.datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _aware(self.start))
        object.__setattr__(self, "end", _aware(self.end))

    @property
    def active(self) -> bool:
        return self.start is not None or self.end is not None

    def place(self, last_modified: str | None) -> WindowPlace:
        """Where a page whose ``Last-Modified`` header is ``last_modified`` falls."""
        modified = _http_date(last_modified)
        if modified is None:
            return WindowPlace.UNDATED
        if self.start is not None and modified < self.start:
            return WindowPlace.OUTSIDE
        if self.end is not None and modified >= self.end:
            return WindowPlace.OUTSIDE
        return WindowPlace.INSIDE

    def admits(self, last_modified: str | None, counts: MutableMapping[str, int]) -> bool:
        """Whether a fetched page is processed in this run; counts the verdicts of an active window."""
        if not self.active:
            return True
        place = self.place(last_modified)
        if place is WindowPlace.OUTSIDE:
            counts["outside_window"] += 1
            return False
        counts["undated_in_window" if place is WindowPlace.UNDATED else "inside_window"] += 1
        return True


def _http_date(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    # an HTTP-date is always GMT (RFC 9110 s5.6.7); an obsolete form without a zone is read so too
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
