"""The training checks of `kernattn check-variant`: the micro char model with the variant, on a
periodic stand-in text it learns in a few steps, through the engine the pipeline trains with.

  training   STEPS steps: every loss finite, the validation loss at the end below the one at
             step 0
  resume     the same run stopped at half way and resumed ends with the same weights, byte for
             byte, as the uninterrupted one
"""

from __future__ import annotations

import json
from pathlib import Path

STEPS = 8
PERIOD = 7
ROW = "variant_check"


def _params(params_path: str, name: str, options: dict, work: Path):
    from ..config import load_params
    from ..tracks.char.data import stand_in

    micro = load_params(params_path, "micro")
    data, _ = stand_in(micro, work / "data", period=PERIOD)
    # the row beside the scale's own (other keys name those), and the only one trained
    rows = [*micro.raw["matrix"]["rows"], {"name": ROW, "variant": name, "options": options}]
    over = {**data, "matrix": {"rows": rows, "seeds": [0], "only": [ROW]},
            "train": {"max_steps": STEPS, "warmup_steps": 1, "eval_every": STEPS // 2, "checkpoint_every": STEPS // 2,
                      "device": "cpu", "compile": False, "out_dir": str(work / "runs"), "lr": 3e-3},
            "tracking": {"enabled": False}}
    return load_params(params_path, "micro", [("check-variant", over)])


def _train(params, out: Path, stop_after=None):
    import dataclasses

    from ..engine import train_run
    from ..tracks.char.stages import runs
    from ..tracks.char.track import CharTrack

    p = dataclasses.replace(params, train=dataclasses.replace(params.train, out_dir=str(out)))
    track = CharTrack(p, runs(p)[0])
    code = train_run(track, stop_after=stop_after, progress=False)
    return code, track


def check_training(params_path: str, name: str, options: dict, work: Path) -> tuple[list[str], list[str]]:
    """(training problems, resume problems)."""
    params = _params(params_path, name, options, work)
    code, straight = _train(params, work / "straight")
    if code != 0:
        return [f"the micro training exited {code}"], ["not checked: the training failed"]
    lines = [json.loads(x) for x in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    val = [x["loss"] for x in lines if x.get("split") == "val"]
    training = []
    if not all(isinstance(v, float) and v == v and abs(v) != float("inf") for v in losses):
        training.append("a loss is not finite")
    elif not val[-1] < val[0]:
        training.append(f"the validation loss did not fall in {STEPS} steps ({val[0]:.4f} -> {val[-1]:.4f})")
    code, _ = _train(params, work / "resumed", stop_after=STEPS // 2)
    code2, resumed = _train(params, work / "resumed") if code == 0 else (code, None)
    if code2 != 0:
        return training, [f"the stopped or the resumed run exited {code2}"]
    from ..engine.runtime import weights_digest

    same = weights_digest(resumed.model) == weights_digest(straight.model)
    return training, [] if same else [f"stopped at step {STEPS // 2} and resumed, the weights differ from the "
                                      f"uninterrupted run's"]
