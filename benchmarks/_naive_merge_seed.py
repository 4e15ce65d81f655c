"""The seed's ``naive_merge`` as the MemoryBear chapter writes it (``nlp/__init__.py:562-606``).

A peer for ``benchmarks/chunkers.py``, kept faithful on purpose, faults included: a token count
computed again for every piece (``num_tokens_from_string`` with ``encode``, 0 on error), the
"is the chunk full" check made *before* a piece is added (so a chunk exceeds the limit by up
to one piece), delimiters dropped from the output, overlap taken in characters.
Only the tokenizer differs: the same offline cl100k_base object as ours (the seed downloads it).
"""

from __future__ import annotations

import re

from plugins.chunkers.tokenizer import get_encoding

_encoder = get_encoding()


def num_tokens_from_string(string: str) -> int:
    """``common/token_utils.py``: encode failures count as 0."""
    try:
        return len(_encoder.encode(string))
    except Exception:
        return 0


def remove_tag(txt: str) -> str:
    """``RAGPdfParser.remove_tag``: strip ``@@page-x0-x1-top-bottom##`` position tags."""
    return re.sub(r"@@[\t0-9.-]+?##", "", txt)


def get_delimiters(delimiters: str) -> str:
    """``nlp/__init__.py:760-776``: backticked multi-char delimiters, longest first."""
    dels = []
    s = 0
    for m in re.finditer(r"`([^`]+)`", delimiters, re.I):
        f, t = m.span()
        dels.append(m.group(1))
        dels.extend(list(delimiters[s:f]))
        s = t
    if s < len(delimiters):
        dels.extend(list(delimiters[s:]))
    dels.sort(key=lambda x: -len(x))
    dels = [re.escape(d) for d in dels if d]
    dels = [d for d in dels if d]
    return "|".join(dels)


def naive_merge(sections, chunk_token_num=128, delimiter="\n。；！？", overlapped_percent=0):
    if not sections:
        return []
    if isinstance(sections, str):
        sections = [sections]
    if isinstance(sections[0], str):
        sections = [(s, "") for s in sections]
    cks, tk_nums = [""], [0]

    def add_chunk(t, pos):
        nonlocal cks, tk_nums
        tnum = num_tokens_from_string(t)
        if tnum < 8:
            pos = ""
        if cks[-1] == "" or tk_nums[-1] > chunk_token_num * (100 - overlapped_percent) / 100.0:
            overlapped = remove_tag(cks[-1])
            t = overlapped[int(len(overlapped) * (100 - overlapped_percent) / 100.0) :] + t
            if t.find(pos) < 0:
                t += pos
            cks.append(t)
            tk_nums.append(tnum)
        else:
            if cks[-1].find(pos) < 0:
                t += pos
            cks[-1] += t
            tk_nums[-1] += tnum

    dels = get_delimiters(delimiter)
    for sec, pos in sections:
        if num_tokens_from_string(sec) < chunk_token_num:
            add_chunk("\n" + sec, pos)
            continue
        for sub_sec in re.split(f"({dels})", sec, flags=re.DOTALL):
            if re.match(f"^{dels}$", sub_sec):
                continue
            add_chunk("\n" + sub_sec, pos)
    return cks
