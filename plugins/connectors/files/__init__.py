"""Local directory source (kind ``files``): documents dropped in a folder or a mounted share."""

from plugins.connectors.files.connector import FilesConnector

__all__ = ["FilesConnector"]
