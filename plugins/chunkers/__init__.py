"""Chunkers: pure ``ParsedDocument -> list[Chunk]`` functions.

The built-in chunkers (``registry.BUILTIN_CHUNKERS``) register themselves when the registry is
first asked for one, not when this package is imported (tiktoken stays out of a DAG file parse).
"""

from plugins.chunkers.registry import chunk_document, get_chunker, register_chunker

__all__ = ["chunk_document", "get_chunker", "register_chunker"]
