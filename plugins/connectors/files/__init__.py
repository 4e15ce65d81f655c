"""Local directory source (kind ``files``): documents dropped in a folder or a mounted share."""

from typing import Any

__all__ = ["FilesConnector"]


def __getattr__(attr: str) -> Any:
    # PEP 562: the connector and its libraries load on first use, so that loading a sources file
    # (every DAG parse) can import this package's options model without them.
    if attr == "FilesConnector":
        from plugins.connectors.files.connector import FilesConnector

        return FilesConnector
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
