"""Feishu / Lark drive connector (``kind: feishu``, registered when ``connector`` is imported)."""

from typing import Any

__all__ = ["FeishuConnector"]


def __getattr__(attr: str) -> Any:
    # PEP 562: the connector and its libraries load on first use, so that loading a sources file
    # (every DAG parse) can import this package's options model without them.
    if attr == "FeishuConnector":
        from plugins.connectors.feishu.connector import FeishuConnector

        return FeishuConnector
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
