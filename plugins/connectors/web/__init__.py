"""Web source (``kind: web``): importing this package registers :class:`WebConnector`."""

from plugins.connectors.web.connector import WebConnector

__all__ = ["WebConnector"]
