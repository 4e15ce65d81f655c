"""Yuque (语雀) knowledge bases: Markdown/Lake/HTML docs, lakesheets rebuilt as .xlsx, data tables.

:class:`YuqueConnector` (``kind = "yuque"``) is registered when ``connector`` is imported.
"""

from typing import Any

__all__ = ["YuqueConnector"]


def __getattr__(attr: str) -> Any:
    # PEP 562: the connector and its libraries load on first use, so that loading a sources file
    # (every DAG parse) can import this package's options model without them.
    if attr == "YuqueConnector":
        from plugins.connectors.yuque.connector import YuqueConnector

        return YuqueConnector
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
