"""The char-level GPT track's sections of params.yaml (gpa-short/gpa-long): data, model, train,
matrix, analysis; and the cross-key checks of these and of the bench section (its rows are
the matrix's). The sections no track owns (tracking, report, bench) are in common.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ParamsError
from .common import BENCH_FAMILIES, RunSettings, run_default
from .rows import Row, check_lag_table, check_rows
from .schema import fraction, nonneg, positive

CLEAN_CHOICES = ("gutenberg", "none")
SCHEDULES = ("cosine", "wsd")
FINAL_EVALS = ("sample", "split")
_CORPUS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_HEX = set("0123456789abcdef")


def corpus_name(doc: str = "") -> dict:
    """data.corpus names a folder (results/<scale>/data/<corpus>) and an MLflow experiment."""
    return {"check": lambda v: None if _CORPUS_NAME.fullmatch(v) else
            "must be a name of letters, digits, '_' and '-' (it names the folder results/<scale>/data/<corpus>)",
            "doc": doc}


def sha256_hex(doc: str = "") -> dict:
    return {"check": lambda v: None if len(v.strip()) == 64 and set(v.strip().lower()) <= _HEX else
            "must be a sha256: 64 hexadecimal digits (or null: not pinned)", "doc": doc}


def http_url(doc: str = "") -> dict:
    return {"check": lambda v: None if v.lower().startswith(("http://", "https://")) else
            "must be an http:// or https:// address (a local file goes in data.mirror)", "doc": doc}


@dataclass(frozen=True)
class UrlSource:
    """One entry of data.urls: a bare URL, or {url: ..., sha256: ...} to pin its bytes."""

    SHORTHAND: ClassVar[str] = "url"
    # The text's http(s) address: downloaded, cached beside data.out_dir and concatenated in
    # order with the other entries.
    url: str = field(metadata=http_url())
    # sha256 of the bytes as served (null: recorded on the first fetch, checked on later ones).
    sha256: str | None = field(default=None, metadata=sha256_hex())


@dataclass(frozen=True)
class DataParams:
    """The char track's corpus (gpa-short/gpa-long: the Dickens novels): where its text comes from
    (a catalogue data set, your URLs or a local file), how it is cleaned and split, and where
    `kernattn prepare` writes it as character ids (train.npy, val.npy, vocab.json, meta.json)."""

    # A name of the user's choosing: outputs go to the {corpus} of out_dir (and of any other
    # path or name that uses it, e.g. tracking.experiment).
    corpus: str = field(default="dickens", metadata=corpus_name())
    # A data set of the catalogue (kernattn/datasets/catalogue.yaml), its texts concatenated in
    # order: found in the data mirror or the cache, else downloaded and verified (null: data.urls).
    dataset: str | None = None
    # Your own texts, read when data.dataset is null: each a URL, or {url, sha256} to pin it.
    urls: tuple[UrlSource, ...] = ()
    # A local file (.txt or .txt.gz) read instead of data.dataset and data.urls.
    mirror: str | None = None
    # sha256 of the mirror file as stored or of its decompressed content (None: not checked).
    sha256: str | None = field(default=None, metadata=sha256_hex())
    # "gutenberg": keep only the bodies between Project Gutenberg's START/END markers (a text
    # without them is an error); "none": keep the whole text.
    clean: str = field(default="none", metadata={"choices": CLEAN_CHOICES})
    # Latin letters with diacritics -> their ASCII letter (gpa-short/gpa-long's 93-symbol Dickens).
    fold_accents: bool = False
    # Fraction of the cleaned corpus held out for validation: its last characters (the first
    # int(n x (1 - val_fraction)) are the training split).
    val_fraction: float = field(default=0.1, metadata=fraction())
    # Keep only the first max_chars characters of the cleaned corpus (None: all).
    max_chars: int | None = field(default=None, metadata=positive())
    # Folder of the prepared corpus (train.npy, val.npy, vocab.json, meta.json); {scale} and
    # {corpus} filled in.
    out_dir: str = "results/{scale}/data/{corpus}"

    def __post_init__(self):
        # Code and tests may give plain URL strings, as the YAML does.
        object.__setattr__(self, "urls", tuple(u if isinstance(u, UrlSource) else UrlSource(u) for u in self.urls))


@dataclass(frozen=True)
class ModelParams:
    """The char-level GPT of gpa-short/gpa-long (tracks/char/model.py): pre-norm blocks of the row's
    attention and a GELU MLP, untied embedding and unembedding, and no position embedding of
    its own (every position signal comes from the attention variant)."""

    # Transformer blocks (gpa-short/gpa-long: 4).
    n_layer: int = field(default=4, metadata=positive())
    # Attention heads per block; d_model must be a multiple of it (gpa-short/gpa-long: 4).
    n_head: int = field(default=4, metadata=positive())
    # Width of the residual stream, split evenly over the heads (gpa-short/gpa-long: 512).
    d_model: int = field(default=512, metadata=positive())
    # Characters per training window: the longest sequence the model takes (gpa-short/gpa-long: 256).
    context: int = field(default=256, metadata=positive())
    # The MLP's hidden width as a multiple of d_model.
    mlp_ratio: int = field(default=4, metadata=positive())
    # Dropout probability after the embedding and on both residual branches (0: off).
    dropout: float = field(default=0.0, metadata=nonneg())


@dataclass(frozen=True)
class TrainParams(RunSettings):
    """The char GPT's schedule; the runtime fields (device, dtype, ...) are RunSettings'."""

    # Training windows (model.context characters each) per optimizer step, over all ranks and
    # micro-batches.
    batch_size: int = field(default=256, metadata=positive())
    # Optimizer steps of a run: the schedule ends there.
    max_steps: int = field(default=200_000, metadata=positive())
    # AdamW's peak learning rate, reached at the end of the warm-up.
    lr: float = field(default=1e-3, metadata=positive())
    # The lr the schedule ends at, as a fraction of lr (cosine at max_steps, or wsd's cooldown end).
    min_lr_ratio: float = field(default=0.1, metadata=nonneg())
    # Steps of linear warm-up, from lr / warmup_steps to lr (0: none).
    warmup_steps: int = field(default=2000, metadata=nonneg())
    # After the warm-up: "cosine" to lr x min_lr_ratio at max_steps (the papers'), or "wsd"
    # (warmup-stable-decay): lr held until the last cooldown_fraction of the run, then linear to
    # lr x min_lr_ratio. A wsd run is the same run as a shorter one up to that shorter one's
    # cooldown, so one run gives its result at several budgets (`budgets`).
    schedule: str = field(default="cosine", metadata={"choices": SCHEDULES})
    # wsd only: the last fraction of a run's steps (of each budget's too) over which the lr falls
    # linearly to lr x min_lr_ratio.
    cooldown_fraction: float = field(default=0.2, metadata=fraction())
    # wsd only: the shorter budgets (steps) read from each run: the run keeps its checkpoint at
    # each budget's cooldown start and `kernattn cooldown` branches the cooldown from it
    # (`results/<scale>/runs/budgets/<run>-b<budget>/`): the budget sweep of issue 37.
    budgets: tuple[int, ...] = ()
    # AdamW's decoupled weight decay, on the nn.Linear weights only (none on biases, LayerNorms,
    # the token embedding and the variant-owned parameters).
    weight_decay: float = field(default=0.1, metadata=nonneg())
    # lr of the variant-owned parameters (GPA banks, GKA log sigma, T5 / lag tables, learned
    # RoPE frequencies) = lr x this, on the same schedule. 1: the papers' one lr. Adam moves a
    # parameter by at most ~lr per step, so a bank read by a claim can only settle within a
    # short schedule if its lr lets it arrive early (report gate "converged", issue 25).
    variant_lr_scale: float = field(default=1.0, metadata=positive())
    # AdamW's beta1 (first-moment decay).
    beta1: float = field(default=0.9, metadata=fraction())
    # AdamW's beta2 (second-moment decay).
    beta2: float = field(default=0.95, metadata=fraction())
    # Steps between validation evaluations (also at step 0 and at the end); the training loss is
    # logged every eval_every // 10 steps.
    eval_every: int = field(default=2000, metadata=positive())
    # Batches of batch_size fixed validation windows each evaluation scores (the same windows
    # for every evaluation of every run).
    eval_batches: int = field(default=50, metadata=positive())
    # The last evaluation, the one a verdict reads: "split" scores every non-overlapping window
    # of the validation split (and records the standard error of its mean over those windows),
    # "sample" the eval_batches x batch_size fixed windows of the curve (a sample of the split).
    final_eval: str = field(default="split", metadata={"choices": FINAL_EVALS})
    checkpoint_every: int = run_default("checkpoint_every", 5000)
    out_dir: str = run_default("out_dir", "results/runs")


@dataclass(frozen=True)
class MatrixParams:
    """The char track's experiment matrix: the rows (named attention configurations, the row
    schema of config.rows) and the seeds each trains; run ids are `<row>-s<seed>`."""

    # The seeds every row trains unless it names its own.
    seeds: tuple[int, ...] = (0, 1, 2)
    rows: tuple[Row, ...] = ()  # config.rows: the one row schema of every track
    # Names of rows to run (None: all): smaller scales run a subset.
    only: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AnalysisParams:
    """GPA interpretability (gpa-long sections 3.1-3.2 and 4): `kernattn analyze-gpa`."""

    # Characters sampled from each trained model for its newline histogram (001: 50,000),
    # as `streams` independent streams of ceil(sample_chars / streams) characters.
    sample_chars: int = field(default=50_000, metadata=positive())
    # Sampled streams, drawn side by side in one batch, each prompted with a random validation
    # window of model.context characters.
    streams: int = field(default=50, metadata=positive())
    # Sampling temperature: the logits are divided by it (1: the model's own distribution).
    temperature: float = field(default=1.0, metadata=positive())
    # Seed of the prompts, the draws and the bootstrap: the same for every run.
    sample_seed: int = field(default=0, metadata=nonneg())
    # The bump: the most prominent local maximum of G(lag) at lags >= bump_min_lag.
    bump_min_lag: int = field(default=10, metadata=positive())
    # A bank is flagged weak when its bias spans less than this many logit units over lags.
    strength_threshold: float = field(default=0.1, metadata=nonneg())
    # Newline separations are histogrammed up to this lag (longer ones: one overflow count).
    max_separation: int = field(default=400, metadata=positive())
    # Resamples of the sampled streams for the interval of the generated text's peak.
    bootstrap: int = field(default=1000, metadata=positive())
    # Folder of the analyses: corpus/ (kernattn analyze-corpus) and one folder per GPA run
    # (kernattn analyze-gpa).
    out_dir: str = "results/analysis"


def cooldown_start(budget: int, fraction: float) -> int:
    """The step at which a wsd run of `budget` steps starts its cooldown (its lr still the peak's)."""
    return budget - round(budget * fraction)


def check_budgets(tp: TrainParams, where: str) -> None:
    """train.budgets: wsd only, each shorter than max_steps, its cooldown after the warm-up."""
    if not tp.budgets:
        return
    if tp.schedule != "wsd":
        raise ParamsError(f"{where}train.budgets needs train.schedule: wsd (a cosine run of max_steps is not a "
                          f"shorter run up to any step); set schedule: wsd or budgets: []")
    for b in tp.budgets:
        if not 0 < b < tp.max_steps or cooldown_start(b, tp.cooldown_fraction) < tp.warmup_steps:
            raise ParamsError(f"{where}train.budgets has {b}: each budget must be below train.max_steps="
                              f"{tp.max_steps} and start its cooldown (step {cooldown_start(b, tp.cooldown_fraction)}) "
                              f"after the warm-up's {tp.warmup_steps} steps")
    if len(set(tp.budgets)) != len(tp.budgets):
        raise ParamsError(f"{where}train.budgets lists a budget twice: {list(tp.budgets)}")


def check(params, where: str) -> None:
    """The cross-key checks of the char sections (rows, seeds, bench rows, widths, options);
    `where` names the file and scale."""
    names = [r.name for r in params.matrix.rows]
    m = params.model

    check_rows(params.matrix.rows, "matrix.rows", where, {}, {}, compute=False,
               track_check=lambda _name, options: check_lag_table(options, m.context, "model.context"),
               lr_scale=True)
    check_budgets(params.train, where)
    if not params.matrix.seeds:
        raise ParamsError(f"{where}matrix.seeds is empty; give at least one seed")
    for name in params.matrix.only or ():
        if name not in names:
            raise ParamsError(f"{where}matrix.only names unknown row {name!r}; rows: {', '.join(names)}")
    for name in params.bench.families:
        if name not in BENCH_FAMILIES:
            raise ParamsError(f"{where}bench.families names unknown family {name!r}; allowed: {', '.join(BENCH_FAMILIES)}")
    for name in params.bench.char_rows:
        if name not in names:
            raise ParamsError(f"{where}bench.char_rows names unknown row {name!r}; rows: {', '.join(names)}")
    if m.d_model % m.n_head:
        raise ParamsError(f"{where}model.d_model={m.d_model} must be a multiple of model.n_head={m.n_head}")
