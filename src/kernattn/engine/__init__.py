"""One training engine under every track (char GPT, LM, ViT): see loop.py for what a run
promises and track.py for what a track supplies."""

from .dist import Layout
from .loop import EXIT_DIVERGED, Diverged, train_run
from .metrics import is_timing, metric_dict
from .mlrun import mlflow_params
from .rundir import CKPT, CONFIG, FINAL, METRICS, open_run_dir, read_checkpoint
from .runtime import derive_seed, digest, git_info, resolve_device, seed_everything
from .signals import EXIT_SIGTERM, HOLD_ENV
from .track import ONE_PROCESS, Track

__all__ = ["EXIT_DIVERGED", "EXIT_SIGTERM", "HOLD_ENV", "Diverged", "train_run", "is_timing", "metric_dict",
           "mlflow_params", "CKPT", "CONFIG", "FINAL", "METRICS", "open_run_dir", "read_checkpoint",
           "derive_seed", "digest", "git_info", "resolve_device", "seed_everything", "Layout", "ONE_PROCESS", "Track"]
