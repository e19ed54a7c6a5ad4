"""No whitespace change beyond the rewrap (issue 25): what a wrap-study corpus may differ from
the original in, checked on the text prepare-wrap writes (kernattn.studies.wrap.data) and
counted into its meta.json.

Every corpus keeps the original's non-whitespace characters in the same order. Writing the
text as separators s_0 w_1 s_1 ... w_N s_N (w: runs of non-whitespace, s: runs of whitespace,
s_0 and s_N possibly empty), a layout may change only the separators, and only so:

    rewrapped, unwrapped   a newline <-> space swap, one character for one, inside a paragraph:
                           a separator holding a paragraph break (two or more newlines) in the
                           original or the corpus is the same in both
    paragraphs_<n>         such swaps anywhere (an old paragraph break may become spaces or a
                           line break), or the whole separator replaced by exactly "\\n\\n" (a new
                           paragraph break)
    planted_<p>            the original with every newline a space and a newline inserted after
                           every p characters, so every newline is p + 1 after the one before

Anything else raises ValueError naming the word and what changed there: the corpus would test
more than its layout (e.g. double spaces after sentences collapsed into one).
"""

from __future__ import annotations

import re

from ...config.studies import wrap_layout

_WORDS = re.compile(r"(\S+)")
PARAGRAPH_BREAK = "\n\n"


def _split(text: str) -> tuple[list[str], list[str]]:
    pieces = _WORDS.split(text)
    return pieces[1::2], pieces[0::2]  # (words, separators): one more separator than words


def _swaps(a: str, b: str) -> tuple[int, int] | None:
    """(newlines that became spaces, spaces that became newlines) when `b` is `a` with only
    newline <-> space swaps, else None."""
    if len(a) != len(b) or a.replace("\n", " ") != b.replace("\n", " "):
        return None
    pairs = [(x, y) for x, y in zip(a, b) if x != y]
    return sum(x == "\n" for x, _ in pairs), sum(y == "\n" for _, y in pairs)


def _where(words: list[str], i: int) -> str:
    return f"before word {i} ({words[i]!r})" if i < len(words) else "at the end of the text"


def _separator_changes(original: str, out: str, new_paragraphs: bool) -> dict:
    words, seps = _split(original)
    out_words, out_seps = _split(out)
    if out_words != words:
        i = next((k for k, (x, y) in enumerate(zip(words, out_words)) if x != y), min(len(words), len(out_words)))
        raise ValueError(f"the non-whitespace characters differ from the original's {_where(words, i)}")
    counts = {"newlines_to_spaces": 0, "spaces_to_newlines": 0, "paragraph_breaks_added": 0,
              "paragraph_breaks_removed": 0, "separators_changed": 0, "characters_changed": 0}
    for i, (a, b) in enumerate(zip(seps, out_seps)):
        if a == b:
            continue
        counts["separators_changed"] += 1
        had, has = PARAGRAPH_BREAK in a, PARAGRAPH_BREAK in b
        swaps = _swaps(a, b)
        if new_paragraphs and b == PARAGRAPH_BREAK:
            counts["paragraph_breaks_added"] += not had
            counts["characters_changed"] += max(len(a), 2) - sum(x == y for x, y in zip(a, b))
            continue
        if swaps is None or has or (had and not new_paragraphs):
            raise ValueError(f"the whitespace {a!r} became {b!r} {_where(words, i)}: "
                             + ("a paragraph break must be kept as it is" if had or has else
                                "only a newline <-> space swap is a rewrap"))
        counts["paragraph_breaks_removed"] += had
        counts["newlines_to_spaces"] += swaps[0]
        counts["spaces_to_newlines"] += swaps[1]
        counts["characters_changed"] += swaps[0] + swaps[1]
    return counts


def _planted_changes(original: str, out: str, period: int) -> dict:
    stream = original.replace("\n", " ")
    if out.replace("\n", "") != stream:
        raise ValueError("the text without its planted newlines is not the original with newlines as spaces")
    lines = out.split("\n")
    if any(len(line) != period for line in lines[:-1]) or len(lines[-1]) > period:
        bad = next(k for k, line in enumerate(lines) if len(line) != period)
        raise ValueError(f"line {bad + 1} has {len(lines[bad])} characters, not the planted period {period}")
    gone = original.count("\n")
    return {"newlines_to_spaces": gone, "newlines_inserted": len(lines) - 1,
            "characters_changed": gone + len(lines) - 1}


def whitespace_changes(original: str, out: str, corpus: str, width: int) -> dict:
    """What the corpus `corpus` changed in `original` (module docstring): counts, with the
    number of characters of each text; ValueError for any change its layout does not make."""
    kind, value = wrap_layout(corpus, width)
    if kind == "planted":
        counts = _planted_changes(original, out, value)
    else:
        counts = _separator_changes(original, out, new_paragraphs=kind == "paragraphs")
    return {"characters": len(original), "characters_out": len(out), **counts}
