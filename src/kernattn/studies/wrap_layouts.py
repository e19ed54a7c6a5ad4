"""The line-wrap study's corpora by name (config.studies.wrap_layout parses them): what each
counterfactual does to the text, every word kept.

    rewrapped, rewrapped_<w>   every paragraph greedily wrapped at studies.wrap.width / at w
                               (kernattn.tracks.char.analysis.wrap.rewrap)
    unwrapped                  every paragraph on one line (wrap.unwrap)
    planted_<p>                the positive control: every newline gone (paragraph breaks too) and
                               the words' stream cut into lines of exactly p characters, so the
                               only long-range structure of the text is a newline every p + 1
                               characters, a period we chose: a method that reads a bank's bump
                               as a length in the corpus must find p + 1 there
    paragraphs_<n>             the paragraph counterfactual at a fixed line width: the words
                               regrouped into paragraphs of about n characters (as many words as
                               fit), each wrapped at studies.wrap.original_width (the original's
                               line width): the lines stay, the paragraphs change length

Each split is re-laid out on its own (same split) and encoded with the original vocabulary:
every character a layout writes (letters of the words, spaces, newlines) is the original's.
"""

from __future__ import annotations

import textwrap

import numpy as np

from ..config.studies import wrap_layout


def planted(text: str, period: int) -> str:
    """The words of `text` joined by single spaces, cut every `period` characters by a newline."""
    stream = " ".join(text.split())
    return "\n".join(stream[i:i + period] for i in range(0, len(stream), period))


def paragraphs(text: str, length: int, width: int) -> str:
    """The words of `text` in paragraphs of at most `length` characters (a longer word alone),
    blank-line separated, each greedily wrapped at `width`."""
    groups = textwrap.wrap(" ".join(text.split()), width=length, break_long_words=False, break_on_hyphens=False)
    wrapper = textwrap.TextWrapper(width=width, break_long_words=False, break_on_hyphens=False)
    return "\n\n".join("\n".join(wrapper.wrap(g)) for g in groups) + "\n"


def relayout(text: str, name: str, width: int, original_width: int) -> str:
    """`text` laid out as the corpus `name` (module docstring)."""
    from ..tracks.char.analysis import wrap

    kind, value = wrap_layout(name, width)
    if kind == "planted":
        return planted(text, value)
    if kind == "paragraphs":
        return paragraphs(text, value, original_width)
    return wrap.relayout(text, kind, value or width)


def transform_split(train_ids, val_ids, chars: list[str], name: str, width: int,
                    original_width: int) -> tuple[np.ndarray, np.ndarray]:
    """The prepared splits (uint8 ids into `chars`) re-laid out as `name`, each on its own."""
    from ..tracks.char.analysis.wrap import encode_with
    from ..tracks.char.data import decode

    return tuple(encode_with(relayout(decode(ids, chars), name, width, original_width), chars)
                 for ids in (train_ids, val_ids))
