"""The `studies` section of params.yaml: the experiments the papers leave open (issue 17),
run by `snakemake --cores all studies` (not by the main DAG).

    studies:
      seeds: null                  # null: the matrix's seeds (the wrap and prune studies pair with its runs)
      wrap: {rows: [...], corpora: [rewrapped, unwrapped, ...], width: 50, original_width: 67, tol: 2.0}
      gka_init: {rows: [{track: char, row: gka}, {track: lm, row: gka_tokens}, {track: vision, row: gka}],
                 inits: [1.0, sqrt_d_half, sqrt_d, median], sign_test: sqrt_d, seeds: null}
      prune: {rows: null, k: 1, steps: 100, lr: null}
      extrapolation: {factors: [1, 2, 4, 8], windows: 8, batch: 8}
      out_dir: results/{scale}/studies

- wrap (gpa-long, 3.2): the matrix's GPA `rows` trained again on each counterfactual corpus
  of `corpora` (kernattn.studies.wrap.layouts: rewrapped at `width`, rewrapped_<w>, unwrapped,
  the positive control planted_<p>, the paragraph counterfactual paragraphs_<n> at
  `original_width`); the bump verdict's tolerance `tol` in lags.
- gka_init (gka-paper): each row of `rows` (a track, char / lm / vision, and one of that
  track's rows whose attention is gka: matrix.rows, lm.rows, vision.rows) trained once per
  init of `inits` (a number or a rule of kernattn.attention.options.SIGMA_RULES) and seed: for
  the char track `seeds` (null: the studies' seeds; they pair only with each other), for lm
  and vision the seeds that track trains the row with. The report's test is pre-specified: a one-sided sign test over every (track, seed)
  pair that `sign_test` (an init's label) beats sigma = 1 -> supported / not supported.
  A char row must be a gka row of matrix.rows; an LM or vision row that the scale's
  own lm.rows / vision.rows leave out is left out of the study (its summary lists it), a row
  they list whose attention is not gka is a one-line error.
- prune (gpa-long, 3.1 and 4): for each trained run of the GPA `rows` (null: every GPA row
  the scale trains), the weak heads (or the `k` weakest) removed and the model fine-tuned for
  `steps` steps at `lr` (null: train.lr x train.min_lr_ratio, where training's schedule ended),
  beside the same fine-tuning without removal.
- extrapolation (the reviewers of every position scheme): every trained char and LM run
  scored, without retraining, at each of `factors` times its training context, on the same
  validation text: `windows` non-overlapping windows of the longest length (so windows x
  max(factors) x context targets, the same at every length), `batch` windows per forward pass
  at the training context (fewer at longer lengths: the same tokens per pass). Part of the
  main DAG (kernattn.studies.extrapolation.stages), not of the `studies` target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ParamsError
from .schema import nonneg, positive

WRAP_CORPORA = ("rewrapped", "unwrapped")  # the two that vote on gpa-long's reading (by name)
# every corpus name the wrap study takes (kernattn.studies.wrap.layouts): the two above, other
# widths, the planted-period positive control, the paragraph counterfactual at a fixed line width
CORPUS_NAME = re.compile(r"(rewrapped)(?:_([1-9][0-9]*))?|(unwrapped)|(planted|paragraphs)_([1-9][0-9]*)")
CONTROL_KINDS = ("planted",)  # positive controls: they must move, and never vote


def wrap_layout(name: str, width: int) -> tuple[str, int | None]:
    """(layout kind, its number) of a corpus name: rewrapped -> (rewrapped, width), rewrapped_30
    -> (rewrapped, 30), unwrapped -> (unwrapped, None), planted_40 -> (planted, 40),
    paragraphs_100 -> (paragraphs, 100); ValueError for any other name."""
    m = CORPUS_NAME.fullmatch(name)
    if m is None:
        raise ValueError(f"unknown corpus {name!r}; names: rewrapped, rewrapped_<width>, unwrapped, "
                         f"planted_<period>, paragraphs_<length>")
    if m.group(1):
        return "rewrapped", int(m.group(2)) if m.group(2) else width
    if m.group(3):
        return "unwrapped", None
    return m.group(4), int(m.group(5))
INIT_TRACKS = ("char", "lm", "vision")  # the tracks whose runs the gka_init study can train


@dataclass(frozen=True)
class WrapStudy:
    """gpa-long section 3.2: does the first-layer bump follow the line width? The matrix's GPA
    rows trained again on counterfactual layouts of the corpus (the same words), their bumps
    compared with the original runs' (`kernattn wrap-study`)."""

    # The GPA rows of matrix.rows trained again on each corpus (a row the scale does not train is
    # listed as such in the study's summary).
    rows: tuple[str, ...] = ("gpa_dp_m8", "gpa_m64", "gpa_m64_rope")
    # The counterfactual corpora: rewrapped (at width), `rewrapped_<w>`, unwrapped, `planted_<p>` (the
    # positive control: a newline every p + 1 characters; it never votes), `paragraphs_<n>`.
    corpora: tuple[str, ...] = WRAP_CORPORA
    # Characters per line of the `rewrapped` corpus (each paragraph greedily wrapped at it).
    width: int = field(default=50, metadata=positive())
    original_width: int = field(default=67, metadata=positive())  # the `paragraphs_<n>` corpora's line width
    # The verdict's tolerance in lags: each end of the bump shift's interval is widened by tol.
    tol: float = field(default=2.0, metadata=nonneg())


@dataclass(frozen=True)
class InitRow:
    """One row of the GKA-init study: a track and one of that track's rows whose attention is gka."""

    # The track the row belongs to (its rows: matrix.rows, lm.rows or vision.rows).
    track: str = field(default="char", metadata={"choices": INIT_TRACKS})
    # A row of that track whose attention is gka (an lm or vision row the scale leaves out is
    # left out of the study).
    row: str = "gka"


@dataclass(frozen=True)
class GKAInitStudy:
    """gka-paper gives no init for GKA's bandwidth sigma: each row trained once per init and seed,
    and a pre-specified one-sided sign test of whether `sign_test` beats sigma = 1
    (`kernattn gka-init-study`)."""

    # The rows trained once per init: a track and one of its gka rows each.
    rows: tuple[InitRow, ...] = (InitRow(), InitRow("lm", "gka_tokens"), InitRow("vision", "gka"))
    # The sigma inits tried: a number > 0 or a rule of attention.options.SIGMA_RULES (paper,
    # sqrt_d_half, sqrt_d, median), each once.
    inits: tuple[Any, ...] = (1.0, "sqrt_d_half", "sqrt_d", "median")
    sign_test: str = "sqrt_d"  # the pre-specified init the sign test sets against sigma = 1 (an init's label)
    # the char row's seeds (null: the studies'): its runs pair with each other, not with the
    # matrix's, so they may go beyond matrix.seeds; 6 pairs are the fewest a one-sided sign test
    # at 2.5% can pass with (report.verdicts.studies.sign_gate)
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PruneStudy:
    """gpa-long sections 3.1 and 4: each trained GPA run with its weak heads (or the k weakest)
    removed and fine-tuned, beside the same fine-tuning without removal and with as many random
    heads removed (`kernattn prune`)."""

    # The GPA rows of matrix.rows whose trained runs are pruned (null: every GPA row the scale trains).
    rows: tuple[str, ...] | None = None
    # Heads removed when no bank is below analysis.strength_threshold: the k weakest.
    k: int = field(default=1, metadata=positive())
    # Fine-tuning steps of each arm (pruned, control, random).
    steps: int = field(default=100, metadata=positive())
    # The fine-tuning's constant learning rate (null: train.lr x train.min_lr_ratio, where
    # training's schedule ended).
    lr: float | None = field(default=None, metadata=positive())


def _factors_ok(factors) -> str | None:
    if not factors or factors[0] != 1 or any(b <= a for a, b in zip(factors, factors[1:])):
        return "must be increasing whole multiples of the training context starting at 1 (e.g. [1, 2, 4, 8])"
    return None


@dataclass(frozen=True)
class ExtrapolationStudy:
    """Every trained char and LM run scored, without retraining, at multiples of its training
    context on the same validation text (part of the main DAG; its tables go to
    `results/<scale>/extrapolation/`, beside studies.out_dir)."""

    # The lengths scored, as multiples of the training context: increasing, starting at 1.
    factors: tuple[int, ...] = field(default=(1, 2, 4, 8), metadata={"check": _factors_ok})
    # Non-overlapping windows of the longest length: windows x max(factors) x context validation
    # targets, the same at every length.
    windows: int = field(default=8, metadata=positive())
    # Windows per forward pass at the training context (fewer at longer lengths: the same tokens).
    batch: int = field(default=8, metadata=positive())


@dataclass(frozen=True)
class StudiesParams:
    """The experiments the papers leave open (issue 17): the line-wrap, GKA-init and pruning
    studies, run by `snakemake --cores all studies` outside the main DAG, and the length
    extrapolation, which is part of it."""

    # The seeds of the wrap and prune studies (null: matrix.seeds); each one the matrix trains,
    # since they pair with its runs (also the char GKA-init row's when gka_init.seeds is null).
    seeds: tuple[int, ...] | None = None
    # The line-wrap study (gpa-long section 3.2).
    wrap: WrapStudy = field(default_factory=WrapStudy)
    # The GKA bandwidth-init study (gka-paper).
    gka_init: GKAInitStudy = field(default_factory=GKAInitStudy)
    # The head-pruning study (gpa-long sections 3.1 and 4).
    prune: PruneStudy = field(default_factory=PruneStudy)
    # The length-extrapolation sweep of every trained char and LM run.
    extrapolation: ExtrapolationStudy = field(default_factory=ExtrapolationStudy)
    # Folder of the studies' outputs (wrap/, gka_init/, prune/); {scale} filled in.
    out_dir: str = "results/{scale}/studies"


def seeds(params) -> tuple[int, ...]:
    """The studies' seeds: studies.seeds, or the matrix's."""
    return params.studies.seeds if params.studies.seeds is not None else params.matrix.seeds


def row_seeds(params, row: str) -> tuple[int, ...]:
    """The studies' seeds that `row` trains: a row with its own seeds (a recipe twin trains
    fewer) pairs with only those of its runs."""
    own = next((r.seeds for r in params.matrix.rows if r.name == row), None)
    return tuple(s for s in seeds(params) if own is None or s in own)


def trained_rows(params) -> tuple[str, ...]:
    only = params.matrix.only
    return tuple(r.name for r in params.matrix.rows if only is None or r.name in only)


def wrap_rows(params) -> tuple[str, ...]:
    """studies.wrap.rows that the scale trains (the study compares with their runs; the others
    are listed as not trained in its summary)."""
    return tuple(r for r in params.studies.wrap.rows if r in trained_rows(params))


def prune_rows(params) -> tuple[str, ...]:
    """The rows the prune study reads: studies.prune.rows that the scale trains, or (null)
    every GPA row it trains."""
    gpa = {r.name for r in params.matrix.rows if r.variant == "gpa"}
    rows = params.studies.prune.rows if params.studies.prune.rows is not None else tuple(gpa)
    return tuple(r for r in trained_rows(params) if r in rows and r in gpa)


def check(params, where: str) -> None:
    """Cross-key checks: rows name matrix rows of the right attention, seeds are trained. (A
    row the scale does not train is left out of its study, not an error: a scale that trains a
    subset, matrix.only, runs the studies on what it has.)"""
    from .. import attention

    s, m = params.studies, params.matrix
    rows = {r.name: r for r in m.rows}
    for seed in s.seeds or ():
        if seed not in m.seeds:
            raise ParamsError(f"{where}studies.seeds has {seed}, which the matrix does not train (matrix.seeds: "
                              f"{', '.join(map(str, m.seeds))}); the studies pair with its runs: use those seeds")
    for key, names in (("wrap.rows", s.wrap.rows), ("prune.rows", s.prune.rows or ())):
        for name in names:
            if name not in rows:
                raise ParamsError(f"{where}studies.{key} names unknown row {name!r}; GPA rows: "
                                  f"{', '.join(r for r in rows if rows[r].variant == 'gpa')}")
            if rows[name].variant != "gpa":
                raise ParamsError(f"{where}studies.{key} names {name!r}, whose attention is "
                                  f"{rows[name].variant!r}: it has no kernel banks; name a gpa row")
    for name in s.wrap.corpora:
        try:
            wrap_layout(name, s.wrap.width)
        except ValueError as exc:
            raise ParamsError(f"{where}studies.wrap.corpora has {name!r}: {exc}") from None
    if len(set(s.wrap.corpora)) != len(s.wrap.corpora):
        raise ParamsError(f"{where}studies.wrap.corpora lists a corpus twice ({', '.join(s.wrap.corpora)})")
    for i, row in enumerate(s.gka_init.rows):
        gka_rows = track_gka_rows(params, row.track)
        if row.row not in gka_rows and (row.track == "char" or row.row in track_row_names(params, row.track)):
            raise ParamsError(f"{where}studies.gka_init.rows[{i}].row is {row.row!r}: name a row of "
                              f"{TRACK_ROWS[row.track]} whose attention is gka ({', '.join(gka_rows) or 'none'})")
    if s.gka_init.seeds is not None and not s.gka_init.seeds:
        raise ParamsError(f"{where}studies.gka_init.seeds is empty; give at least one seed or null (the studies' seeds)")
    seeds = list(s.gka_init.seeds or ())
    twice = next((x for i, x in enumerate(seeds) if x in seeds[:i]), None)
    if twice is not None:
        raise ParamsError(f"{where}studies.gka_init.seeds lists seed {twice} twice; each seed once")
    if not s.gka_init.inits:
        raise ParamsError(f"{where}studies.gka_init.inits is empty; give at least one init")
    for i, init in enumerate(s.gka_init.inits):
        try:
            attention.make_options("gka", {"init_sigma": init})
        except attention.AttentionConfigError as exc:
            raise ParamsError(f"{where}studies.gka_init.inits[{i}]: {exc}") from None
    labels = [init_label(v) for v in s.gka_init.inits]
    if len(set(labels)) != len(labels):
        raise ParamsError(f"{where}studies.gka_init.inits lists one init twice ({', '.join(labels)})")
    if s.gka_init.sign_test not in labels or s.gka_init.sign_test == init_label(1.0):
        raise ParamsError(f"{where}studies.gka_init.sign_test is {s.gka_init.sign_test!r}: name an init of "
                          f"studies.gka_init.inits other than 1 ({', '.join(x for x in labels if x != '1')})")


TRACK_ROWS = {"char": "matrix.rows", "lm": "lm.rows", "vision": "vision.rows"}


def track_rows(params, track: str):
    """The rows of `track` at this scale: matrix.rows, lm.rows or vision.rows."""
    return params.matrix.rows if track == "char" else params.lm.rows if track == "lm" else params.vision.rows


def track_row_names(params, track: str) -> list[str]:
    return [r.name for r in track_rows(params, track)]


def init_rows_not_trained(params) -> list[str]:
    """'track:row' of studies.gka_init.rows an LM or vision scale does not list (its own rows
    replace the section's): left out of the study, and said so in its summary."""
    return [f"{r.track}:{r.row}" for r in params.studies.gka_init.rows
            if r.row not in track_row_names(params, r.track)]


def track_gka_rows(params, track: str) -> list[str]:
    """The names of `track`'s rows whose registry attention is gka (the vision and LM aliases
    resolved)."""
    from .lm import ALIASES as LM_ALIASES, lm_defaults
    from .rows import resolve_attention
    from .vision import VARIANTS as VISION_ALIASES, VISION_DEFAULTS

    rows = track_rows(params, track)
    if track == "char":
        return [r.name for r in rows if r.variant == "gka"]
    aliases, defaults = ((LM_ALIASES, lm_defaults(params.lm.rope_base, params.lm.qk_gain)) if track == "lm"
                         else (VISION_ALIASES, VISION_DEFAULTS))
    return [r.name for r in rows if resolve_attention(r.variant, r.options, aliases, defaults)[0] == "gka"]


def init_label(init) -> str:
    """An init as it appears in run ids: 1.0 -> "1", 0.5 -> "0p5", rules by name."""
    if isinstance(init, str):
        return init
    return f"{float(init):g}".replace(".", "p").replace("-", "m").replace("+", "")
