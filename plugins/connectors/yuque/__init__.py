"""Yuque (语雀) knowledge bases: Markdown/Lake/HTML docs, lakesheets rebuilt as .xlsx, data tables.

The connector is :class:`plugins.connectors.yuque.connector.YuqueConnector` (``kind = "yuque"``,
registered when that module is imported). This package re-exports nothing: loading a sources
file (every DAG parse) imports ``options`` from it, which must not pull in numpy and openpyxl.
"""
