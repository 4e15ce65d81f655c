"""Yuque (语雀) knowledge bases: Markdown/Lake/HTML docs, lakesheets rebuilt as .xlsx, data tables.

Importing the package registers :class:`YuqueConnector` (``kind = "yuque"``).
"""

from plugins.connectors.yuque.connector import YuqueConnector

__all__ = ["YuqueConnector"]
