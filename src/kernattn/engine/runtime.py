"""What a run needs from the machine: device, threads, autocast, compile, seeds, RNG state.

Every RNG state is stored as tensors and plain types, so a checkpoint holding it loads with
weights_only=True. A track's own generators (batch order, ...) are saved under their names
beside the global torch / CUDA / numpy / python states.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..errors import UsageError

GLOBAL_RNG = ("torch", "cuda", "numpy", "python")


def derive_seed(seed: int, purpose: str) -> int:
    """A seed for one purpose (batches, epoch order, ...) that depends on the run's seed only."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{purpose}".encode()).digest()[:8], "little") >> 1


def digest(obj: Any) -> str:
    """16 hex digits of sha256 over the sorted-key JSON of `obj` (fingerprints, data identity)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of a module's state dict, names and bytes in order: equal weights, byte for byte."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def git_info(root: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding this package (or the checkout `root`: the one
    whose results a tool reads, which may be another clone), or (None, None)."""
    root = Path(__file__).resolve().parents[3] if root is None else Path(root)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
        return commit or None, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("the device is 'cuda' but CUDA is not available here; use device: auto or cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast_factory(device: torch.device, dtype: str) -> Callable[[], contextlib.AbstractContextManager]:
    """bf16 autocast on CUDA when asked for; float32 (a null context) everywhere else."""
    if device.type == "cuda" and dtype == "bfloat16":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    """Every RNG state: the global ones and the track's named generators."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"name": np_state[0], "key": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached": float(np_state[4])},
        "python": random.getstate(),
        **{name: gen.get_state() for name, gen in generators.items()},
    }


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    for name, gen in generators.items():
        gen.set_state(state[name])
