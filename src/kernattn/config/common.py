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
    (fingerprinted: they change the weights)."""

    # The runs' folder (<out_dir>/<run_id>); no default: each track names its own.
    out_dir: str = field(metadata=NOFP)
    # Gradient norm clipping (0: off).
    grad_clip: float = field(default=1.0, metadata=nonneg())
    # Optimizer steps between checkpoints (and at the end).
    checkpoint_every: int = field(default=1000, metadata=positive("steps", **NOFP))
    # CUDA only (CPU always trains in float32, eager).
    dtype: str = field(default="bfloat16", metadata={"choices": DTYPES})
    compile: bool = field(default=True, metadata=NOFP)
    # CPU threads per training process (None: torch's default).
    threads: int | None = field(default=None, metadata=positive(**NOFP))
    device: str = field(default="auto", metadata={"choices": DEVICES, **NOFP})
    # Sequences (images) per micro-batch on one rank: a memory knob, never the optimisation
    # (the global batch, the track's batch_size, is split as global = micro x accum x ranks;
    # null: the track's own, char and vision global / ranks, lm lm.batch_size).
    micro_batch: int | None = field(default=None, metadata=positive(**NOFP))
    # Seconds a rank waits in a collective (a rank died, a node hangs) before it stops.
    dist_timeout_s: float = field(default=600.0, metadata=positive("seconds", **NOFP))


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
    # MLflow tracking URI: sqlite:///path (a local store) or http://127.0.0.1:PORT (a server).
    uri: str = "sqlite:///results/mlflow/mlflow.db"
    artifact_root: str = "results/mlflow/artifacts"
    experiment: str = "kernattn-{corpus}-{scale}"
    enabled: bool = True


@dataclass(frozen=True)
class ReportParams:
    out_dir: str = "report"
    # Link runs to this MLflow UI (None: no links).
    mlflow_ui: str | None = "http://127.0.0.1:5000"


BENCH_FAMILIES = ("vit_paper", "vit", "char_gpt", "lm")


@dataclass(frozen=True)
class BenchParams:
    """Whole-model throughput, memory and MFU (`kernattn bench`, issue 7; GKA paper Table 4)."""

    families: tuple[str, ...] = ("vit", "char_gpt", "lm")   # checked in char.check
    # "paper": the papers' shapes (GPU); "small": the same models shrunk for a CPU (tiny DAG, CI).
    size: str = field(default="paper", metadata={"choices": ("paper", "small")})
    char_rows: tuple[str, ...] = ("rope", "gpa_m64_rope", "gpa_m64", "gpa_dp_m8", "alibi", "gka")  # matrix rows
    train_batches: tuple[int, ...] = (64, 128)            # ViT training, images per device (Table 4)
    infer_batches: tuple[int, ...] = (32, 64, 128, 256, 512)  # ViT inference: the best is reported
    char_batch: int = field(default=256, metadata=positive())  # char GPT training sequences (seed 000)
    lm_batch: int = field(default=16, metadata=positive())     # LM training sequences per step
    dtype: str = field(default="bfloat16", metadata={"choices": ("float32", "bfloat16", "float16")})
    compile: bool = True                                   # torch.compile (CUDA only)
    device: str = "auto"
    warmup: int = field(default=5, metadata=nonneg())
    reps: int = field(default=20, metadata=positive())
    threads: int | None = None
    # family vit_paper: the ViTs at the paper's shape (224 px, patch 16, 1000 classes) at one small
    # batch, training and inference, on any device: a CPU's small shapes are dominated by per-call
    # overhead, which changes GKA's ratio to DeiT (issue 24)
    paper_vit_sizes: tuple[str, ...] = ("Ti",)           # of Ti, S, B (checked by kernattn bench)
    paper_vit_batch: int = field(default=8, metadata=positive())
    paper_vit_warmup: int = field(default=1, metadata=nonneg())
    paper_vit_reps: int = field(default=3, metadata=positive())
    out_dir: str = "results/{scale}/bench"
