"""Chunkers: pure ``ParsedDocument -> list[Chunk]`` functions.

Importing this package registers every built-in chunker with the registry.
"""

from plugins.chunkers.registry import chunk_document, get_chunker, load_builtins, register_chunker

__all__ = ["chunk_document", "get_chunker", "register_chunker"]

load_builtins()  # the built-in chunker modules (registry.BUILTIN_CHUNKERS) register themselves
