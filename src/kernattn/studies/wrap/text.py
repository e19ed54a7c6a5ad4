"""Counterfactual corpora for the line-wrap study (issue 17, gpa-long Section 3.2).

The Dickens mirror is hard-wrapped: its lines are 63-68 characters long and the newline
separations peak at 68 = line length + 1, which gpa-long reads as paragraph length. To see
whether a trained bank's bump follows the line width or the paragraphs, the same text is
re-laid out two ways, keeping every word and every paragraph break:

- rewrapped: each paragraph greedily word-wrapped at `width` characters (default 50): a
  line takes words while they fit; a single word longer than `width` gets a line of its own
  and is never broken (a line exceeds `width` only then);
- unwrapped: each paragraph on one line.

Definitions:
- a paragraph is a maximal run of text without a blank line; paragraph breaks (runs of two
  or more newlines) are kept exactly, so the paragraph-scale structure is unchanged;
- inside a paragraph only line breaks and spaces trade places, one character for one: every
  newline of the paragraph becomes a space, and a rewrap turns the last character of each
  separator where a new line starts back into a newline (the separator's other spaces, e.g. a
  double space after a sentence, stay at the end of the line, as the mirror has them). So a
  counterfactual has the original's length and characters, encoded with the original vocabulary
  (same ids, same vocab.json); kernattn.studies.wrap.checks checks this on every corpus it writes.
- "same split": the train and validation parts of the original are transformed separately
  (`transform_split`), so a counterfactual's validation text is the original validation text
  re-laid out and no paragraph crosses the boundary.
"""

from __future__ import annotations

import re

import numpy as np

DEFAULT_WIDTH = 50
KINDS = ("original", "rewrapped", "unwrapped")
_BREAK = re.compile(r"(\n{2,})")  # a paragraph break: two or more newlines (kept as they are)
_WORD = re.compile(r"\S+")


def _map_paragraphs(text: str, layout) -> str:
    pieces = _BREAK.split(text)
    # re.split with a group alternates text, break, text, ...: only the even pieces are paragraphs
    return "".join(piece if i % 2 else layout(piece.replace("\n", " ")) for i, piece in enumerate(pieces))


def line_starts(flat: str, width: int) -> list[int]:
    """Where a greedy wrap at `width` starts new lines in `flat` (text without newlines): the
    index of each separator's last space. A line takes the next word while the line up to that
    word's end fits in `width`; a first word longer than `width` keeps a line of its own."""
    starts, line_start = [], 0
    for m in _WORD.finditer(flat):
        if m.end() - line_start > width and m.start() > line_start and flat[line_start:m.start()].strip():
            starts.append(m.start() - 1)  # the separator's last space becomes the newline
            line_start = m.start()
    return starts


def break_at(flat: str, positions: list[int], mark: str = "\n") -> str:
    """`flat` with the character at each of `positions` (a space) replaced by `mark`."""
    chars = list(flat)
    for i in positions:
        chars[i] = mark
    return "".join(chars)


def rewrap(text: str, width: int = DEFAULT_WIDTH) -> str:
    """Every paragraph greedily wrapped at `width` characters (module docstring)."""
    if width < 1:
        raise ValueError(f"wrap width must be >= 1, got {width}")
    return _map_paragraphs(text, lambda flat: break_at(flat, line_starts(flat, width)))


def unwrap(text: str) -> str:
    """Every paragraph on one line (module docstring)."""
    return _map_paragraphs(text, lambda flat: flat)


def relayout(text: str, kind: str, width: int = DEFAULT_WIDTH) -> str:
    """`text` laid out as `kind` (one of KINDS; "original" returns it unchanged)."""
    if kind == "original":
        return text
    if kind == "rewrapped":
        return rewrap(text, width)
    if kind == "unwrapped":
        return unwrap(text)
    raise ValueError(f"unknown corpus layout {kind!r}; allowed: {', '.join(KINDS)}")


def encode_with(text: str, chars: list[str]) -> np.ndarray:
    """`text` as uint8 ids into `chars` (a lookup table: the whole corpus in well under a
    second); ValueError naming the characters `chars` lacks."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    table = np.array([ord(c) for c in chars], dtype=np.int64)
    lut = np.full(max(int(table.max(initial=0)), int(cps.max(initial=0))) + 1, -1, dtype=np.int64)
    lut[table] = np.arange(len(chars))
    ids = lut[cps]
    if (ids < 0).any():
        missing = sorted({chr(c) for c in np.unique(cps[ids < 0])})
        raise ValueError(f"characters not in the vocabulary: {', '.join(map(repr, missing[:10]))}")
    return ids.astype(np.uint8)


def transform_split(train_ids, val_ids, chars: list[str], kind: str,
                    width: int = DEFAULT_WIDTH) -> tuple[np.ndarray, np.ndarray]:
    """The prepared splits (uint8 ids into `chars`) re-laid out, each split on its own, and
    encoded with the same vocabulary: what a prepare stage writes for a counterfactual."""
    from ...tracks.char.data import decode

    return tuple(encode_with(relayout(decode(ids, chars), kind, width), chars) for ids in (train_ids, val_ids))
