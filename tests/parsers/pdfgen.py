"""A tiny hand-written PDF builder for tests: exact control over pages, text, images, outline."""

from __future__ import annotations

import zlib


def _obj_bytes(objs: list[bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _stream(content: bytes, extra: str = "") -> bytes:
    return f"<< /Length {len(content)} {extra}>>\nstream\n".encode() + content + b"\nendstream"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def build_pdf(
    pages: list[list[tuple[float, float, float, str]]],
    outline: list[tuple[str, int]] | None = None,
    image_pages: set[int] | None = None,
) -> bytes:
    """``pages``: per page a list of (x, y_from_top, font_size, text); ``outline``: (title, page index);
    ``image_pages``: pages covered by a full-page grey image (a "scan")."""
    image_pages = image_pages or set()
    n = len(pages)
    # objects: 1 catalog, 2 pages, 3 font, 4 image, then per page (page, content), then outline
    first_page = 5
    objs: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    w, h = 200, 260
    pixels = bytes((x * 7 + y * 13) % 256 for y in range(h) for x in range(w))
    objs.append(
        _stream(
            zlib.compress(pixels),
            f"/Type /XObject /Subtype /Image /Width {w} /Height {h} "
            "/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode ",
        )
    )
    kids = []
    for p, items in enumerate(pages):
        page_id = first_page + 2 * p
        kids.append(f"{page_id} 0 R")
        ops = []
        if p in image_pages:
            ops.append("q 595 0 0 842 0 0 cm /Im1 Do Q")
        for x, y, size, text in items:
            ops.append(f"BT /F1 {size} Tf {x} {842 - y} Td ({_esc(text)}) Tj ET")
        content = "\n".join(ops).encode("latin-1")
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {page_id + 1} 0 R "
            "/Resources << /Font << /F1 3 0 R >> /XObject << /Im1 4 0 R >> >> >>".encode()
        )
        objs.append(_stream(content))
    outline_root = None
    if outline:
        outline_root = len(objs) + 1
        items = list(range(outline_root + 1, outline_root + 1 + len(outline)))
        objs.append(f"<< /Type /Outlines /First {items[0]} 0 R /Last {items[-1]} 0 R /Count {len(items)} >>".encode())
        for i, (title, page) in enumerate(outline):
            links = f"/Parent {outline_root} 0 R"
            if i > 0:
                links += f" /Prev {items[i - 1]} 0 R"
            if i < len(items) - 1:
                links += f" /Next {items[i + 1]} 0 R"
            objs.append(
                f"<< /Title ({_esc(title)}) {links} /Dest [{first_page + 2 * page} 0 R /XYZ 0 842 0] >>".encode()
            )
    catalog = "<< /Type /Catalog /Pages 2 0 R"
    if outline_root:
        catalog += f" /Outlines {outline_root} 0 R /PageMode /UseOutlines"
    objs[0] = (catalog + " >>").encode()
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {n} >>".encode()
    return _obj_bytes(objs)


def flate_bomb(inflated: int, chunk: int = 1 << 20) -> bytes:
    """A zlib stream of ``inflated`` spaces (rounded up to ``chunk``), ~1/1000 of that in size.

    Built without ever holding the inflated bytes: after a full flush deflate starts afresh, so
    every further chunk compresses to the same bytes; only the Adler-32 runs over all of it.
    """
    block = b" " * chunk
    comp = zlib.compressobj(9)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    repeat = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    count = max(2, -(-inflated // chunk))
    adler = 1
    for _ in range(count):
        adler = zlib.adler32(block, adler)
    # an empty final stored block, then the checksum (RFC 1950 section 2.2, RFC 1951 3.2.4)
    tail = b"\x03\x00" + adler.to_bytes(4, "big")
    return first + repeat * (count - 1) + tail


def build_flate_bomb_pdf(inflated: int, text: str = "Bomb page") -> bytes:
    """One page whose content stream is a little text and then ``inflated`` bytes of spaces."""
    objs: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents [5 0 R 6 0 R] "
        b"/Resources << /Font << /F1 3 0 R >> >> >>",
        _stream(
            zlib.compress(f"BT /F1 11 Tf 72 742 Td ({_esc(text)}) Tj ET\n".encode("latin-1")), "/Filter /FlateDecode "
        ),
        _stream(flate_bomb(inflated), "/Filter /FlateDecode "),
    ]
    return _obj_bytes(objs)


def build_grid_pdf(rows: int, cols: int, cell: float = 5.0, text: str = "Text beside the grid.") -> bytes:
    """One page: a ruled grid of ``rows`` x ``cols`` cells, ``cell`` points square, each rule its own
    stroked path (``m l S``), in a Flate stream (a 300 x 300 grid is ~4 KB), and a line of ``text``
    above it. The page grows to hold the grid: rules closer than 3 points would snap together."""
    left, top = 36.0, 72.0
    width, height = left * 2 + cols * cell, top + 36.0 + rows * cell
    ops = [f"BT /F1 11 Tf {left} {height - 40} Td ({_esc(text)}) Tj ET", "0.5 w"]
    for r in range(rows + 1):
        y = height - top - r * cell
        ops.append(f"{left} {y:.2f} m {left + cols * cell} {y:.2f} l S")
    for c in range(cols + 1):
        x = left + c * cell
        ops.append(f"{x:.2f} {height - top} m {x:.2f} {height - top - rows * cell} l S")
    return _one_page(zlib.compress("\n".join(ops).encode("latin-1"), 9), width, height)


def build_long_line_pdf(chars: int, word: str = "ab ") -> bytes:
    """One page whose text is a single ``Tj`` of ``chars`` characters (``word`` repeated: spaced
    words, so pdfium puts spaces in the line), small enough to stay on a wide page, Flate-packed."""
    text = (word * (chars // len(word) + 1))[:chars]
    # pdfium reads at most 32,767 characters of one string: the line is many strings, one after another
    shown = " ".join(f"({_esc(text[i : i + 8192])}) Tj" for i in range(0, len(text), 8192))
    content = f"BT /F1 1 Tf 10 400 Td {shown} ET".encode("latin-1")
    return _one_page(zlib.compress(content, 9), 14400.0, 842.0)


def _one_page(deflated_content: bytes, width: float, height: float) -> bytes:
    return _obj_bytes(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width:g} {height:g}] /Contents 5 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>".encode(),
            _stream(deflated_content, "/Filter /FlateDecode "),
        ]
    )
