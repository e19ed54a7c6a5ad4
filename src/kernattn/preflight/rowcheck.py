"""One row's preflight, in its own process (`python -m kernattn.preflight.rowcheck SPEC OUT`), so
that each row's peak memory is its own (the parent reads it from wait4) and a crash is one row's.

    1. the row's Track at the scale's own batch (stand-in data): its global batch and micro-batch
       as the engine will split them, and its schedule (an LM row's budget chain)
    2. the same Track at a batch of one (two where Mixup pairs images): the engine trains one
       optimizer step (evaluation at step 0, forward, backward, update) and checkpoints it
       (--stop-after 1), while a saved-tensors hook counts the activations autograd keeps, per
       sample (memory.py)
    3. a new Track resumes that checkpoint (the engine's own resume) and must hold the same
       weights, byte for byte

The evaluation's forwards run without autograd whatever the track does (`NoGraphEval`): a
track whose evaluate leaves autograd on keeps every validation batch's graph until the loss is
summed, which on the GPU runs out of memory at the first evaluation; the row records it
(`eval_grad`) and fails, and the check itself keeps its memory.

SPEC (JSON): track, run_id, params, scale, overrides (the command's --overrides file, or null),
full (overrides over those: stand-in data, CPU, no MLflow, outputs in the work folder), one
(full + a batch of one; + a slice's depth, slices.py), step (false: stop after 1, for a row
whose model another row already stepped), resume (false: skip 3, for the deeper slice).
OUT (JSON): what was measured, or `error`.
"""

from __future__ import annotations

import gc
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch

from ..tracks import track_recipe
from .watch import resident


class SavedBytes:
    """A Track mixin: counts the bytes autograd saves for backward during `loss` (the largest
    over micro-batches), parameters excluded, by storage (views of one storage count once)."""
    saved_float = 0
    saved_other = 0

    def loss(self, fwd, batch):
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        seen: set[int] = set()
        counts = [0, 0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in params and ptr not in seen:
                seen.add(ptr)
                counts[0 if t.is_floating_point() else 1] += storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = super().loss(fwd, batch)
        self.saved_float, self.saved_other = max(self.saved_float, counts[0]), max(self.saved_other, counts[1])
        return out


class NoGraphEval:
    """A Track mixin: the model's forwards during `evaluate` run without autograd; `eval_grad`
    records whether the track had left it on (a forward hook sees the mode evaluate set)."""
    eval_grad = False

    def evaluate(self, fwd, autocast):
        modes: list[bool] = []

        def before(module, args):
            modes.append(torch.is_grad_enabled())
            torch.set_grad_enabled(False)

        def after(module, args, out):
            torch.set_grad_enabled(modes[-1])

        was = torch.is_grad_enabled()
        hooks = [self.model.register_forward_pre_hook(before), self.model.register_forward_hook(after)]
        try:
            return super().evaluate(fwd, autocast)
        finally:
            for hook in hooks:
                hook.remove()
            torch.set_grad_enabled(was)
            self.eval_grad = self.eval_grad or any(modes)


def run_spec(params, track: str, run_id: str):
    from ..config.rows import find_in
    from ..tracks import track_module

    return find_in(track_module(track, "stages").runs(params), run_id, f"{params.path} ({track})")


def spec_params(spec: dict, stand_ins: dict):
    """The params a row's check reads: the file at the scale, the command's --overrides file,
    then `stand_ins` (the preflight's: they must win, to keep it on the CPU and in the work
    folder)."""
    from ..config import load_params, overrides_sources

    return load_params(spec["params"], spec["scale"], [*overrides_sources(spec["overrides"]), ("preflight", stand_ins)])


def check(spec: dict) -> dict:
    track, run_id = spec["track"], spec["run_id"]
    cls = track_recipe(track)
    full = spec_params(spec, spec["full"])
    run = run_spec(full, track, run_id)
    out = planned(cls, full, run)
    if not spec["step"]:
        return out
    one = spec_params(spec, spec["one"])
    out |= step_once(cls, one, run)
    run_dir = out.pop("run_dir")
    if "error" not in out and spec.get("resume", True):
        out |= resume(cls, one, run, run_dir, out["digest"])
    shutil.rmtree(run_dir, ignore_errors=True)  # a paper LM checkpoint is ~10 GB: one at a time in the work folder
    return out


def planned(cls, full, run) -> dict:
    """The row as the real run plans it: its batch split and schedule."""
    as_planned = cls(full, run)
    out = {"global_batch": as_planned.global_batch, "micro_default": as_planned.micro_default,
           "micro_batch": as_planned.section.micro_batch,
           # a ViT's steps count the stand-in's images, not the data set's: a check that it plans, no more
           "max_steps_on_stand_in": as_planned.max_steps,
           "stage_command": cls.command}
    if (count := as_planned.planned_parameters()) is not None:
        out["planned_params"] = count  # the full model's, which a slice's extrapolation must give
    return out


def step_once(cls, one, run) -> dict:
    """One optimizer step and its checkpoint, counted (the run folder in `run_dir`)."""
    from ..bench.models import held_bytes
    from ..engine import train_run
    from ..engine.rundir import CKPT
    from ..engine.runtime import weights_digest

    t0 = time.perf_counter()
    first = type(f"Preflight{cls.__name__}", (SavedBytes, NoGraphEval, cls), {})(one, run)
    if (code := train_run(first, fresh=True, stop_after=1, progress=False)) != 0:
        return {"error": f"the step exited {code}", "run_dir": first.run_dir}
    micro = first.micro_batch or 1  # the stand-in's batch (two images where Mixup pairs them): per sample below
    out = {"step_s": time.perf_counter() - t0, "params": sum(p.numel() for p in first.model.parameters()),
           "step_micro_batch": micro, "held": held_bytes(*first.parts().values()),
           "saved_float": first.saved_float // micro, "saved_other": first.saved_other // micro,
           "digest": weights_digest(first.model), "eval_grad": first.eval_grad,
           "evaluate": f"{cls.__module__}.{cls.evaluate.__qualname__}", "run_dir": first.run_dir,
           "checkpoint_bytes": (first.run_dir / CKPT).stat().st_size}
    del first
    gc.collect()  # its weights and optimizer state, before the resume builds them again
    return out


def resume(cls, one, run, run_dir: Path, digest: str) -> dict:
    """A new Track resumes the checkpoint through the engine and must hold the same weights."""
    from ..engine import train_run
    from ..engine.rundir import CONFIG
    from ..engine.runtime import weights_digest

    t0 = time.perf_counter()
    again = cls(one, run)
    if (code := train_run(again, stop_after=1, progress=False)) != 0:
        return {"error": f"the resume exited {code}"}
    resumed = json.loads((run_dir / CONFIG).read_text()).get("resumed_from_step")
    same = weights_digest(again.model) == digest
    out = {"resume_s": time.perf_counter() - t0, "resumed_from_step": resumed, "same_weights": same}
    if resumed != 1 or not same:
        out["error"] = (f"the resume started at step {resumed}, not 1" if resumed != 1
                        else "the resumed weights differ from the checkpointed ones")
    return out


def main(argv: list[str]) -> int:
    spec_path, out_path = map(Path, argv)
    spec = json.loads(spec_path.read_text())
    try:
        result = check(spec)
    except Exception as exc:  # noqa: BLE001 -- any failure is this row's, reported in one line by the parent
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        result = {"error": f"{type(exc).__name__}: {first}"}
    result["peak_rss_self"] = resident()[1]  # this process's own high-water mark (watch.py: why not the parent's count)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
