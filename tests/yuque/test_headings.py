"""The TOC path written in front of a doc's Markdown, its own headings nested under it (point 7)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from include.contract import BlockKind, RawDocument
from plugins.connectors.yuque.headings import with_heading_path
from plugins.parsers.registry import parse_document

BODY = textwrap.dedent(
    """\
    # 第一节

    正文

    ```
    # 不是标题
    ```

    小节
    ---

    - 列表项
    ---

        # 缩进代码

    ## 第二节 ##
    尾
    """
)


def _headings(markdown: str) -> list[tuple[int, str]]:
    doc = parse_document(RawDocument(item_key="k", data=markdown.encode(), file_name="a.md"))
    return [(b.level, b.text) for b in doc.blocks if b.kind == BlockKind.HEADING]


def test_path_heads_the_doc_and_its_headings_nest_under_it():
    out = with_heading_path(BODY, ["知识库", "入门", "手册"], "手册")
    assert _headings(out) == [(1, "知识库"), (2, "入门"), (3, "手册"), (4, "第一节"), (5, "小节"), (5, "第二节")]
    # what is not a heading stays as it was: fenced and indented code, a list then a rule
    assert "```\n# 不是标题\n```" in out and "    # 缩进代码" in out and "- 列表项\n---" in out
    doc = parse_document(RawDocument(item_key="k", data=out.encode(), file_name="a.md"))
    assert doc.title == "手册"  # from the front matter, not the repo heading


def test_levels_cap_at_six_and_long_paths_keep_the_innermost():
    out = with_heading_path("#### 深\n\n文字", ["a", "b", "c", "d", "e", "f", "g"])
    assert _headings(out) == [(1, "c"), (2, "d"), (3, "e"), (4, "f"), (5, "g"), (6, "深")]


def test_own_front_matter_stays_first():
    out = with_heading_path("---\ntitle: 自带\n---\n# H\n", ["库"], "别的")
    assert out.startswith("---\ntitle: 自带\n---\n# 库\n")
    assert _headings(out) == [(1, "库"), (2, "H")]


def test_many_tiny_blocks_stay_bounded():
    # 3.8 MiB of one-line blocks took 1.9 GiB through markdown-it's token list; one pass over the
    # lines stays far below the 1 GiB address-space cap of this child process
    code = textwrap.dedent(
        """\
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from plugins.connectors.yuque.headings import with_heading_path
        out = with_heading_path("# h\\n- a\\n> b\\n" * 330_000, ["库", "目录"])
        print(out.count("### h"))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "330000"
