"""Feishu / Lark drive connector: importing the package registers ``kind: feishu``."""

from plugins.connectors.feishu.connector import FeishuConnector

__all__ = ["FeishuConnector"]
