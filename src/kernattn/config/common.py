"""What belongs to no one track: the runtime settings every trainer's section inherits
(RunSettings) and the shared sections tracking, report and bench.

RunSettings declares, once, the fields the training engine reads of a track's section
(train, lm, vision): device, dtype, compile, threads, grad_clip, checkpoint_every, out_dir.
The keys stay flat in params.yaml (`train.device`, `lm.device`, ...). A track's section may
redeclare one of them only to give it another default, through `run_default`, which keeps
the field's checks and fingerprint flag (tests/test_config.py checks that none differ).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .schema import NOFP, nonneg, positive

DTYPES = ("bfloat16", "float32")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class RunSettings:
    """How and where a track's runs train: not what they compute, except dtype and grad_clip
    (fingerprinted: they change the weights).

    Each field's meaning is its `doc` metadata, not a comment: train, lm and vision inherit
    these fields, and the params reference reads comments from a section's own source only."""

    # No default: each track names its own.
    out_dir: str = field(metadata={**NOFP, "doc": "The runs' folder: each run writes `<out_dir>/<run_id>/` "
                                                  "({scale} filled in)."})
    grad_clip: float = field(default=1.0, metadata=nonneg(
        "Gradient-norm clipping threshold (0: off; lm's default 0 is nanochat's: no clipping)."))
    checkpoint_every: int = field(default=1000, metadata=positive(
        "Optimizer steps between checkpoints (ckpt.pt in the run folder; one at the end too).", **NOFP))
    dtype: str = field(default="bfloat16", metadata={
        "choices": DTYPES, "doc": "CUDA only: bfloat16 trains under bf16 autocast; a CPU always trains in float32."})
    compile: bool = field(default=True, metadata={
        **NOFP, "doc": "torch.compile the model (CUDA only: a CPU runs eager)."})
    threads: int | None = field(default=None, metadata=positive(
        "CPU threads per training process (torch.set_num_threads; null: torch's default).", **NOFP))
    device: str = field(default="auto", metadata={
        "choices": DEVICES, **NOFP, "doc": "Where the runs train; auto: CUDA when available, else the CPU."})
    micro_batch: int | None = field(default=None, metadata=positive(
        "Sequences (images) per micro-batch on one rank: a memory knob, never the optimisation (the global "
        "batch, the track's batch_size, is split as global = micro x accum x ranks; null: the track's own, "
        "char and vision global / ranks, lm lm.batch_size).", **NOFP))
    dist_timeout_s: float = field(default=600.0, metadata=positive(
        "Seconds a rank waits in a collective (a rank died, a node hangs) before it stops.", **NOFP))


def run_default(name: str, default):
    """A RunSettings field redeclared in a track's section with another default; its
    metadata (checks, choices, fingerprint flag) stays RunSettings'."""
    base = next(f for f in dataclasses.fields(RunSettings) if f.name == name)
    return field(default=default, metadata=base.metadata)


@dataclass(frozen=True)
class DatasetsParams:
    """Where the catalogued data sets are found (kernattn.datasets): a read-only mirror folder
    laid out as the catalogue's paths, else the cache (filled by downloads). The environment
    (KERNATTN_DATA_MIRROR, KERNATTN_DATA_HOME) wins: it is the machine's own answer."""

    # A folder laid out as the catalogue (dickens/, eval/, fineweb_edu/, images/); None: none.
    mirror: str | None = field(default=None, metadata=NOFP)
    # The download cache (None: the per-user cache folder, ~/.cache/kernattn on Linux).
    home: str | None = field(default=None, metadata=NOFP)


@dataclass(frozen=True)
class TrackingParams:
    """MLflow tracking of every track's training runs (kernattn.tracking): the store, where a new
    experiment keeps its artifacts, and the char track's experiment (lm names its own in
    lm.experiment, vision uses `kernattn-vision-<scale>`). Tracking never stops a run: a failing
    store prints one warning and is switched off, and metrics.jsonl in the run folder stays the
    record."""

    # MLflow tracking URI: sqlite:///path (a local store) or http://127.0.0.1:PORT (a server).
    uri: str = "sqlite:///results/mlflow/mlflow.db"
    # Folder a new experiment of a sqlite store keeps its artifacts in (a server picks its own).
    artifact_root: str = "results/mlflow/artifacts"
    # MLflow experiment of the char track's runs ({corpus} and {scale} filled in); the studies'
    # char runs go to `<experiment>-studies`.
    experiment: str = "kernattn-char-{corpus}-{scale}"
    # false: no MLflow call at all (metrics.jsonl in each run folder is the record).
    enabled: bool = True
    # true: each training opens its MLflow run and logs as it trains (a cluster's runs, watched live).
    # false: a training writes its run folder only, and the DAG's `sync_mlflow` stage uploads every
    # finished run of the scale once they are all done, in one process (`kernattn sync-mlflow
    # --record`): a CPU scale's short jobs are spared MLflow's start-up (about 3 s of imports each).
    live: bool = True
    # Sample CPU/GPU/memory/disk into each run (system/* metrics, MLflow's monitor thread, every 10 s).
    # Off unless asked: params.yaml asks at the paper scale (GPU memory and utilisation over hours of
    # training); a thread and psutil in every job would cost a CPU scale's short runs more than they tell.
    system_metrics: bool = False


@dataclass(frozen=True)
class ReportParams:
    """The HTML report (`kernattn report`): every claim of the four documents with its verdict
    at this scale, each track's part, the studies and provenance, read from the runs' outputs."""

    # The report's folder (index.html, assets/, tables/), written whole or not at all.
    out_dir: str = "report"
    # Link runs to this MLflow UI (None: no links).
    mlflow_ui: str | None = "http://127.0.0.1:5000"


BENCH_FAMILIES = ("vit_paper", "vit", "char_gpt", "lm")


@dataclass(frozen=True)
class BenchParams:
    """Whole-model throughput, memory and MFU (`kernattn bench`, issue 7; GKA paper Table 4)."""

    # The model families measured, of vit_paper, vit, char_gpt and lm.
    families: tuple[str, ...] = ("vit", "char_gpt", "lm")
    # "paper": the papers' shapes (GPU); "small": the same models shrunk for a CPU (tiny DAG, CI).
    size: str = field(default="paper", metadata={"choices": ("paper", "small")})
    # The matrix rows whose attention the char_gpt family measures (names of matrix.rows).
    char_rows: tuple[str, ...] = ("rope", "gpa_m64_rope", "gpa_m64", "gpa_dp_m8", "alibi", "gka")
    train_batches: tuple[int, ...] = (64, 128)            # ViT training, images per device (Table 4)
    infer_batches: tuple[int, ...] = (32, 64, 128, 256, 512)  # ViT inference: the best is reported
    char_batch: int = field(default=256, metadata=positive())  # char GPT training sequences (gpa-short)
    lm_batch: int = field(default=16, metadata=positive())     # LM training sequences per step
    # The measurements' dtype on CUDA (a CPU measures in float32).
    dtype: str = field(default="bfloat16", metadata={"choices": ("float32", "bfloat16", "float16")})
    compile: bool = True                                   # torch.compile (CUDA only)
    # Where to measure: auto (CUDA when available, else the CPU), cpu or cuda.
    device: str = "auto"
    # Untimed steps before the timed ones, per model, mode and batch (compilation, allocator, autotuning).
    warmup: int = field(default=5, metadata=nonneg())
    # Timed steps per model, mode and batch: models.csv reports their median and interquartile range.
    reps: int = field(default=20, metadata=positive())
    # CPU threads of the measuring process (torch.set_num_threads; null: torch's default).
    threads: int | None = None
    # Family vit_paper: the ViT sizes measured at the paper's shape (224 px, patch 16, 1000 classes), of
    # Ti, S, B (checked by kernattn bench); a CPU's small shapes are dominated by per-call overhead,
    # which changes GKA's ratio to DeiT (issue 24).
    paper_vit_sizes: tuple[str, ...] = ("Ti",)
    # Families vit and vit_paper: the vision rows whose attention they measure (names of
    # vision.rows), DeiT first as the baseline of every ratio; null: Table 5's DeiT, VLT and GKA.
    vit_rows: tuple[str, ...] | None = None
    # Family vit_paper: its one small batch (images), for training and inference alike.
    paper_vit_batch: int = field(default=8, metadata=positive())
    # Family vit_paper: untimed steps (replaces bench.warmup for it).
    paper_vit_warmup: int = field(default=1, metadata=nonneg())
    # Family vit_paper: timed steps (replaces bench.reps for it).
    paper_vit_reps: int = field(default=3, metadata=positive())
    # Folder of models.csv and models_ratios.csv ({scale} filled in).
    out_dir: str = "results/{scale}/bench"
