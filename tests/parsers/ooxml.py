"""Hand-written OOXML packages for tests: exact control over the XML the parsers must read."""

from __future__ import annotations

import io
import re
import zipfile

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
NS = (
    f'xmlns:w="{W_NS}" xmlns:r="{R_NS}" '
    'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture" '
    'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
    'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
    'xmlns:v="urn:schemas-microsoft-com:vml"'
)

STYLES = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles xmlns:w="{W_NS}">
<w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/><w:basedOn w:val="Normal"/><w:pPr><w:outlineLvl w:val="0"/></w:pPr></w:style>
<w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="heading 2"/><w:basedOn w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="MyHeading"><w:name w:val="My Custom Heading"/><w:basedOn w:val="Heading2"/></w:style>
<w:style w:type="paragraph" w:styleId="ListNumber"><w:name w:val="List Number"/><w:pPr><w:numPr><w:numId w:val="2"/></w:numPr></w:pPr></w:style>
</w:styles>"""

NUMBERING = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:numbering xmlns:w="{W_NS}">
<w:abstractNum w:abstractNumId="0">
  <w:lvl w:ilvl="0"><w:start w:val="1"/><w:numFmt w:val="bullet"/><w:lvlText w:val="\uf0b7"/></w:lvl>
  <w:lvl w:ilvl="1"><w:start w:val="1"/><w:numFmt w:val="bullet"/><w:lvlText w:val="o"/></w:lvl>
</w:abstractNum>
<w:abstractNum w:abstractNumId="1">
  <w:lvl w:ilvl="0"><w:start w:val="1"/><w:numFmt w:val="decimal"/><w:lvlText w:val="%1."/></w:lvl>
  <w:lvl w:ilvl="1"><w:start w:val="1"/><w:numFmt w:val="lowerLetter"/><w:lvlText w:val="%1.%2)"/></w:lvl>
</w:abstractNum>
<w:num w:numId="1"><w:abstractNumId w:val="0"/></w:num>
<w:num w:numId="2"><w:abstractNumId w:val="1"/></w:num>
</w:numbering>"""

CORE = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties"
 xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.org/dc/terms/"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<dc:title>Hand Built</dc:title><dc:creator>Test Author</dc:creator>
<dcterms:created xsi:type="dcterms:W3CDTF">2024-05-01T10:00:00Z</dcterms:created>
</cp:coreProperties>"""


def build_docx(
    body_xml: str,
    extra_rels: str = "",
    extra_parts: dict[str, bytes] | None = None,
    numbering: str = NUMBERING,
    extra_types: str = "",
) -> bytes:
    ct = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Default Extension="png" ContentType="image/png"/>'
        '<Override PartName="/word/document.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
        '<Override PartName="/word/styles.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/>'
        '<Override PartName="/word/numbering.xml" '
        'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.numbering+xml"/>'
        '<Override PartName="/docProps/core.xml" '
        'ContentType="application/vnd.openxmlformats-package.core-properties+xml"/>'
        f"{extra_types}</Types>"
    )
    rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
        '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties" Target="docProps/core.xml"/>'
        "</Relationships>"
    )
    doc_rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rIdS" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>'
        '<Relationship Id="rIdN" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/numbering" Target="numbering.xml"/>'
        '<Relationship Id="rIdL" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink" Target="https://example.org/spec" TargetMode="External"/>'
        f"{extra_rels}</Relationships>"
    )
    document = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {NS}><w:body>{body_xml}</w:body></w:document>'
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", ct)
        zf.writestr("_rels/.rels", rels)
        zf.writestr("word/document.xml", document)
        zf.writestr("word/_rels/document.xml.rels", doc_rels)
        zf.writestr("word/styles.xml", STYLES)
        zf.writestr("word/numbering.xml", numbering)
        zf.writestr("docProps/core.xml", CORE)
        for name, data in (extra_parts or {}).items():
            zf.writestr(name, data)
    return buf.getvalue()


def p(text: str, style: str | None = None, ppr: str = "") -> str:
    style_xml = f'<w:pStyle w:val="{style}"/>' if style else ""
    return f'<w:p><w:pPr>{style_xml}{ppr}</w:pPr><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


# ISO/IEC 29500-1 Annex A: a Transitional namespace or relationship type and its Strict twin
_TRANSITIONAL_URI = re.compile(
    rb"http://schemas\.openxmlformats\.org/(wordprocessingml|spreadsheetml|presentationml|drawingml|officeDocument)"
    rb"/2006/([A-Za-z-]+)(/[A-Za-z]+)?"
)
_STRICT_NAMES = {b"extended-properties": b"extendedProperties", b"custom-properties": b"customProperties"}


def _strict_uri(m: re.Match[bytes]) -> bytes:
    tail = m.group(3) or b""
    if tail:
        tail = b"/" + _STRICT_NAMES.get(tail[1:], tail[1:])
    return b"http://purl.oclc.org/ooxml/" + m.group(1) + b"/" + _STRICT_NAMES.get(m.group(2), m.group(2)) + tail


def strictify(data: bytes) -> bytes:
    """A Transitional package rewritten with the Strict namespaces and relationship types.

    What Word's "Strict Open XML Document" save does to the URIs; LibreOffice cannot write
    Strict OOXML (its "Office Open XML" filters write Transitional), so tests make it this way.
    """
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename.endswith((".xml", ".rels")):
                body = _TRANSITIONAL_URI.sub(_strict_uri, body)
            dst.writestr(info.filename, body)
    return out.getvalue()


def add_part(
    package: bytes, source_part: str, name: str, data: bytes, rel_type: str, content_type: str, rid: str = "rIdEmb1"
) -> bytes:
    """``package`` with ``data`` stored as part ``name`` and related from ``source_part``.

    How Office embeds a file: the part, its content type, and a relationship (``.../package``
    or ``.../oleObject``) from the part that shows it (ECMA-376 Part 1, 15.2.10-15.2.11).
    """
    src = zipfile.ZipFile(io.BytesIO(package))
    base, leaf = source_part.rsplit("/", 1)
    rels_name = f"{base}/_rels/{leaf}.rels"
    target = name[len(base) + 1 :] if name.startswith(base + "/") else "/" + name
    rel = f'<Relationship Id="{rid}" Type="{rel_type}" Target="{target}"/>'
    override = f'<Override PartName="/{name}" ContentType="{content_type}"/>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        names = src.namelist()
        for info in src.infolist():
            body = src.read(info)
            if info.filename == rels_name:
                body = body.replace(b"</Relationships>", rel.encode() + b"</Relationships>")
            elif info.filename == "[Content_Types].xml":
                body = body.replace(b"</Types>", override.encode() + b"</Types>")
            dst.writestr(info.filename, body)
        if rels_name not in names:
            dst.writestr(
                rels_name,
                '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rel}</Relationships>',
            )
        dst.writestr(name, data)
    return out.getvalue()


PACKAGE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/package"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def with_inflated_sheet(xlsx: bytes, spaces: int = 40 << 20) -> bytes:
    """``xlsx`` whose first worksheet inflates by ``spaces`` bytes of comment (a zip-ratio bomb)."""
    src = zipfile.ZipFile(io.BytesIO(xlsx))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                body = body.replace(b"</sheetData>", b"</sheetData><!--" + b" " * spaces + b"-->")
            dst.writestr(info.filename, body, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return out.getvalue()


IMAGE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/image"


def add_parts(package: bytes, parts: list[tuple[str, str, bytes]], rel_type: str, content_type: str) -> bytes:
    """``package`` with many parts added at once: ``(source part, part name, data)`` each, related
    from its source part as :func:`add_part` relates one (one rewrite of the zip, not one per part)."""
    src = zipfile.ZipFile(io.BytesIO(package))
    rels: dict[str, list[str]] = {}
    overrides: list[str] = []
    for n, (source_part, name, _) in enumerate(parts):
        base, leaf = source_part.rsplit("/", 1)
        target = name[len(base) + 1 :] if name.startswith(base + "/") else "/" + name
        rels.setdefault(f"{base}/_rels/{leaf}.rels", []).append(
            f'<Relationship Id="rIdBulk{n}" Type="{rel_type}" Target="{target}"/>'
        )
        overrides.append(f'<Override PartName="/{name}" ContentType="{content_type}"/>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename in rels:
                body = body.replace(
                    b"</Relationships>", "".join(rels.pop(info.filename)).encode() + b"</Relationships>"
                )
            elif info.filename == "[Content_Types].xml":
                body = body.replace(b"</Types>", "".join(overrides).encode() + b"</Types>")
            dst.writestr(info.filename, body)
        for rels_name, entries in rels.items():
            dst.writestr(
                rels_name,
                '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                f"{''.join(entries)}</Relationships>",
            )
        for _, name, data in parts:
            dst.writestr(name, data)
    return out.getvalue()


def text_docx(*paragraphs: str) -> bytes:
    """A DOCX written by python-docx with one paragraph per argument."""
    import docx

    d = docx.Document()
    for text in paragraphs:
        d.add_paragraph(text)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()
