"""The LM track's runs: the baseline once per seed, each other variant once per matched mode.

    lm-base-s0            the baseline (its step count defines both modes)
    lm-gka-tokens-s0      GKA trained on the baseline's number of tokens
    lm-gka-flops-s0       GKA trained on the baseline's total training FLOPs
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import ParamsError


@dataclass(frozen=True)
class LMRun:
    run_id: str
    variant: str
    matched: str | None  # None for the baseline
    seed: int

    @property
    def label(self) -> str:
        if self.variant == "base":
            return "nanochat baseline"
        return f"GKA-LM, matched {self.matched}"


def lm_runs(lm) -> list[LMRun]:
    out = []
    for seed in lm.seeds:
        for variant in lm.variants:
            if variant == "base":
                out.append(LMRun(f"lm-base-s{seed}", "base", None, seed))
            else:
                out += [LMRun(f"lm-{variant}-{m}-s{seed}", variant, m, seed) for m in lm.matched]
    return out


def find_lm_run(params, run_id: str) -> LMRun:
    runs = {r.run_id: r for r in lm_runs(params.lm)}
    if run_id not in runs:
        raise ParamsError(f"{params.path}: no LM run {run_id!r} at scale {params.scale!r}; runs: {', '.join(runs)}")
    return runs[run_id]


def base_run_id(run: LMRun) -> str:
    return f"lm-base-s{run.seed}"


def run_dir(lm, run_id: str) -> Path:
    return Path(lm.out_dir) / run_id


def eval_path(lm, run_id: str) -> Path:
    return Path(lm.out_dir).parent / "eval" / f"{run_id}.json"


# ----------------------------------------------------------------------------- CLI helpers
def add_stage_arguments(parser, with_run: bool = True) -> None:
    """--params, --scale (and --run) of the LM stages."""
    parser.add_argument("--params", default="params.yaml", help="params file (default %(default)s)")
    parser.add_argument("--scale", default=None, help="scale of params.yaml (default: the file's `scale`)")
    if with_run:
        parser.add_argument("--run", required=True, metavar="RUN_ID",
                            help="an LM run: lm-base-s<seed>, lm-gka-tokens-s<seed> or lm-gka-flops-s<seed>")


def load_stage(args, with_run: bool = True):
    """(params, LMRun or None) from the stage's arguments; a bad params file or run id is a
    one-line UsageError."""
    from ..config import load_params
    from .params import lm_params

    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    lm_params(params)
    return params, (find_lm_run(params, args.run) if with_run else None)
