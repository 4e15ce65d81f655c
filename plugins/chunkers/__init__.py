"""Chunkers: pure ``ParsedDocument -> list[Chunk]`` functions.

Importing this package registers every built-in chunker with the registry.
"""

from plugins.chunkers.registry import chunk_document, get_chunker, register_chunker

__all__ = ["chunk_document", "get_chunker", "register_chunker"]

# Built-in chunker modules register themselves on import (keep this list sorted).
from plugins.chunkers import token_chunker  # noqa: F401  ("token" and "heading")
