"""The engine's data-path rules, one small function each, testable alone.

:mod:`~plugins.engine.rules.planning` decides what a run does (forced items, renames, quarantine,
deletions, the mass-delete guard); :mod:`~plugins.engine.rules.committing` turns a finished run's
manifests into item state, lineage rows and counts (deletions, merged versions, failures, the dry
run). The stage functions (``plugins.engine.discover``, ``plugins.engine.commit``) call them in
order and do the I/O around them.
"""
