"""EPUB 2 and 3: the spine's content documents, in reading order, through the HTML parser.

* ``META-INF/container.xml`` names the package document (OCF 3.0, 3.5.2.1); its manifest and
  spine (EPUB 3.3 Packages, 5.6, 5.7) give the content documents in reading order. Items with
  ``linear="no"`` (notes, answers: content "not part of the default reading order", 5.7.3) come
  after the linear ones, marked ``metadata.linear = False``.
* each XHTML content document is parsed by the registry's ``application/xhtml+xml`` parser
  (the HTML parser) with the time that is left, and its blocks appended with
  ``Position(path=<the document's path in the package>)``;
* a chapter without a heading of its own gets one from the navigation document's ``toc`` nav
  (EPUB 3, 7.4) or the NCX ``navMap`` (EPUB 2 / OPF 2.0.1, 2.4.1), when it has an entry there;
* title, author(s) and language from the package metadata (Dublin Core ``dc:*``);
* a spine item missing from the archive, or one that is no XHTML (an SVG page), is skipped and
  listed in ``metadata.spine_skipped``, a chapter with no text in ``metadata.empty_chapters``.

Encryption (OCF 3.0, 3.5.2.6): a content document ``META-INF/encryption.xml`` lists is never
parsed, whatever the algorithm (font obfuscation meant for fonts scrambles an XHTML file into
garbage all the same); it is listed in ``metadata.encrypted_parts`` and, when no content
document could be read, the book raises ``ParseError(encrypted)``. Encrypted fonts and images
cost nothing: their text is not read.
The archive is checked by the OOXML zip guard (entries, uncompressed size, ratio), the XML
parts parse without entities under the depth limit, and they count against ``xml_max_total``.
"""

from __future__ import annotations

import dataclasses
import posixpath
import zipfile
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, parse_xml
from plugins.parsers._ooxml import check_zip
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.sniff import EPUB

__all__ = ["parse_epub"]

_OCF = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_XHTML = "{http://www.w3.org/1999/xhtml}"
_EPUB_NS = "{http://www.idpf.org/2007/ops}"
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"
# font obfuscation (OCF 3.0, 4; Adobe's older variant): not DRM, the text is readable
_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
_XHTML_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/x-dtbook+xml"})
_PACKAGE_TYPE = "application/oebps-package+xml"


@dataclass(slots=True)
class _Item:
    path: str  # the member's name in the archive
    media_type: str
    properties: str = ""


@dataclass(slots=True)
class _Package:
    opf_path: str
    root: etree._Element
    items: dict[str, _Item] = field(default_factory=dict)
    spine: list[tuple[str, bool]] = field(default_factory=list)  # (idref, linear)
    toc_id: str = ""  # the spine's NCX (EPUB 2)


def _read(zf: zipfile.ZipFile, name: str, budget: list[int]) -> bytes:
    """A member's bytes, charged to the XML budget (``budget[0]`` bytes left); KeyError when absent."""
    info = zf.getinfo(name)
    budget[0] -= info.file_size
    if budget[0] < 0:
        raise ParseError(ParseErrorCode.BOMB, f"epub: parts exceed xml_max_total at {name}")
    try:
        return zf.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"epub: cannot read {name}: {exc}") from exc


def _encrypted_parts(zf: zipfile.ZipFile, budget: list[int]) -> dict[str, str]:
    """Member name -> algorithm of every resource ``META-INF/encryption.xml`` lists.

    Its ``CipherReference`` URIs are relative to the container's root (OCF 3.0, 3.5.2.2). Any
    algorithm counts: font obfuscation applied to a content document scrambles its first
    1040 bytes as surely as DRM does the whole. An entry naming no resource cannot be set
    aside part by part, so unless it is font obfuscation the book is refused (``encrypted``).
    """
    try:
        raw = _read(zf, "META-INF/encryption.xml", budget)
    except KeyError:
        return {}
    encrypted: dict[str, str] = {}
    for data in parse_xml(raw, "epub encryption.xml").iter(f"{_ENC}EncryptedData"):
        method = data.find(f"{_ENC}EncryptionMethod")
        algorithm = ((method.get("Algorithm") if method is not None else None) or "").strip()
        reference = data.find(f"{_ENC}CipherData/{_ENC}CipherReference")
        uri = (reference.get("URI") if reference is not None else None) or ""
        if uri.strip():
            encrypted[_resolve("", uri)] = algorithm or "unknown"
        elif algorithm not in _OBFUSCATION:
            raise ParseError(ParseErrorCode.ENCRYPTED, f"epub: content encrypted with {algorithm or 'unknown'} (DRM)")
    return encrypted


def _resolve(base_file: str, href: str) -> str:
    """An href relative to ``base_file`` as a member name (fragment dropped, %-escapes decoded)."""
    href = unquote(href.split("#", 1)[0].strip())
    return posixpath.normpath(posixpath.join(posixpath.dirname(base_file), href)).lstrip("/")


def _package(zf: zipfile.ZipFile, budget: list[int]) -> _Package:
    try:
        container = parse_xml(_read(zf, "META-INF/container.xml", budget), "epub container.xml")
    except KeyError:
        raise ParseError(ParseErrorCode.CORRUPT, "epub: no META-INF/container.xml") from None
    rootfiles = [r for r in container.iter(f"{_OCF}rootfile") if r.get("full-path")]
    # the first rootfile of the package type is the default rendition (OCF 3.0, 3.5.2.1)
    rootfiles.sort(key=lambda r: (r.get("media-type") or _PACKAGE_TYPE) != _PACKAGE_TYPE)
    if not rootfiles:
        raise ParseError(ParseErrorCode.CORRUPT, "epub: container.xml names no package document")
    opf_path = unquote(rootfiles[0].get("full-path") or "").lstrip("/")
    try:
        root = parse_xml(_read(zf, opf_path, budget), "epub package document")
    except KeyError:
        raise ParseError(ParseErrorCode.CORRUPT, f"epub: package document {opf_path} missing") from None
    pkg = _Package(opf_path, root)
    for item in root.iter(f"{_OPF}item"):
        if item.get("id") and item.get("href"):
            pkg.items[item.get("id") or ""] = _Item(
                _resolve(opf_path, item.get("href") or ""),
                (item.get("media-type") or "").lower(),
                item.get("properties") or "",
            )
    spine = root.find(f"{_OPF}spine")
    if spine is not None:
        pkg.toc_id = spine.get("toc") or ""
        pkg.spine = [(ref.get("idref") or "", ref.get("linear") != "no") for ref in spine.iter(f"{_OPF}itemref")]
    return pkg


def _metadata(pkg: _Package) -> dict[str, Any]:
    meta_el = pkg.root.find(f"{_OPF}metadata")
    out: dict[str, Any] = {}
    if meta_el is None:
        return out
    values = {
        key: [t for el in meta_el.iter(f"{_DC}{key}") if (t := clean_text("".join(el.itertext())))]
        for key in ("title", "creator", "language", "description")
    }
    if values["title"]:
        out["title"] = values["title"][0]
    if values["creator"]:
        out["author"] = ", ".join(dict.fromkeys(values["creator"]))
    if values["language"]:
        out["language"] = values["language"][0]
    if values["description"]:
        out["description"] = values["description"][0]
    return out


def _toc_titles(zf: zipfile.ZipFile, pkg: _Package, budget: list[int], encrypted: dict[str, str]) -> dict[str, str]:
    """Content document path -> its first entry's title in the nav document or the NCX."""
    titles: dict[str, str] = {}
    nav = next((i for i in pkg.items.values() if "nav" in i.properties.split()), None)
    ncx = pkg.items.get(pkg.toc_id) or next(
        (i for i in pkg.items.values() if i.media_type == "application/x-dtbncx+xml"), None
    )
    for source in (nav, ncx):
        if source is None or source.path in encrypted:
            continue
        try:
            root = parse_xml(_read(zf, source.path, budget), f"epub {source.path}")
        except (KeyError, ParseError):
            continue  # a broken table of contents costs the fallback titles only
        entries = _nav_entries(root) if source is nav else _ncx_entries(root)
        for href, title in entries:
            if title:
                titles.setdefault(_resolve(source.path, href), title)
    return titles


def _nav_entries(root: etree._Element) -> list[tuple[str, str]]:
    navs = [n for n in root.iter(f"{_XHTML}nav") if "toc" in (n.get(f"{_EPUB_NS}type") or "").split()]
    return [
        (a.get("href") or "", clean_text("".join(a.itertext()))) for nav in navs[:1] for a in nav.iter(f"{_XHTML}a")
    ]


def _ncx_entries(root: etree._Element) -> list[tuple[str, str]]:
    out = []
    for point in root.iter(f"{_NCX}navPoint"):
        label, content = point.find(f"{_NCX}navLabel"), point.find(f"{_NCX}content")
        if label is not None and content is not None:
            out.append((content.get("src") or "", clean_text("".join(label.itertext()))))
    return out


def _chapter(data: bytes, path: str, ctx: ParseContext, deadline: Deadline, limits: Limits) -> list[Any] | None:
    """The blocks of one content document, or None when it has no text (a cover image page)."""
    spec = get_parser("application/xhtml+xml")
    if spec is None:
        raise ParseError(ParseErrorCode.UNSUPPORTED, "epub: no XHTML parser registered")
    remaining = deadline.remaining
    if remaining <= 0:
        deadline.check(path)
    options = {**ctx.options, "time_budget_s": remaining, "limits": {**dict(ctx.options.get("limits") or {})}}
    options["limits"]["time_budget_s"] = remaining
    sub = dataclasses.replace(
        ctx, file_name=path, media_type="application/xhtml+xml", declared_type=None, url=None, options=options
    )
    try:
        return list(spec.fn(data, sub).blocks)
    except ParseError as exc:
        if exc.code == ParseErrorCode.EMPTY:
            return None
        raise


def _append(builder: BlockBuilder, blocks: list[Any], path: str, toc_title: str | None, linear: bool) -> None:
    pos = [Position(path=path)]
    extra: dict[str, Any] = {} if linear else {"linear": False}
    if toc_title and not any(b.kind == BlockKind.HEADING for b in blocks):
        builder.heading(toc_title, 1, pos, from_toc=True, **extra)
    for b in blocks:
        if b.kind == BlockKind.HEADING:
            builder.heading(b.text, b.level or 1, pos, **extra)
        else:
            builder.add(b.kind, b.text, pos, rows=b.rows, header=b.header, level=b.level, **{**b.metadata, **extra})


@register_parser("epub", "1.0", (EPUB,), ("epub",))
def parse_epub(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    zf = check_zip(data, limits, "epub")
    budget = [limits.xml_max_total]  # package XML and content documents together
    encrypted = _encrypted_parts(zf, budget)
    pkg = _package(zf, budget)
    titles = _toc_titles(zf, pkg, budget, encrypted)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    skipped: list[dict[str, str]] = []
    empty: list[str] = []
    locked: list[dict[str, str]] = []  # encrypted content documents, skipped
    read = 0
    order = [ref for ref in pkg.spine if ref[1]] + [ref for ref in pkg.spine if not ref[1]]
    seen: set[str] = set()
    for idref, linear in order:
        deadline.check("epub spine")
        item = pkg.items.get(idref)
        if item is None or item.path in seen:
            skipped.append({"idref": idref, "reason": "not in the manifest" if item is None else "listed twice"})
            continue
        seen.add(item.path)
        if item.media_type not in _XHTML_TYPES:
            skipped.append({"idref": idref, "path": item.path, "reason": f"not XHTML ({item.media_type})"})
            continue
        if item.path in encrypted:
            locked.append({"path": item.path, "algorithm": encrypted[item.path]})
            continue
        try:
            raw = _read(zf, item.path, budget)
        except KeyError:
            skipped.append({"idref": idref, "path": item.path, "reason": "missing from the archive"})
            continue
        blocks = _chapter(raw, item.path, ctx, deadline, limits)
        if blocks is None:
            empty.append(item.path)
            continue
        read += 1
        _append(builder, blocks, item.path, titles.get(item.path), linear)
    if locked and not read:
        raise ParseError(
            ParseErrorCode.ENCRYPTED,
            f"epub: every readable content document is encrypted ({len(locked)}, e.g. "
            f"{locked[0]['path']} with {locked[0]['algorithm']})",
            {"encrypted_parts": locked},
        )
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "epub: no text in any spine document")
    meta = _metadata(pkg)
    title = meta.pop("title", None)
    meta.update({"chapters": read, "package_document": pkg.opf_path})
    if skipped:
        meta["spine_skipped"] = skipped
    if empty:
        meta["empty_chapters"] = empty
    if locked:
        meta["encrypted_parts"] = locked
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=EPUB, metadata=meta)
