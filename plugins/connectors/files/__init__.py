"""Local directory source (``kind: files``): documents dropped in a folder or a mounted share.

The connector is :class:`plugins.connectors.files.connector.FilesConnector` (registered when that
module is imported). This package re-exports nothing, so that loading a sources file (every DAG
parse) imports only ``options`` from it.
"""
