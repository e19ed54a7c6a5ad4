"""The LM track's runs and files: lm.rows x seeds (config.rows), run id `<row>-s<seed>`:

    base-s0          the nanochat baseline (compute null: lm.steps or nanochat's rule)
    gka_tokens-s0    GKA-LM at the training tokens of row base (compute {match: tokens, row: base})
    gka_flops-s0     GKA-LM at the training FLOPs of row base
"""

from __future__ import annotations

from pathlib import Path

from ...config import RunSpec, runs_of
from ...config.rows import find_run
from .tokenizer import BYTES_FILE, META_FILE, RANKS_FILE

# what prepare-lm writes in lm.data_dir
OUTPUTS = ("train.npy", "val.npy", RANKS_FILE, META_FILE, BYTES_FILE, "meta.json")


def lm_runs(lm) -> list[RunSpec]:
    return runs_of(lm.rows, lm.seeds)


def find_lm_run(params, run_id: str) -> RunSpec:
    return find_run(lm_runs(params.lm), run_id, f"{params.path} (lm.rows of scale {params.scale!r})", "LM run")


def run_dir(lm, run_id: str) -> Path:
    return Path(lm.out_dir) / run_id


def eval_path(lm, run_id: str) -> Path:
    return Path(lm.out_dir).parent / "eval" / f"{run_id}.json"


# ----------------------------------------------------------------------------- the DAG's files
#   prepare_lm -> train_lm (one per LM run) -> eval_lm (one per LM run) -> report
def data_outputs(params) -> list[str]:
    return [str(Path(params.lm.data_dir) / name) for name in OUTPUTS]


def run_ids(params) -> list[str]:
    return [r.run_id for r in lm_runs(params.lm)]


def final_output(params, run_id: str) -> str:
    return str(run_dir(params.lm, run_id) / "final.json")


def eval_output(params, run_id: str) -> str:
    return str(eval_path(params.lm, run_id))


def report_inputs(params) -> list[str]:
    """What the report reads of the LM track: every run's evaluation."""
    return [eval_output(params, r) for r in run_ids(params)]


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
    from ...config import load_params

    params = load_params(args.params, args.scale)  # a ParamsError is one line (cli.main)
    return params, (find_lm_run(params, args.run) if with_run else None)
