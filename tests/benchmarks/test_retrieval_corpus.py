"""The retrieval benchmark's corpus (FAQ entries split into question and answer, the PostgreSQL
questions), its metrics and its choice of fusion rule by leave-one-set-out."""

from __future__ import annotations

import pytest

from benchmarks._retrieval_corpus import answer_page, faq_entries
from benchmarks._retrieval_fusion import (
    PREVIOUS,
    FusionRule,
    SetRankings,
    choose_rule,
    leave_one_set_out,
    score_table,
)
from benchmarks._retrieval_pg import PG_MANUAL, PG_QUESTIONS
from benchmarks.retrieval import document_ranking, recall_at, reciprocal_rank, rrf
from include.contract import RawDocument
from include.index.base import SearchHit
from plugins.parsers.registry import parse_document

SPHINX = """<html><body><div class="body" role="main">
<section id="programming-faq"><h1>Programming FAQ<a class="headerlink" href="#programming-faq">¶</a></h1>
<nav class="contents"><ul><li><a href="#q1">How do I copy a file?</a></li></ul></nav>
<section id="general-questions"><h2>General Questions<a class="headerlink" href="#general-questions">¶</a></h2>
<section id="q1"><h3><a class="toc-backref" href="#id1">How do I copy a file?</a><a class="headerlink" href="#q1">¶</a></h3>
<p>The <code>shutil</code> module contains a <code>copyfile()</code> function.</p>
</section>
<section id="q2"><h3>Why is my loop slow?<a class="headerlink" href="#q2">¶</a></h3>
<p>Move the attribute lookups out of the loop.</p><pre>f = obj.method</pre>
</section>
</section>
<section id="empty"><h2>A heading with nothing under it</h2></section>
</section></div>
<div class="sphinxsidebar"><h3>Navigation</h3><ul><li>Index</li></ul></div>
</body></html>"""

DOCBOOK = """<html><body>
<div class="chapter"><div class="section"><div class="titlepage"><div><div>
<h2 class="title"><a id="s3.1"></a>3.1.\u00a0选择发布版本</h2></div></div></div>
<div class="section"><div class="titlepage"><div><div>
<h3 class="title"><a id="s3.1.2"></a>3.1.2.\u00a0软件包在不同的发布版本中会有不同的版本号吗？</h3></div></div></div>
<p>是的。unstable 中的软件包通常比 stable 中的更新。</p></div>
<div class="section"><div class="titlepage"><div><div>
<h3 class="title"><a id="s3.1.3"></a>3.1.3.\u00a0发布版本的代号</h3></div></div></div>
<p>每个发布版本都有一个代号。</p></div>
</div></div></body></html>"""


def test_sphinx_faq_pairs_each_question_with_its_own_answer() -> None:
    entries = faq_entries(SPHINX, "programming.html")
    assert [(e.anchor, e.question) for e in entries] == [
        ("q1", "How do I copy a file?"),
        ("q2", "Why is my loop slow?"),
    ]
    first, second = entries
    assert "copyfile()" in first.answer_html and "attribute lookups" not in first.answer_html
    assert "attribute lookups" in second.answer_html and "f = obj.method" in second.answer_html


def test_the_answer_document_holds_the_answer_and_not_the_question() -> None:
    entry = faq_entries(SPHINX, "programming.html")[0]
    data = answer_page(entry)
    parsed = parse_document(RawDocument(item_key="q1", data=data, file_name="q1.html", media_type="text/html"))
    text = " ".join(b.text for b in parsed.blocks)
    assert "shutil" in text and "copyfile()" in text
    assert "How do I copy a file" not in text and "¶" not in text
    assert not parsed.title  # the title is searched too: it must not carry the question either


def test_docbook_faq_numbering_is_stripped_and_only_questions_are_kept_when_asked() -> None:
    every = faq_entries(DOCBOOK, "choosing.zh-cn.html")
    assert [e.question for e in every] == ["软件包在不同的发布版本中会有不同的版本号吗？", "发布版本的代号"]
    assert [e.anchor for e in every] == ["s3.1.2", "s3.1.3"]  # the anchor inside the heading
    questions = faq_entries(DOCBOOK, "choosing.zh-cn.html", questions_only=True)
    assert [e.question for e in questions] == ["软件包在不同的发布版本中会有不同的版本号吗？"]
    assert "unstable" in questions[0].answer_html and "版本号吗" not in questions[0].answer_html


def test_documents_rank_by_their_first_chunk_and_metrics_read_that_order() -> None:
    ranking = document_ranking(["a", "b", "a", "c", "b", "d"], depth=3)
    assert ranking == ["a", "b", "c"]
    assert recall_at(ranking, frozenset({"c"}), k=3) == 1.0
    assert recall_at(ranking, frozenset({"c"}), k=2) == 0.0
    assert reciprocal_rank(ranking, frozenset({"b", "c"})) == 0.5
    assert reciprocal_rank(ranking, frozenset({"z"})) == 0.0


def test_rrf_rewards_agreement_and_breaks_ties_by_best_rank() -> None:
    # k 10: x 1/11 + 1/13; y 1/12 + 1/12 (lower); z and w appear once, z at rank 1 beats w at rank 3
    fused = rrf([["x", "y", "w"], ["z", "y", "x"]])
    assert fused[:2] == ["x", "y"]
    assert fused.index("z") < fused.index("w")


def _set(name: str, queries: list[tuple[list[str], list[str], str]]) -> SetRankings:
    """A set from (bm25 chunk ids, vector chunk ids, the relevant chunk) per query; one chunk per document."""
    out = SetRankings(name, {})
    for bm25, vector, relevant in queries:
        out.doc_of.update({c: c for c in [*bm25, *vector]})
        out.relevant.append(frozenset({relevant}))
        out.bm25.append([SearchHit(chunk_id=c, doc_id=c, source="s", score=1.0, text="") for c in bm25])
        out.vector.append([SearchHit(chunk_id=c, doc_id=c, source="s", score=1.0, text="") for c in vector])
    return out


def _table(sets: list[SetRankings], rules: list[FusionRule]):  # type: ignore[no-untyped-def]
    return score_table(sets, 10, document_ranking, recall_at, reciprocal_rank, rules)


# The answer "r": found by one ranking only (the other's first hit ties with it under equal weights,
# and the chunk id breaks the tie), or by both.
VECTOR_RIGHT = (["c1", "c2", "c3"], ["r", "v2", "v3"], "r")  # weight 1: r second; weight 3: first
BM25_RIGHT = (["r", "c2", "c3"], ["v1", "v2", "v3"], "r")  # weight 1: r first; weight 3: fourth
AGREE = (["x", "r", "y"], ["z", "w", "r"], "r")  # first under either weight


def test_the_rule_of_each_fold_is_chosen_without_the_held_out_set() -> None:
    plain, vector_heavy = FusionRule(60, 1.0), FusionRule(60, 3.0)
    rules = [plain, vector_heavy]
    # two sets where the vector ranking is right, one where BM25 is: weight 3 wins on the first two
    sets = [
        _set("v1", [VECTOR_RIGHT, VECTOR_RIGHT, AGREE]),
        _set("v2", [VECTOR_RIGHT, AGREE]),
        _set("b", [BM25_RIGHT, BM25_RIGHT, AGREE]),
    ]
    folds = {f.held_out: f for f in leave_one_set_out(_table(sets, rules), rules)}
    assert folds["b"].rule == vector_heavy  # chosen on v1 and v2 only ...
    assert folds["b"].margin < 0  # ... and it trails BM25 on the set it never saw
    # held out, v1's rule comes from v2 and b: weight 3 trails BM25 on b, weight 1 trails nothing
    assert folds["v1"].rule == plain
    # the fold of a set does not change when that set's own rankings do
    flipped = [sets[0], sets[1], _set("b", [VECTOR_RIGHT, VECTOR_RIGHT, AGREE])]
    assert {f.held_out: f.rule for f in leave_one_set_out(_table(flipped, rules), rules)}["b"] == vector_heavy


def test_equally_good_rules_resolve_to_the_one_nearest_plain_rrf() -> None:
    rules = [FusionRule(10, 2.0), FusionRule(60, 1.0), FusionRule(120, 1.5)]
    sets = [_set("a", [AGREE]), _set("b", [AGREE, AGREE])]
    assert choose_rule(_table(sets, rules), ["a", "b"], rules) == FusionRule(60, 1.0)
    assert FusionRule(60, 3.0) == PREVIOUS  # the default before issue 32, scored beside the choice


def test_the_postgresql_questions_name_pages_the_manual_has() -> None:
    assert len(PG_QUESTIONS) >= 40 and len(set(PG_QUESTIONS)) == len(PG_QUESTIONS)
    assert all(pages and len(set(pages)) == len(pages) for pages in PG_QUESTIONS.values())
    if not PG_MANUAL.is_dir():
        pytest.skip("postgresql-doc-15 is not installed")
    missing = [p for pages in PG_QUESTIONS.values() for p in pages if not (PG_MANUAL / f"{p}.html").is_file()]
    assert missing == []
