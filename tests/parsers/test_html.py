"""HTML parser: decoding, main-content extraction, block structure, metadata, JS shells."""

from __future__ import annotations

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode, RawDocument
from plugins.parsers import parse_document


def _parse(html: str | bytes, declared: str | None = None, url: str | None = None, name: str = "page.html"):
    data = html.encode("utf-8") if isinstance(html, str) else html
    return parse_document(RawDocument("k", data, name, media_type=declared, url=url))


PAGE = """<!doctype html><html lang="en"><head><title>Guide</title>
<meta name="description" content="A guide page"><link rel="canonical" href="/docs/guide?x=1"></head>
<body><header><a href="/">Site</a> banner text</header>
<nav><ul><li>Home</li><li>About</li></ul></nav>
<div class="layout"><aside>Sidebar junk</aside>
<article><header><h1>Install guide</h1></header>
<p>Intro <b>text</b> with a <a href="/x">link</a>.</p>
<h2>Requirements</h2><ul><li>Python<ul><li>3.11</li></ul></li><li>Redis</li></ul>
<h3>Versions</h3>
<table><thead><tr><th>Package</th><th>Version</th></tr></thead>
<tbody><tr><td>lxml</td><td>6.1</td></tr><tr><td>httpx</td><td>0.28</td></tr></tbody></table>
<h2>Usage</h2><ol><li>first</li><li>second</li></ol>
<div class="highlight-python3"><pre>import tributary
tributary.run()</pre></div>
</article></div>
<footer>Copyright footer</footer><script>console.log("x")</script></body></html>"""


def test_main_content_blocks_and_heading_paths():
    doc = _parse(PAGE, url="https://example.com/docs/guide")
    kinds = [(b.kind, b.text.split("\n")[0]) for b in doc.blocks]
    assert kinds[0] == (BlockKind.HEADING, "Install guide")
    text = doc.text
    for junk in ("banner text", "Home", "Sidebar junk", "Copyright footer", "console.log"):
        assert junk not in text
    heads = [(b.text, b.level, b.heading_path) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert heads == [
        ("Install guide", 1, ["Install guide"]),
        ("Requirements", 2, ["Install guide", "Requirements"]),
        ("Versions", 3, ["Install guide", "Requirements", "Versions"]),
        ("Usage", 2, ["Install guide", "Usage"]),
    ]
    para = next(b for b in doc.blocks if b.kind == BlockKind.PARAGRAPH)
    assert para.text == "Intro text with a link."
    assert para.positions[0].path == "/html/body/div/article/p"
    lists = [b for b in doc.blocks if b.kind == BlockKind.LIST]
    assert lists[0].text == "- Python\n  - 3.11\n- Redis"
    assert lists[1].text == "1. first\n2. second"
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.header == ["Package", "Version"]
    assert table.rows == [["lxml", "6.1"], ["httpx", "0.28"]]
    assert table.heading_path == ["Install guide", "Requirements", "Versions"]
    code = next(b for b in doc.blocks if b.kind == BlockKind.CODE)
    assert code.text == "import tributary\ntributary.run()"
    assert code.metadata["language"] == "python3"
    assert code.heading_path == ["Install guide", "Usage"]


def test_metadata_title_description_language_canonical():
    doc = _parse(PAGE, url="https://example.com/docs/guide")
    assert doc.title == "Guide"
    assert doc.metadata["description"] == "A guide page"
    assert doc.metadata["language"] == "en"
    assert doc.metadata["canonical_url"] == "https://example.com/docs/guide?x=1"
    assert doc.parser == "html"


@pytest.mark.parametrize(
    ("codec", "text"),
    [
        ("gbk", "数据同步平台：增量索引与检索"),
        ("big5", "資料同步平台：增量索引與檢索"),
        ("shift_jis", "データ同期プラットフォーム：増分インデックス"),
        ("euc-kr", "데이터 동기화 플랫폼: 증분 색인"),
    ],
)
def test_decoding_from_header_meta_and_detection(codec: str, text: str):
    body = f"<html><body><main><h1>{text}</h1><p>{text}。{text}</p></main></body></html>"
    data = body.encode(codec)
    # declared in the HTTP header only
    assert _parse(data, declared=f"text/html; charset={codec}").blocks[0].text == text
    # declared in <meta charset> only
    with_meta = f'<html><head><meta charset="{codec}"></head>{body[6:]}'.encode(codec)
    assert _parse(with_meta, declared="text/html").blocks[0].text == text
    # declared through http-equiv
    equiv = f'<html><head><meta http-equiv="Content-Type" content="text/html; charset={codec}"></head>{body[6:]}'
    assert _parse(equiv.encode(codec)).blocks[0].text == text


def test_detection_without_any_declaration():
    text = "这是一个没有声明编码的中文网页，内容足够长以便检测器判断它的编码方式。" * 3
    doc = _parse(f"<html><body><p>{text}</p></body></html>".encode("gb18030"))
    assert doc.blocks[0].text == text


def test_bom_beats_wrong_header():
    doc = _parse(
        "\ufeff<html><body><p>Grüße aus Köln</p></body></html>".encode("utf-8"),
        declared="text/html; charset=iso-8859-1",
    )
    assert doc.blocks[0].text == "Grüße aus Köln"


def test_utf16_with_bom():
    doc = _parse("<html><body><p>统一码</p></body></html>".encode("utf-16"))
    assert doc.blocks[0].text == "统一码"


def test_main_element_and_role_main_and_content_class():
    main = _parse("<body><div>menu a b c</div><main><p>Main text</p></main></body>")
    assert main.text == "Main text"
    role = _parse('<body><div>other words here</div><div role="main"><p>Role text</p></div></body>')
    assert role.text == "Role text"
    cls = _parse(
        '<body><div class="top">x</div><div id="post-content"><p>' + "word " * 50 + "</p></div>"
        '<div class="comments">c</div></body>'
    )
    assert cls.text.startswith("word word") and "c" not in cls.text.split()


def test_javascript_shell_is_reported():
    shell = (
        '<html><head><script src="/app.js"></script></head><body><div id="root"></div>'
        "<noscript>You need to enable JavaScript to run this app.</noscript></body></html>"
    )
    with pytest.raises(ParseError) as err:
        _parse(shell)
    assert err.value.code == ParseErrorCode.EMPTY
    assert "javascript shell" in err.value.message


@pytest.mark.parametrize("split", ["Please enable <b>JavaScript</b> to", "Please <b>enable JavaScript</b> to"])
def test_a_shell_hint_across_inline_markup_reads_as_the_visitor_sees_it(split):
    """A folded paragraph is one text: where the markup splits the hint, it is still found.

    Before the fold kept the whole text, the first form was indexed and the second skipped.
    """
    with pytest.raises(ParseError) as err:
        _parse(f"<html><body><p>{split} view this site.</p><script>x()</script></body></html>")
    assert "asks for JavaScript" in err.value.message


def test_empty_page_without_scripts_is_empty_not_shell():
    with pytest.raises(ParseError) as err:
        _parse("<html><body>   </body></html>")
    assert err.value.code == ParseErrorCode.EMPTY
    assert "javascript" not in err.value.message


def test_table_header_from_th_row_colspan_and_nested_table():
    doc = _parse(
        "<body><table><tr><th>A</th><th colspan=2>B</th></tr><tr><td>1</td><td>2</td><td>3</td></tr>"
        "<tr><td><table><tr><td>inner</td></tr></table></td><td>x</td><td>y</td></tr></table></body>"
    )
    table = doc.blocks[0]
    assert table.header == ["A", "B", "B"]
    assert table.rows == [["1", "2", "3"], ["inner", "x", "y"]]


def test_inline_text_in_containers_and_line_breaks():
    doc = _parse("<body><div>loose <i>text</i><p>para</p>tail<br>next line</div><blockquote>quoted</blockquote></body>")
    assert [b.text for b in doc.blocks] == ["loose text", "para", "tail\nnext line", "quoted"]


def test_hidden_elements_dropped():
    doc = _parse('<body><p>shown</p><p hidden>secret1</p><p style="display: none">secret2</p></body>')
    assert doc.text == "shown"


def test_page_landmark_roles_dropped_only_outside_the_main_content() -> None:
    # Bing marks each result's caption role="contentinfo" inside <main>: it is the content
    page = """<body><div role="banner">Site banner</div>
<main><ol><li><h2>Microsoft - Wikipedia</h2><div role="contentinfo">Microsoft Corporation is a company.</div></li>
<li><h2>Windows</h2><div class="b_caption" role="contentinfo">Windows is an operating system.</div></li></ol></main>
<div role="contentinfo">Copyright 2024 the site</div></body>"""
    text = _parse(page).text
    assert "Microsoft Corporation is a company." in text
    assert "Windows is an operating system." in text
    assert "Site banner" not in text
    assert "Copyright 2024" not in text


def test_blocks_nested_in_inline_context_do_not_run_words_together() -> None:
    # a search result: the URL in a <div> inside the link, the title in an <h2>, in one <li>
    page = """<body><main><ol><li><a href="/r"><div><cite>https://en.wikipedia.org/wiki/Microsoft</cite></div></a>
<h2>Microsoft - Wikipedia</h2><div>Microsoft is a company.</div></li></ol>
<table><tr><td><p>foo<b>bar</b></p><p>next</p></td></tr></table></main></body>"""
    doc = _parse(page)
    assert "https://en.wikipedia.org/wiki/Microsoft Microsoft - Wikipedia Microsoft is a company." in doc.text
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.rows == [["foobar next"]]


def test_no_network_no_entities():
    # An external entity / DTD must never be fetched or expanded.
    html = '<!DOCTYPE html [<!ENTITY x SYSTEM "file:///etc/passwd">]><html><body><p>a &x; b</p></body></html>'
    doc = _parse(html)
    assert "root:" not in doc.text


def test_utf8_page_behind_a_default_latin1_header():
    page = '<html><head><meta charset="utf-8"></head><body><p>Grüße, 你好</p></body></html>'.encode()
    assert _parse(page, declared="text/html; charset=ISO-8859-1").blocks[0].text == "Grüße, 你好"
    # a real latin-1 page (not valid UTF-8) still decodes as declared
    latin = "<html><body><p>Grüße aus Köln</p></body></html>".encode("latin-1")
    assert _parse(latin, declared="text/html; charset=ISO-8859-1").blocks[0].text == "Grüße aus Köln"


LOGIN_WALL = b"""<!doctype html><html><head><title>Sign in</title></head><body>
<main><h1>Sign in to continue</h1><form><p>Your session has expired. Please log in.</p></form></main></body></html>"""


@pytest.mark.parametrize(
    ("name", "declared", "url"),
    [
        ("handbook.pdf", None, None),  # a file saved under a PDF name
        ("download", "application/pdf", "https://example.com/download"),  # the server said PDF
        ("view", "text/html", "https://example.com/files/handbook.pdf?session=1"),  # the URL said PDF
        ("budget.xlsx", "application/octet-stream", None),  # same for an office container
    ],
)
def test_html_where_a_pdf_was_promised_is_a_skipped_login_or_error_page(name: str, declared, url):
    with pytest.raises(ParseError) as err:
        _parse(LOGIN_WALL, declared=declared, url=url, name=name)
    # empty: the run records the item as skipped (plugins/engine/commit.py), not as indexed
    assert err.value.code == ParseErrorCode.EMPTY
    assert err.value.message.startswith("login or error page")


def test_the_same_page_under_an_html_name_is_indexed():
    doc = _parse(LOGIN_WALL, declared="text/html", url="https://example.com/login", name="login.html")
    assert "Please log in" in doc.text
