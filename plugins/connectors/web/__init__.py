"""Web source (``kind: web``): a polite, incremental crawler of one site.

The connector is :class:`plugins.connectors.web.connector.WebConnector` (registered when that
module is imported). This package re-exports nothing: loading a sources file (every DAG parse)
imports ``options`` from it, which must not pull in the crawler and its libraries.
"""
