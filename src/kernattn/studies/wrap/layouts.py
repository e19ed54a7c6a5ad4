"""The line-wrap study's corpora by name (config.studies.wrap_layout parses them): what each
counterfactual does to the text, every word kept.

    rewrapped, rewrapped_<w>   every paragraph greedily wrapped at studies.wrap.width / at w
                               (kernattn.studies.wrap.text.rewrap)
    unwrapped                  every paragraph on one line (wrap.unwrap)
    planted_<p>                the positive control: every newline a space (paragraph breaks too)
                               and the text cut into lines of exactly p characters, so the
                               only long-range structure of the text is a newline every p + 1
                               characters, a period we chose: a method that reads a bank's bump
                               as a length in the corpus must find p + 1 there
    paragraphs_<n>             the paragraph counterfactual at a fixed line width: the words
                               regrouped into paragraphs of about n characters (as many words as
                               fit, a blank line between two), each wrapped at studies.wrap.original_width (the original's
                               line width): the lines stay, the paragraphs change length

Each split is re-laid out on its own (same split) and encoded with the original vocabulary:
every character a layout writes (letters of the words, spaces, newlines) is the original's.
What each may change and nothing more (kernattn.studies.wrap.checks, run on every corpus
prepare-wrap writes): rewrapped and unwrapped trade newlines and spaces one for one inside
paragraphs and keep every paragraph break; paragraphs_<n> trades them anywhere and makes some
separators exactly a blank line; planted_<p> makes every newline a space and inserts its own.
"""

from __future__ import annotations

import numpy as np

from ...config.studies import wrap_layout


def planted(text: str, period: int) -> str:
    """`text` with every newline a space (paragraph breaks too), then a newline inserted after
    every `period` characters: the only newlines are the planted ones."""
    stream = text.replace("\n", " ")
    return "\n".join(stream[i:i + period] for i in range(0, len(stream), period))


def paragraphs(text: str, length: int, width: int) -> str:
    """`text` with every newline a space, regrouped into paragraphs of at most `length`
    characters (a longer word alone; the separator between two becomes exactly a blank line,
    "\n\n"), each greedily wrapped at `width` (wrap.rewrap's rule)."""
    from . import text as wrap

    flat = text.replace("\n", " ")
    cuts = wrap.line_starts(flat, length)
    # each cut is a separator's last space; its other spaces end the group before it: the whole
    # separator becomes the blank line
    groups = [flat[a + 1:b] if b == len(flat) else flat[a + 1:b].rstrip(" ")
              for a, b in zip([-1, *cuts], [*cuts, len(flat)])]
    return "\n\n".join(wrap.break_at(g, wrap.line_starts(g, width)) for g in groups)


def relayout(text: str, name: str, width: int, original_width: int) -> str:
    """`text` laid out as the corpus `name` (module docstring)."""
    from . import text as wrap

    kind, value = wrap_layout(name, width)
    if kind == "planted":
        return planted(text, value)
    if kind == "paragraphs":
        return paragraphs(text, value, original_width)
    return wrap.relayout(text, kind, value or width)


def transform_split(train_ids, val_ids, chars: list[str], name: str, width: int,
                    original_width: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """The prepared splits (uint8 ids into `chars`) re-laid out as `name`, each on its own, and
    per split what the layout changed (checks.whitespace_changes: ValueError for a change
    beyond the layout)."""
    from .text import encode_with
    from ...tracks.char.data import decode
    from .checks import whitespace_changes

    out, changes = [], {}
    for split, ids in (("train", train_ids), ("val", val_ids)):
        text = decode(ids, chars)
        new = relayout(text, name, width, original_width)
        try:
            changes[split] = whitespace_changes(text, new, name, width)
        except ValueError as exc:
            raise ValueError(f"{split} split: {exc}") from None
        out.append(encode_with(new, chars))
    return out[0], out[1], changes
