"""params.yaml: loading, the chosen scale, and schema validation.

    params = load_params("params.yaml")            # scale from the file (or KERNATTN_SCALE)
    params.train.max_steps, params.model.d_model, ...
    for run in run_matrix(params): run.run_id, run.row, run.seed, run.variant, run.options

The file holds the defaults (paper scale), a `scale` key naming one entry of `scales`, and
`scales: {name: overrides}`; the overrides are deep-merged over the defaults. Every key is
checked against the dataclasses below: an unknown key, a wrong type or a value out of range
fails with one line naming the file, the key and what is allowed (`ParamsError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCALE_ENV = "KERNATTN_SCALE"
MIRROR_ENV = "KERNATTN_DATA_MIRROR"


from .errors import ParamsError  # noqa: F401 (re-exported: kernattn.config.ParamsError)


def _pos(doc=""):
    return {"check": lambda v: None if v > 0 else "must be > 0", "doc": doc}


def _nonneg(doc=""):
    return {"check": lambda v: None if v >= 0 else "must be >= 0", "doc": doc}


def _fraction(doc=""):
    return {"check": lambda v: None if 0 < v < 1 else "must be between 0 and 1 (exclusive)", "doc": doc}


@dataclass(frozen=True)
class DataParams:
    corpus: str = field(default="dickens", metadata={"choices": ("dickens",)})
    # Project Gutenberg plain-text files of Dickens's works, concatenated in this order.
    urls: tuple[str, ...] = ()
    # A local copy (.txt or .txt.gz) used instead of downloading; KERNATTN_DATA_MIRROR overrides.
    mirror: str | None = None
    # sha256 of the mirror/download as read (None: record it on first fetch).
    sha256: str | None = None
    val_fraction: float = field(default=0.1, metadata=_fraction())
    # Keep only the first max_chars characters of the cleaned corpus (None: all).
    max_chars: int | None = field(default=None, metadata=_pos())
    out_dir: str = "results/data/dickens"


@dataclass(frozen=True)
class ModelParams:
    n_layer: int = field(default=4, metadata=_pos())
    n_head: int = field(default=4, metadata=_pos())
    d_model: int = field(default=512, metadata=_pos())
    context: int = field(default=256, metadata=_pos())
    mlp_ratio: int = field(default=4, metadata=_pos())
    dropout: float = field(default=0.0, metadata=_nonneg())


@dataclass(frozen=True)
class TrainParams:
    batch_size: int = field(default=256, metadata=_pos())
    max_steps: int = field(default=200_000, metadata=_pos())
    lr: float = field(default=1e-3, metadata=_pos())
    min_lr_ratio: float = field(default=0.1, metadata=_nonneg())
    warmup_steps: int = field(default=2000, metadata=_nonneg())
    weight_decay: float = field(default=0.1, metadata=_nonneg())
    beta1: float = field(default=0.9, metadata=_fraction())
    beta2: float = field(default=0.95, metadata=_fraction())
    grad_clip: float = field(default=1.0, metadata=_nonneg())
    eval_every: int = field(default=2000, metadata=_pos())
    eval_batches: int = field(default=50, metadata=_pos())
    checkpoint_every: int = field(default=5000, metadata=_pos())
    # CUDA only (CPU always trains in float32, eager).
    dtype: str = field(default="bfloat16", metadata={"choices": ("bfloat16", "float32")})
    compile: bool = True
    # CPU threads per training process (None: torch's default).
    threads: int | None = field(default=None, metadata=_pos())
    device: str = field(default="auto", metadata={"choices": ("auto", "cpu", "cuda")})
    out_dir: str = "results/runs"


@dataclass(frozen=True)
class TrackingParams:
    # MLflow tracking URI: sqlite:///path (a local store) or http://127.0.0.1:PORT (a server).
    uri: str = "sqlite:///results/mlflow/mlflow.db"
    artifact_root: str = "results/mlflow/artifacts"
    experiment: str = "kernattn-dickens"
    enabled: bool = True


@dataclass(frozen=True)
class Row:
    """One row of the experiment matrix: a named attention configuration."""

    name: str
    variant: str
    options: dict[str, Any] = field(default_factory=dict)
    # Which document the row reproduces ("000", "001", "reviewers", "ours"): for the report.
    source: str = "ours"
    label: str = ""


@dataclass(frozen=True)
class MatrixParams:
    seeds: tuple[int, ...] = (0, 1, 2)
    rows: tuple[Row, ...] = ()
    # Names of rows to run (None: all): smaller scales run a subset.
    only: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ReportParams:
    out_dir: str = "report"
    # Link runs to this MLflow UI (None: no links).
    mlflow_ui: str | None = "http://127.0.0.1:5000"


@dataclass(frozen=True)
class AnalysisParams:
    """GPA interpretability (seed 001 sections 3.1-3.2 and 4): `kernattn analyze-gpa`."""

    # Characters sampled from each trained model for its newline histogram (001: 50,000),
    # as `streams` independent streams of ceil(sample_chars / streams) characters.
    sample_chars: int = field(default=50_000, metadata=_pos())
    streams: int = field(default=50, metadata=_pos())
    temperature: float = field(default=1.0, metadata=_pos())
    sample_seed: int = field(default=0, metadata=_nonneg())
    # The bump: the most prominent local maximum of G(lag) at lags >= bump_min_lag.
    bump_min_lag: int = field(default=10, metadata=_pos())
    # A bank is flagged weak when its bias spans less than this many logit units over lags.
    strength_threshold: float = field(default=0.1, metadata=_nonneg())
    # Newline separations are histogrammed up to this lag (longer ones: one overflow count).
    max_separation: int = field(default=400, metadata=_pos())
    # Resamples of the sampled streams for the interval of the generated text's peak.
    bootstrap: int = field(default=1000, metadata=_pos())
    out_dir: str = "results/analysis"


BENCH_FAMILIES = ("vit", "char_gpt", "lm")


@dataclass(frozen=True)
class BenchParams:
    """Whole-model throughput, memory and MFU (`kernattn bench`, issue 7; GKA paper Table 4)."""

    families: tuple[str, ...] = ("vit", "char_gpt", "lm")   # checked in _check_matrix
    # "paper": the papers' shapes (GPU); "small": the same models shrunk for a CPU (tiny DAG, CI).
    size: str = field(default="paper", metadata={"choices": ("paper", "small")})
    char_rows: tuple[str, ...] = ("rope", "gpa_m64_rope", "gpa_m64", "gpa_dp_m8", "alibi", "gka")  # matrix rows
    train_batches: tuple[int, ...] = (64, 128)            # ViT training, images per device (Table 4)
    infer_batches: tuple[int, ...] = (32, 64, 128, 256, 512)  # ViT inference: the best is reported
    char_batch: int = field(default=256, metadata=_pos())  # char GPT training sequences (seed 000)
    lm_batch: int = field(default=16, metadata=_pos())     # LM training sequences per step
    dtype: str = field(default="bfloat16", metadata={"choices": ("float32", "bfloat16", "float16")})
    compile: bool = True                                   # torch.compile (CUDA only)
    device: str = "auto"
    warmup: int = field(default=5, metadata=_nonneg())
    reps: int = field(default=20, metadata=_pos())
    threads: int | None = None
    out_dir: str = "results/{scale}/bench"


@dataclass(frozen=True)
class Params:
    scale: str
    data: DataParams
    model: ModelParams
    train: TrainParams
    tracking: TrackingParams
    matrix: MatrixParams
    report: ReportParams
    analysis: AnalysisParams
    bench: BenchParams
    vision: Any = None  # kernattn.vision.params.VisionParams (registered at the end of this file)
    path: str = "params.yaml"
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    lm: Any = None  # kernattn.lm.params.LMParams (registered at the end of this module)

    def digest(self) -> str:
        """sha256 (first 12 hex) of the resolved params: the provenance the report shows."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


SECTIONS = {
    "data": DataParams,
    "model": ModelParams,
    "train": TrainParams,
    "tracking": TrackingParams,
    "matrix": MatrixParams,
    "report": ReportParams,
    "analysis": AnalysisParams,
    "bench": BenchParams,
}


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    row: str
    seed: int
    variant: str
    options: dict[str, Any]
    source: str
    label: str


# ----------------------------------------------------------------------------- loading
def load_params(path: str | os.PathLike = "params.yaml", scale: str | None = None) -> Params:
    """Read, merge the chosen scale, validate. Raises ParamsError (one line) on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such params file (run from the repository root, or pass --params)")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParamsError(f"{path}:{where}: YAML syntax error: {problem}") from None
    if not isinstance(doc, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    allowed_top = {"scale", "scales", *SECTIONS}
    for key in doc:
        if key not in allowed_top:
            raise ParamsError(f"{path}: unknown key {key!r}; allowed: {', '.join(sorted(allowed_top))}")
    scales = doc.get("scales") or {}
    if not isinstance(scales, dict):
        raise ParamsError(f"{path}: 'scales' must be a mapping of scale name -> overrides")
    chosen = scale or os.environ.get(SCALE_ENV) or doc.get("scale") or "paper"
    if chosen != "paper" and chosen not in scales:
        raise ParamsError(
            f"{path}: unknown scale {chosen!r}; allowed: {', '.join(sorted({'paper', *scales}))}"
        )
    # Every scale is validated, not only the chosen one: a typo in `paper` must not wait
    # for the day someone runs at paper scale.
    # paper first: a bad key in the base sections is reported as such, not as some scale's.
    resolved = {name: _resolve(doc, scales, name, path) for name in ["paper", *sorted(set(scales) - {"paper"})]}
    merged, sections = resolved[chosen]
    mirror_env = os.environ.get(MIRROR_ENV)
    if mirror_env:
        merged["data"] = {**merged["data"], "mirror": mirror_env}
        sections["data"] = _build(DataParams, merged["data"], "data", path)
    sections = {name: _fill_scale(sec, chosen) for name, sec in sections.items()}
    params = Params(scale=chosen, path=str(path), raw={"scale": chosen, **merged}, **sections)
    _check_matrix(params, path)
    return params


def _fill_scale(section, scale: str):
    """Replace `{scale}` in the section's string fields (output paths, experiment names), so
    each scale writes its own results and one never overwrites another's."""
    changes = {f.name: getattr(section, f.name).replace("{scale}", scale)
               for f in dataclasses.fields(section)
               if isinstance(getattr(section, f.name), str) and "{scale}" in getattr(section, f.name)}
    return dataclasses.replace(section, **changes) if changes else section


def _resolve(doc: dict, scales: dict, name: str, path: Path):
    """(merged sections, built dataclasses) of scale `name`."""
    merged = {k: doc.get(k, {}) or {} for k in SECTIONS}
    overrides = scales.get(name) or {}
    if not isinstance(overrides, dict):
        raise ParamsError(f"{path}: scales.{name} must be a mapping of overrides")
    for key, value in overrides.items():
        where = f"scales.{name}.{key}"
        if key not in SECTIONS:
            raise ParamsError(f"{path}: unknown key '{where}'; allowed: {', '.join(SECTIONS)}")
        if isinstance(value, dict):
            allowed = [f.name for f in dataclasses.fields(SECTIONS[key])]
            for sub in value:
                if sub not in allowed:
                    raise ParamsError(f"{path}: unknown key '{where}.{sub}'; allowed: {', '.join(allowed)}")
        merged[key] = _deep_merge(merged[key], value, where, path)
    prefix = "" if name == "paper" else f"scales.{name} -> "
    try:
        sections = {sec: _build(cls, merged[sec], sec, path) for sec, cls in SECTIONS.items()}
    except ParamsError as exc:
        raise ParamsError(str(exc).replace(f"{path}: ", f"{path}: {prefix}", 1)) from None
    return merged, sections


def _deep_merge(base: Any, over: Any, where: str, path: Path) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _deep_merge(base.get(k), v, f"{where}.{k}", path) if k in base else v
        return out
    return over


def _build(cls, values: Any, where: str, path: Path):
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: {where} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ParamsError(f"{path}: unknown key '{where}.{key}'; allowed: {', '.join(fields)}")
        kwargs[key] = _convert(value, hints[key], f"{where}.{key}", path, fields[key].metadata)
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ParamsError(f"{path}: missing key '{where}.{missing[0]}'")
    return cls(**kwargs)


def _convert(value, annotation, where: str, path: Path, meta) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], where, path, meta)
    if annotation is Row:
        return _build(Row, value, where, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ParamsError(f"{path}: {where} must be a list, got {value!r}")
        item = args[0]
        return tuple(_convert(v, item, f"{where}[{i}]", path, {}) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ParamsError(f"{path}: {where} must be a mapping, got {value!r}")
        return dict(value)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(annotation, True)
    if not ok:
        raise ParamsError(f"{path}: {where} must be {annotation.__name__}, got {value!r}")
    if annotation is float:
        value = float(value)
    if "choices" in meta and value not in meta["choices"]:
        raise ParamsError(f"{path}: {where} must be one of {', '.join(map(str, meta['choices']))}; got {value!r}")
    if "check" in meta and (problem := meta["check"](value)):
        raise ParamsError(f"{path}: {where} {problem}; got {value!r}")
    return value


def _check_matrix(params: Params, path: Path) -> None:
    from . import attention

    names = [r.name for r in params.matrix.rows]
    if not names:
        raise ParamsError(f"{path}: matrix.rows is empty; add at least one row")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ParamsError(f"{path}: matrix.rows has two rows named {dup!r}; names must be unique")
    if not params.matrix.seeds:
        raise ParamsError(f"{path}: matrix.seeds is empty; give at least one seed")
    for name in params.matrix.only or ():
        if name not in names:
            raise ParamsError(f"{path}: matrix.only names unknown row {name!r}; rows: {', '.join(names)}")
    for name in params.bench.families:
        if name not in BENCH_FAMILIES:
            raise ParamsError(f"{path}: bench.families names unknown family {name!r}; allowed: {', '.join(BENCH_FAMILIES)}")
    for name in params.bench.char_rows:
        if name not in names:
            raise ParamsError(f"{path}: bench.char_rows names unknown row {name!r}; rows: {', '.join(names)}")
    m = params.model
    if m.d_model % m.n_head:
        raise ParamsError(f"{path}: model.d_model={m.d_model} must be a multiple of model.n_head={m.n_head}")
    for i, row in enumerate(params.matrix.rows):
        try:
            attention.make_options(row.variant, row.options)
        except attention.AttentionConfigError as exc:
            raise ParamsError(f"{path}: matrix.rows[{i}] ({row.name}): {exc}") from None
        if row.options.get("position") == "lag_table" and row.options.get("max_len", 2048) < m.context:
            raise ParamsError(
                f"{path}: matrix.rows[{i}] ({row.name}): options.max_len={row.options['max_len']} is shorter "
                f"than model.context={m.context}; raise max_len or lower the context"
            )


def run_matrix(params: Params) -> list[RunSpec]:
    """Every (row, seed) the chosen scale trains, in a stable order; run_id = '<row>-s<seed>'."""
    only = set(params.matrix.only) if params.matrix.only is not None else None
    return [
        RunSpec(f"{r.name}-s{seed}", r.name, seed, r.variant, dict(r.options), r.source, r.label or r.name)
        for r in params.matrix.rows
        if only is None or r.name in only
        for seed in params.matrix.seeds
    ]


def find_run(params: Params, run_id: str) -> RunSpec:
    runs = {r.run_id: r for r in run_matrix(params)}
    if run_id not in runs:
        raise ParamsError(f"{params.path}: no run {run_id!r} in the matrix of scale {params.scale!r}; "
                          f"runs: {', '.join(runs)}")
    return runs[run_id]


# GKA on vision (issue 5): its section lives in its own package; registered last because
# that module reuses the field helpers above.
from .vision.params import VisionParams  # noqa: E402

SECTIONS["vision"] = VisionParams
# The language-model track's section lives in its own module (it imports this one).
from .lm.params import LMParams  # noqa: E402

SECTIONS["lm"] = LMParams
