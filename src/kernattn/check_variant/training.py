"""The training checks of `kernattn check-variant`: the micro char model with the variant, on a
periodic stand-in text it learns in a few steps, through the engine the pipeline trains with.

  training   STEPS steps: every loss finite, the validation loss at the end below the one at
             step 0
  resume     the same run stopped at half way and resumed ends with the same weights, byte for
             byte, as the uninterrupted one
  ddp        the same run on 2 ranks (`kernattn train --nproc 2`: torchrun, gloo on the CPU)
             ends with the 1-rank run's weights, within DDP_SHARE of the most AdamW can move a
             weight in those steps (lr x steps): 2 ranks sum the gradients in another order,
             and Adam's normalisation enlarges that round-off where a gradient is near 0 (4e-6
             measured on the worked example, the bound 2.4e-5); a rank that computes something
             else (its own random draws, a buffer out of step) is off by a share of lr each step

The overrides go to a file that the 2-rank command reads too, with the plugins loaded here.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import yaml

from ..yaml_text import safe_load

STEPS = 8
PERIOD = 7
ROW = "variant_check"
RUN = f"{ROW}-s0"
LR = 3e-3
DDP_SHARE = 1e-3  # of lr x STEPS: the ddp check's bound (module docstring)


def write_overrides(params_path: str, name: str, options: dict, plugins: list[str], work: Path) -> Path:
    """The micro scale with the variant's row (the only one trained, beside the scale's own,
    which other keys name), the stand-in text, STEPS steps on the CPU, no MLflow."""
    from ..config import load_params
    from ..tracks.char.data import stand_in

    micro = load_params(params_path, "micro")
    data, _ = stand_in(micro, work / "data", period=PERIOD)
    rows = [*micro.raw["matrix"]["rows"], {"name": ROW, "variant": name, "options": options}]
    over = {**data, "matrix": {"rows": rows, "seeds": [0], "only": [ROW]},
            "train": {"max_steps": STEPS, "warmup_steps": 1, "eval_every": STEPS // 2, "checkpoint_every": STEPS // 2,
                      "device": "cpu", "compile": False, "out_dir": str(work / "runs"), "lr": LR},
            "tracking": {"enabled": False}, "plugins": plugins}
    path = work / "overrides.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(over)), sort_keys=False))
    return path


def _train(params, out: Path, stop_after=None):
    from ..engine import train_run
    from ..tracks.char.stages import runs
    from ..tracks.char.track import CharTrack

    p = dataclasses.replace(params, train=dataclasses.replace(params.train, out_dir=str(out)))
    track = CharTrack(p, runs(p)[0])
    return train_run(track, stop_after=stop_after, progress=False), track


def check_training(params_path: str, name: str, options: dict, plugins: list[str], work: Path,
                   ddp: bool = True) -> dict[str, list[str]]:
    """check name -> its problems."""
    from ..config import load_params
    from ..engine.runtime import weights_digest

    overrides = write_overrides(params_path, name, options, plugins, work)
    params = load_params(params_path, "micro", [(str(overrides), safe_load(overrides.read_text()))])
    code, straight = _train(params, work / "straight")
    if code != 0:
        return {"training": [f"the micro training exited {code}"], "resume": ["not checked: the training failed"],
                **({"ddp": ["not checked: the training failed"]} if ddp else {})}
    lines = [json.loads(x) for x in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    val = [x["loss"] for x in lines if x.get("split") == "val"]
    out = {"training": [], "resume": []}
    if not all(isinstance(v, float) and abs(v) < float("inf") for v in losses):
        out["training"].append("a loss is not finite")
    elif not val[-1] < val[0]:
        out["training"].append(f"the validation loss did not fall in {STEPS} steps ({val[0]:.4f} -> {val[-1]:.4f})")
    code, _ = _train(params, work / "resumed", stop_after=STEPS // 2)
    code, resumed = _train(params, work / "resumed") if code == 0 else (code, None)
    if code != 0:
        out["resume"].append(f"the stopped or the resumed run exited {code}")
    elif weights_digest(resumed.model) != weights_digest(straight.model):
        out["resume"].append(f"stopped at step {STEPS // 2} and resumed, the weights differ from the "
                             f"uninterrupted run's")
    if ddp:
        out["ddp"] = check_ddp(params_path, overrides, straight.model.state_dict(), work / "ddp")
    return out


def check_ddp(params_path: str, overrides: Path, one_rank: dict, out: Path) -> list[str]:
    """The run on 2 ranks through the pipeline's own command; its final weights against 1 rank's."""
    from ..io import load_torch

    doc = safe_load(overrides.read_text())
    doc["train"]["out_dir"] = str(out)
    mine = out.parent / "ddp.yaml"
    mine.write_text(yaml.safe_dump(doc, sort_keys=False))
    cmd = [sys.executable, "-m", "kernattn.cli", "train", "--params", params_path, "--scale", "micro",
           "--overrides", str(mine), "--run", RUN, "--nproc", "2", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"`kernattn train --nproc 2` exited {proc.returncode} ({tail})"]
    two = load_torch(out / RUN / "ckpt.pt")["model"]
    worst = max((two[k].double() - v.double()).abs().max().item() for k, v in one_rank.items())
    bound = DDP_SHARE * LR * STEPS
    return [] if worst <= bound else [f"2 ranks end {worst:.3g} away from 1 rank's weights (> {bound:.3g}, "
                                      f"{DDP_SHARE:g} of lr x steps)"]
