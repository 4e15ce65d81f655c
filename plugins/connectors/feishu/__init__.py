"""Feishu / Lark drive source (``kind: feishu``).

The connector is :class:`plugins.connectors.feishu.connector.FeishuConnector` (registered when
that module is imported). This package re-exports nothing: loading a sources file (every DAG
parse) imports ``options`` from it, which must not pull in the client and its libraries.
"""
