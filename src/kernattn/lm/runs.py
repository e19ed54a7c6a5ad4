"""The LM track's runs: lm.rows x seeds (config.rows), run id `<row>-s<seed>`:

    base-s0          the nanochat baseline (compute null: lm.steps or nanochat's rule)
    gka_tokens-s0    GKA-LM at the training tokens of row base (compute {match: tokens, row: base})
    gka_flops-s0     GKA-LM at the training FLOPs of row base
"""

from __future__ import annotations

from pathlib import Path

from ..config import RunSpec, runs_of
from ..config.rows import find_run


def lm_runs(lm) -> list[RunSpec]:
    return runs_of(lm.rows, lm.seeds)


def find_lm_run(params, run_id: str) -> RunSpec:
    return find_run(lm_runs(params.lm), run_id, f"{params.path} (lm.rows of scale {params.scale!r})", "LM run")


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
                            help="an LM run: <row of lm.rows>-s<seed>, e.g. base-s0")


def load_stage(args, with_run: bool = True):
    """(params, RunSpec or None) from the stage's arguments; a bad params file or run id is a
    one-line error."""
    from ..config import load_params

    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    return params, (find_lm_run(params, args.run) if with_run else None)
