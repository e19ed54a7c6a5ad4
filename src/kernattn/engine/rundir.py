"""A run folder and its checkpoint: what a folder holds for these params, refused or archived
when it was made under other params (moved to <out_dir>/.stale/, never deleted).

The folder of every track: config.json, metrics.jsonl, ckpt.pt, final.json (written last:
a folder without it is an unfinished run). A checkpoint is a dict of named parts (model,
optimizer, rng, loop counters, the track's own parts such as ema) plus the bookkeeping in
CKPT_KEYS; it holds tensors and plain containers only and loads with weights_only=True.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io import LoadError, load_torch

CONFIG, METRICS, CKPT, FINAL = "config.json", "metrics.jsonl", "ckpt.pt", "final.json"
# The checkpoint's layout; 2: one vocabulary for every track (format 1 differed between them).
CKPT_FORMAT = 2
# Bookkeeping every checkpoint carries (the track's parts come beside it).
CKPT_KEYS = ("format", "fingerprint", "fingerprint_config", "step", "metrics_lines", "elapsed_s", "train_s",
             "loop", "rng", "model", "optimizer")


def differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """'key (old -> new)' for every leaf where two fingerprint configs differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += differences(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    same = json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    return [] if same else [f"{prefix[:-1]} ({a!r} -> {b!r})"]


def read_checkpoint(path: Path, fix: str, keys: tuple[str, ...] = CKPT_KEYS) -> dict[str, Any]:
    """A training checkpoint (weights_only=True) checked for `keys`; a problem is one line
    naming the file and ending with `fix`."""
    try:
        ckpt = load_torch(path, fix)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    return require_keys(ckpt, path, fix, keys)


def load_finished(folder: Path, cmd: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(final.json, ckpt.pt) of a finished run, the checkpoint the one final.json records (same
    fingerprint and step); anything else is one line ending with `cmd`, the command that
    produces the run."""
    try:
        final = json.loads((folder / FINAL).read_text())
        ckpt = load_torch(folder / CKPT, f"retrain with: {cmd} --fresh")  # weights_only=True
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder}: no finished run to read ({type(exc).__name__}: {exc}); "
                         f"produce it with: {cmd}") from None
    if ckpt.get("fingerprint") != final.get("fingerprint") or ckpt.get("step") != final.get("steps"):
        raise UsageError(f"{folder}: ckpt.pt (step {ckpt.get('step')}) is not the checkpoint of final.json "
                         f"(step {final.get('steps')}); retrain with: {cmd} --fresh")
    return final, ckpt


def load_trained(track, device, weights: str = "model", cmd: str | None = None) -> dict[str, Any]:
    """Build `track` afresh on `device` and load the weights (`weights`: the checkpoint's entry,
    "model" or the ViT's "ema") its finished run's final.json names into `track.model`, in eval
    mode; returns final.json. Building draws initial weights: the caller's RNG is kept. `cmd`:
    the command that produces the run, named when it is missing (default: the track's)."""
    import torch

    final, ckpt = load_finished(track.run_dir, cmd or f"kernattn {track.command} --run {track.run_id}")
    with torch.random.fork_rng(devices=[]):
        track.build(device)
    track.model.load_state_dict(ckpt[weights])
    track.model.eval()
    return final


def require_keys(ckpt: Any, path: Path, fix: str, keys: tuple[str, ...]) -> dict[str, Any]:
    missing = [k for k in keys if k not in ckpt] if isinstance(ckpt, dict) else list(keys)
    if missing:
        raise UsageError(f"{path}: not a kernattn training checkpoint (missing {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}); {fix}")
    return ckpt


def archive_stale(run_dir: Path, why: str) -> Path:
    """Move a run folder made under other params to <out_dir>/.stale/ (kept, never deleted)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = run_dir.parent / ".stale" / f"{run_dir.name}-{stamp}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, dest)
    print(f"kernattn: {run_dir} held {why}: moved to {dest}; training from scratch")
    return dest


def _finished(final_path: Path, fingerprint: str) -> bool:
    try:
        finished = json.loads(final_path.read_text())
    except ValueError:
        return False
    return isinstance(finished, dict) and finished.get("fingerprint") == fingerprint


def _mismatch(ckpt: dict, fingerprint: str, fp_config: dict, variant: str | None) -> str | None:
    """None when the checkpoint belongs to these params, else what differs."""
    if ckpt.get("format") != CKPT_FORMAT:
        return f"checkpoint format {ckpt.get('format')!r}, this version writes {CKPT_FORMAT}"
    if ckpt.get("fingerprint") == fingerprint:
        return None
    diff = differences(ckpt.get("fingerprint_config", {}), fp_config)
    what = "; ".join(diff[:3]) + (" ..." if len(diff) > 3 else "") if diff else "unknown fields"
    theirs = (ckpt.get("fingerprint_config") or {}).get("run") or {}
    if variant and theirs.get("variant") not in (None, variant):  # the most telling difference first
        what = f"a {theirs['variant']!r} model (run {theirs.get('run_id')}), not this run's {variant!r}; " + what
    return what


def open_run_dir(run_dir: Path, fingerprint: str, fp_config: dict, *, stale: str, command: str, run_id: str,
                 variant: str | None = None, keys: tuple[str, ...] = CKPT_KEYS) -> tuple[bool, dict | None]:
    """What a run folder holds for these params: (done, checkpoint to resume or None).

    done: its final.json has this fingerprint (nothing to train). A finished run or a
    checkpoint made under other params is refused with a one-line error (stale="error", the
    default by hand) or moved to <out_dir>/.stale/ (stale="archive", what the pipeline passes)."""
    final_path, ckpt_path = run_dir / FINAL, run_dir / CKPT
    redo = f"rerun with --fresh (or --stale archive) to retrain {run_id}"
    if final_path.is_file():
        if _finished(final_path, fingerprint):
            print(f"kernattn {command}: {run_id}: already finished ({final_path}); --fresh retrains it")
            return True, None
        if stale != "archive":
            raise UsageError(f"{final_path}: a finished run from another configuration; {redo}")
        archive_stale(run_dir, "a finished run from another configuration")
    if not ckpt_path.exists():
        return False, None
    fix = f"rerun with --fresh to train {run_id} from scratch"
    ckpt = read_checkpoint(ckpt_path, fix, ("fingerprint",))
    what = _mismatch(ckpt, fingerprint, fp_config, variant)
    if what is None:
        return False, require_keys(ckpt, ckpt_path, fix, keys)
    if stale != "archive":
        raise UsageError(f"{ckpt_path}: checkpoint from another configuration ({what}); {redo}")
    archive_stale(run_dir, f"a checkpoint from another configuration ({what})")
    return False, None
