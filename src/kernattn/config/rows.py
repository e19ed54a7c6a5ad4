"""The one row schema of every track (char `matrix.rows`, `lm.rows`, `vision.rows`) and its
one validator.

A row is a named attention configuration: `variant` is a registry name (or one of the
track's aliases: the LM's `base`, the ViT's `deit` / `vlt` / `gka`), `options` the variant's
options over the track's defaults, `seeds` the seeds it trains (default: the track's), and
for the LM `compute`, how long it trains:

    compute: null                        # the track's own steps (lm.steps or nanochat's rule)
    compute: {match: tokens, row: base}  # the training tokens of row `base`
    compute: {match: flops, row: base}   # the training FLOPs of row `base`
    compute: {tokens: 2778726400}        # an explicit training-token budget

and, for a row that trains a model of one of the documents, `paper`: which model of which
table or figure it reproduces (`paper: {seed: "003", table: 5, model: GKA-Ti}`, or a list of
such where two documents train the same model: static RoPE is in 000's and 001's Figure 2). The report
finds the rows a paper claim compares by this field (report.claims.paper_row), never by their
options; the field does not change what a run computes (it is not in any fingerprint).

Run ids are `<row name>-s<seed>` in every track (`runs_of`). Imports: errors and schema; the
attention registry only inside `check_rows`, when params are loaded.
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import ParamsError
from .schema import positive

MATCH = ("tokens", "flops")
# The four documents (seeds/ of the project) by their numeric ids, and the short keys the README,
# the docs and the report name them by (docs/documents.md).
DOCUMENT_KEYS = {"000": "gpa-short", "001": "gpa-long", "002": "kr-blog", "003": "gka-paper"}
SEEDS = tuple(DOCUMENT_KEYS)
DOCUMENT_IDS = {key: id_ for id_, key in DOCUMENT_KEYS.items()}


def _word(v) -> str | None:
    return None if v.strip() and v.strip() == v else "must be a non-empty name without surrounding spaces"


@dataclass(frozen=True)
class PaperRef:
    """The model of a document's table or figure that a row trains (`paper:` of a row)."""

    # The model's name as that table or figure gives it (e.g. GKA-Ti): a paper claim of the
    # report finds the row it compares by this name.
    model: str = field(metadata={"check": _word})
    table: int | None = field(default=None, metadata=positive("the table's number in the document"))
    figure: int | None = field(default=None, metadata=positive("the figure's number in the document"))
    # The document whose table or figure holds the model, by its key (docs/documents.md).
    document: str | None = field(default=None, metadata={"choices": tuple(DOCUMENT_KEYS.values())})
    # The document by its old numeric id (000-003): still read, with a hint to write `document`.
    seed: str | None = field(default=None, metadata={"choices": SEEDS})

    @property
    def id(self) -> str:
        """The document's numeric id (000-003), as the claims and the report's tables name it."""
        return DOCUMENT_IDS[self.document] if self.document is not None else str(self.seed)

    @property
    def key(self) -> str:
        return DOCUMENT_KEYS[self.id]

    def describe(self) -> str:
        where = f"Table {self.table}" if self.table is not None else f"Figure {self.figure}"
        return f"{self.key}, {where}: {self.model}"


@dataclass(frozen=True)
class Compute:
    """A row's training budget (LM rows): matched to another row, or a token count."""

    # What the row matches of compute.row: its training tokens or its training FLOPs (the
    # steps then follow from this row's own model).
    match: str | None = field(default=None, metadata={"choices": MATCH})
    # The row of the same track whose budget this row matches (with compute.match).
    row: str | None = None
    # An explicit training-token budget: the row trains the whole steps closest to it (instead
    # of match and row).
    tokens: int | None = field(default=None, metadata=positive())

    def describe(self) -> str:
        return f"{self.tokens:,} tokens" if self.tokens is not None else f"matched {self.match} of {self.row}"


@dataclass(frozen=True)
class Row:
    """One row of a track's matrix: a named attention configuration."""

    # The row's name: run ids `<name>-s<seed>` and their folders (unique, a word without '/').
    name: str
    # The attention: a registry name (kernattn.attention, plugins included) or one of the track's
    # aliases (lm: base; vision: deit, vlt, gka).
    variant: str
    # The variant's options (kernattn.attention.options) over the track's defaults for those the
    # row leaves out.
    options: dict[str, Any] = field(default_factory=dict)
    # Which document the row reproduces ("000", "001", "003", "reviewers", "ours"): for the report.
    source: str = "ours"
    # The row's name in the report, its figures and the MLflow tags (empty: the row's name).
    label: str = ""
    seeds: tuple[int, ...] | None = None   # None: the track's seeds
    compute: Compute | None = None         # LM rows only; None: the track's own step count
    # char rows only: the learning-rate factor of the variant-owned parameters (banks, tables,
    # learned RoPE frequencies, GKA's sigma) for this row (None: train.variant_lr_scale). A row
    # at 1 beside one at the scale's own factor is the recipe arm of issue 37.
    variant_lr_scale: float | None = field(default=None, metadata=positive())
    # the documents' models this row trains (module docstring); one mapping or a list of them
    paper: tuple[PaperRef, ...] = ()


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    row: str
    seed: int
    variant: str
    options: dict[str, Any]
    source: str
    label: str
    compute: Compute | None = None
    variant_lr_scale: float | None = None


def runs_of(rows, seeds, only=None) -> list[RunSpec]:
    """Every (row, seed) of `rows` in a stable order (row by row); run_id = '<row>-s<seed>'."""
    keep = set(only) if only is not None else None
    return [RunSpec(f"{r.name}-s{seed}", r.name, seed, r.variant, dict(r.options), r.source, r.label or r.name,
                    r.compute, r.variant_lr_scale)
            for r in rows if keep is None or r.name in keep
            for seed in (r.seeds if r.seeds is not None else seeds)]


def find_in(runs: list[RunSpec], run_id: str, where: str, what: str = "run") -> RunSpec:
    """The run `run_id` of `runs`, or one line (`where`: file and scale) listing the runs there are."""
    by_id = {r.run_id: r for r in runs}
    if run_id not in by_id:
        raise ParamsError(f"{where}: no {what} {run_id!r}; runs: {', '.join(by_id)}")
    return by_id[run_id]


def resolve_attention(variant: str, options: dict, aliases: dict, defaults: dict) -> tuple[str, dict]:
    """(registry name, options): the track's defaults the variant has, then the alias's own
    options, then the row's. AttentionConfigError (one line) for an unknown name."""
    from ..attention import registry

    name, alias_options = aliases.get(variant, (variant, {}))
    if name not in registry.available():
        valid = ", ".join(dict.fromkeys([*aliases, *registry.available()]))
        raise registry.AttentionConfigError(f"unknown attention variant {variant!r}; valid names: {valid} "
                                            f"(a variant of your own: name its file in params.yaml `plugins:`)")
    fields = registry.option_fields(name)
    return name, {k: v for k, v in defaults.items() if k in fields} | dict(alias_options) | dict(options)


def check_lag_table(options: dict, context: int, key: str) -> None:
    """A free lag table shorter than the context fails the first full-length batch: say so at load."""
    from ..attention import AttentionConfigError

    if options.get("position") == "lag_table" and options.get("max_len", 2048) < context:
        raise AttentionConfigError(f"options.max_len={options['max_len']} is shorter than {key}={context}; "
                                   f"raise max_len or lower the context")


def chain(rows, name: str) -> list:
    """Row `name` and the rows its compute refers to, in order (the rows that set its budget)."""
    by_name = {r.name: r for r in rows}
    out = [by_name[name]]
    while out[-1].compute is not None and out[-1].compute.row is not None:
        out.append(by_name[out[-1].compute.row])
    return out


_HINTED: set[tuple[str, int]] = set()


def _check_documents(row, at: str) -> None:
    """Each paper reference names its document once, by key; the old numeric `seed:` is read
    with a one-line hint (once per place and process)."""
    for i, p in enumerate(row.paper):
        if (p.document is None) == (p.seed is None):
            raise ParamsError(f"{at}: paper[{i}] needs its document, e.g. paper: {{document: gka-paper, table: 5, "
                              f"model: GKA-Ti}} (keys: {', '.join(DOCUMENT_KEYS.values())})")
        if p.seed is not None and (row.name, i) not in _HINTED:  # once, not once per scale checked
            _HINTED.add((row.name, i))
            print(f"kernattn: {at}: paper[{i}]: seed: \"{p.seed}\" is the old name of the document; write "
                  f"document: {DOCUMENT_KEYS[p.seed]}", file=sys.stderr)


def check_rows(rows, key: str, where: str, aliases: dict, defaults: dict, compute: bool,
               track_check: Callable[[str, dict], None] | None = None, lr_scale: bool = False) -> None:
    """Every check of a track's rows, each failure one line naming `key`, the row and the fix:
    names unique and non-empty, variant and options valid for the registry (after the track's
    aliases and defaults), `track_check(name, options)` (the model's own limits, raising
    AttentionConfigError), and the compute references (LM: `compute=True`)."""
    from ..attention import AttentionConfigError, make_options

    if not rows:
        raise ParamsError(f"{where}{key} is empty; add at least one row")
    names = [r.name for r in rows]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise ParamsError(f"{where}{key} has two rows named {dup!r}; names must be unique")
    for i, row in enumerate(rows):
        at = f"{where}{key}[{i}] ({row.name})"
        if not row.name or "/" in row.name or row.name.strip() != row.name:
            raise ParamsError(f"{at}: a row name must be a non-empty word (it names run folders)")
        if row.seeds is not None and not row.seeds:
            raise ParamsError(f"{at}: seeds is empty; give at least one seed or leave it out")
        try:
            name, options = resolve_attention(row.variant, row.options, aliases, defaults)
            make_options(name, options)
            if track_check is not None:
                track_check(name, options)
        except AttentionConfigError as exc:
            raise ParamsError(f"{at}: {exc}") from None
        if row.compute is not None:
            _check_compute(row, rows, at, key, compute)
        if row.variant_lr_scale is not None and not lr_scale:
            raise ParamsError(f"{at}: variant_lr_scale is a char row's setting (matrix.rows); this track sets the "
                              f"attention's own parameters' rate in its own section: remove it here")
        if any((p.table is None) == (p.figure is None) for p in row.paper):
            raise ParamsError(f"{at}: paper needs exactly one of table or figure, e.g. "
                              f"paper: {{document: gka-paper, table: 5, model: GKA-Ti}}")
        _check_documents(row, at)
    refs = [(p.id, p.table, p.figure, p.model) for r in rows for p in r.paper]
    if dup := next((x for x in refs if refs.count(x) > 1), None):
        raise ParamsError(f"{where}{key}: two rows give paper {{document: {DOCUMENT_KEYS[dup[0]]}, model: {dup[3]}}} for the same "
                          f"table or figure; a model of a document is trained by one row")
    for row in rows:  # after every reference is known to exist
        _check_acyclic(row, rows, f"{where}{key}")


def _check_compute(row, rows, at: str, key: str, allowed: bool) -> None:
    c, names = row.compute, [r.name for r in rows]
    if not allowed:
        raise ParamsError(f"{at}: compute applies to lm rows only; remove it")
    if c.tokens is not None and (c.match is not None or c.row is not None):
        raise ParamsError(f"{at}: compute has tokens and match/row; give either {{tokens: N}} or {{match, row}}")
    if c.tokens is None and (c.match is None or c.row is None):
        raise ParamsError(f"{at}: compute needs both match ({', '.join(MATCH)}) and row, or tokens")
    if c.row is not None and c.row not in names:
        raise ParamsError(f"{at}: compute.row names unknown row {c.row!r}; rows of {key}: {', '.join(names)}")


def _check_acyclic(row, rows, key: str) -> None:
    by_name, seen = {r.name: r for r in rows}, [row.name]
    current = row
    while current.compute is not None and current.compute.row is not None:
        current = by_name[current.compute.row]
        if current.name in seen:
            raise ParamsError(f"{key}: the compute of row {row.name!r} refers back to itself "
                              f"({' -> '.join([*seen, current.name])}); one row of the cycle needs its own budget")
        seen.append(current.name)
