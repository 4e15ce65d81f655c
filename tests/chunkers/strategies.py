"""Hypothesis strategies for chunker tests: documents mixing Chinese, English, code, long sentences,
odd Unicode and tables, plus the oracle that takes chunks apart again."""

from __future__ import annotations

from hypothesis import strategies as st

from include.contract import Block, BlockKind, Position

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "it's",
    "don't",
    "we'll",
    "they're",
    "data",
    "index",
    "chunk",
    "token",
    "Airflow",
    "Python",
    "3.11",
    "v2",
    "e.g.",
    "42",
    "1000000",
    "x_y",
    "snake_case",
    "CamelCase",
]
CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理"
CJK_PUNCT = "，。；！？、：“”（）《》【】—…·"
ODD = "\u3000\xa0\u0301\u200b\r\t'éßΩДж🙂👍🏽ﬁ٣३①Ⅻ々〇ー"  # ideographic space, NBSP, combining mark, ZWSP, ...

english = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join).map(lambda s: s + ".")
chinese = st.text(alphabet=CJK + CJK_PUNCT, min_size=1, max_size=160)
code = st.lists(
    st.tuples(
        st.sampled_from(["", "    ", "        ", "\t"]),
        st.sampled_from(
            [
                "def f(x):",
                "return x + 1",
                "if a == b: pass",
                "print('你好', x)",
                "# comment；注释",
                "}",
                "{",
                "x = [1, 2, 3]",
            ]
        ),
    ),
    min_size=1,
    max_size=12,
).map(lambda lines: "\n".join(i + t for i, t in lines))
long_chinese = st.text(alphabet=CJK, min_size=300, max_size=1200)  # no delimiter at all
long_english = st.integers(50, 400).map(lambda n: " ".join(WORDS[i % len(WORDS)] for i in range(n)))
odd = st.text(alphabet=st.sampled_from(list(ODD + CJK[:20] + "ab1.!?;。\n ")), max_size=60)
anything = st.text(max_size=60)

segment = st.one_of(english, chinese, code, odd, anything, long_chinese, long_english)
separator = st.sampled_from(["", " ", "\n", "\n\n", "\r\n", "\t", "。", "; "])


@st.composite
def block_text(draw: st.DrawFn) -> str:
    parts = draw(st.lists(segment, min_size=1, max_size=4))
    out = parts[0]
    for p in parts[1:]:
        out += draw(separator) + p
    return out


cell = st.one_of(st.sampled_from(["", "Ada", "1815", "伦敦", "数学家", "x; y", "a\nb"]), st.text(max_size=12), chinese)


@st.composite
def table_block(draw: st.DrawFn) -> Block:
    width = draw(st.integers(1, 5))
    header = draw(
        st.one_of(
            st.none(),
            st.lists(st.sampled_from(["Name", "名字", "Born", "Note", "说明"]), min_size=width, max_size=width),
        )
    )
    rows = draw(st.lists(st.lists(cell, min_size=width, max_size=width), min_size=1, max_size=30))
    rows = [r for r in rows if any(c.strip() for c in r)] or [["x"] * width]
    return Block(BlockKind.TABLE, "\n".join("\t".join(r) for r in rows), rows=rows, header=header)


@st.composite
def documents(draw: st.DrawFn) -> list[Block]:
    kinds = draw(st.lists(st.sampled_from(["p", "p", "p", "h", "t", "code"]), min_size=1, max_size=14))
    blocks: list[Block] = []
    for kind in kinds:
        if kind == "h":
            level = draw(st.integers(1, 3))
            title = draw(
                st.one_of(st.sampled_from(["Intro", "安装", "Usage 用法", "A very long heading " * 3]), chinese)
            )
            blocks.append(Block(BlockKind.HEADING, title, level=level))
        elif kind == "t":
            blocks.append(draw(table_block()))
        elif kind == "code":
            blocks.append(Block(BlockKind.CODE, draw(code)))
        else:
            blocks.append(Block(BlockKind.PARAGRAPH, draw(block_text())))
    for i, b in enumerate(blocks):
        b.positions = [Position(line=i + 1)]
    return blocks


def nonws(text: str) -> str:
    return "".join(text.split())
