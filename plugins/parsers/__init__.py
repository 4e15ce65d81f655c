"""Parsers: pure ``bytes -> ParsedDocument`` functions, one module per format family.

Importing this package registers every built-in parser with the registry.
"""

from plugins.parsers.registry import ParseContext, get_parser, parse_document, register_parser, sniff_media_type

__all__ = ["ParseContext", "get_parser", "parse_document", "register_parser", "sniff_media_type"]

# Built-in parser modules register themselves on import (sniff first, then sorted).
from plugins.parsers import sniff  # noqa: F401  isort: skip
from plugins.parsers import csv_tsv  # noqa: F401  isort: skip
from plugins.parsers import docx  # noqa: F401  isort: skip
from plugins.parsers import html  # noqa: F401  isort: skip
from plugins.parsers import jsonl  # noqa: F401  isort: skip
from plugins.parsers import legacy  # noqa: F401  isort: skip
from plugins.parsers import markdown  # noqa: F401  isort: skip
from plugins.parsers import pdf  # noqa: F401  isort: skip
from plugins.parsers import pptx  # noqa: F401  isort: skip
from plugins.parsers import text  # noqa: F401  isort: skip
from plugins.parsers import xlsx  # noqa: F401  isort: skip
