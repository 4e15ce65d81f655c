"""Web source (``kind: web``): :class:`WebConnector` (registered when ``connector`` is imported)."""

from typing import Any

__all__ = ["WebConnector"]


def __getattr__(attr: str) -> Any:
    # PEP 562: the connector and its libraries load on first use, so that loading a sources file
    # (every DAG parse) can import this package's options model without them.
    if attr == "WebConnector":
        from plugins.connectors.web.connector import WebConnector

        return WebConnector
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
