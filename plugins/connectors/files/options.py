"""Options of a local-directory source (``SourceConfig.options`` for ``kind: files``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from include.config import EngineOptions

__all__ = ["DEFAULT_MAX_FILE_BYTES", "FilesOptions"]

DEFAULT_MAX_FILE_BYTES = 100 * 1024 * 1024


class FilesOptions(EngineOptions):
    """``options`` of a ``kind: files`` source.

    ``root`` (the directory; ``~`` is expanded), ``include`` (glob patterns relative to the root,
    default every file), ``exclude`` (glob patterns matched against the relative path),
    ``max_file_bytes`` (a larger file is recorded as failed, never read). Plus the engine's
    options (:class:`~include.config.EngineOptions`).
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    root: str = Field(min_length=1)
    include: list[str] = Field(default_factory=lambda: ["**/*"])
    exclude: list[str] = Field(default_factory=list)
    max_file_bytes: int = Field(default=DEFAULT_MAX_FILE_BYTES, ge=1)
