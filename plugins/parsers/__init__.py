"""Parsers: pure ``bytes -> ParsedDocument`` functions, one module per format family.

The built-in parsers (``registry.BUILTIN_PARSERS``) register themselves when the registry is
first asked for one, not when this package is imported: a DAG file parse imports the engine, and
the parsers' libraries (lxml among them) are no business of the DAG processor.

Options (a source's ``parser:`` mapping, passed as ``parse_document(raw, options)``):

* ``first_row_as_header``: true / false / "auto" (default) for XLSX, CSV/TSV and DOCX/PPTX tables;
* ``include_hidden_sheets``: read hidden XLSX sheets too (default false);
* ``pdf_password``: password for encrypted PDFs (an empty user password is always tried);
* ``isolate``: run the parser in a forked child killed at the time budget (default: PDF only);
* ``engines``: how formats with a choice are read -- ``pdf``: ``auto`` (default: OCR only pages
  without a text layer), ``text`` or ``ocr`` (every page); ``image``: ``ocr`` (default) or ``off``;
  ``embedded_images``: ``off`` (default) or ``ocr`` (images inside documents go to the image
  parser). Checked when a run is planned (``registry.check_engines``), recorded per item;
* ``ocr``: ``languages`` (tesseract models, ``chi_sim+eng``), ``dpi`` (300), ``max_pages`` (40);
* limits, flat or under ``limits:`` -- ``max_bytes`` (256 MiB), ``max_pages`` (5,000),
  ``max_rows`` (1,000,000), ``max_blocks``, ``zip_max_entries`` (100,000),
  ``zip_max_uncompressed`` (512 MiB), ``zip_max_ratio`` (200, per member and for the whole
  package), ``time_budget_s`` (120); for office formats also ``max_chars`` (64 Mi characters of
  output text), ``max_cells`` (20,000,000 spreadsheet cells incl. merge fills and padding) and
  ``xml_max_total`` (64 MiB of XML parts parsed into trees, all parts together); for embedded
  files ``embed_max_depth`` (3), ``embed_max_files`` (1,000) and ``embed_max_total`` (128 MiB),
  across all levels of a document.

Every failure is a :class:`include.contract.ParseError` with a code: ``unsupported``,
``encrypted``, ``corrupt``, ``too_large``, ``bomb``, ``timeout`` or ``empty`` (no text; the reason
says "javascript shell" for script-rendered pages and "needs OCR" for scanned PDFs).
"""

from plugins.parsers.registry import (
    ParseContext,
    get_parser,
    parse_document,
    register_parser,
    sniff_media_type,
)

__all__ = ["ParseContext", "get_parser", "parse_document", "register_parser", "sniff_media_type"]
