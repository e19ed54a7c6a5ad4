"""The LM track's stages, runs and the only owner of where its files live. Runs are
lm.rows x seeds (config.rows), run id `<row>-s<seed>`:

    base-s0          the nanochat baseline (compute null: lm.steps or nanochat's rule)
    gka_tokens-s0    GKA-LM at the training tokens of row base (compute {match: tokens, row: base})
    gka_flops-s0     GKA-LM at the training FLOPs of row base
"""

from __future__ import annotations

from pathlib import Path

from ...config import Params, RunSpec, runs_of
from ...config.rows import find_in
from ...stage import RunFolders, Stage, narrowed_section
from .tokenizer import BYTES_FILE, META_FILE, RANKS_FILE

# what prepare-lm writes in lm.data_dir
OUTPUTS = ("train.npy", "val.npy", RANKS_FILE, META_FILE, BYTES_FILE, "meta.json")


NAME = "lm"
SECTIONS = MODEL_SECTIONS = REPORT_SECTIONS = ("lm",)  # see kernattn.tracks.char.stages


def lm_runs(lm) -> list[RunSpec]:
    """The runs of an `lm:` section: its rows x seeds."""
    return runs_of(lm.rows, lm.seeds)


def runs(p: Params) -> list[RunSpec]:
    return lm_runs(p.lm)


def find_lm_run(p: Params, run_id: str) -> RunSpec:
    return find_in(runs(p), run_id, f"{p.path} (lm.rows of scale {p.scale!r})", "LM run")


# ----------------------------------------------------------------------------- paths
#   prepare_lm -> train_lm@<run> -> eval_lm@<run> -> report
def data_outputs(p: Params) -> list[str]:
    return [str(Path(p.lm.data_dir) / name) for name in OUTPUTS]


RUNS = RunFolders("lm")  # <lm.out_dir>/<run id>/: the engine's run folder (stage.RunFolders)
runs_root, run_dir, final_output = RUNS.root, RUNS.run_dir, RUNS.final_output


def run_roots(p: Params) -> list[Path]:
    """The folders its runs lie in (what `kernattn sync-mlflow` walks)."""
    return [runs_root(p)]



def eval_path(p: Params, run_id: str) -> Path:
    """One run's bits per byte and CORE (kernattn eval-lm)."""
    return Path(p.lm.out_dir).parent / "eval" / f"{run_id}.json"


def report_inputs(p: Params) -> list[str]:
    """What the report reads of this track: every run's final.json and evaluation."""
    ids = [r.run_id for r in runs(p)]
    return [*(final_output(p, r) for r in ids), *(str(eval_path(p, r)) for r in ids)]


# ----------------------------------------------------------------------------- stages
def stages(p: Params) -> list[Stage]:
    data, specs = data_outputs(p), runs(p)
    ids = tuple(r.run_id for r in specs)
    threads = p.lm.threads or 4

    def narrow(run_id: str) -> dict:  # a matched run reads its reference row, never its outputs
        return narrowed_section(p, "lm", specs, run_id)
    return [
        Stage("prepare_lm", ("lm",), ("tracks/lm", "fetch.py"), lambda _: data),
        Stage("train_lm", ("lm",), ("",), lambda r: [final_output(p, r)], inputs=lambda _: data,
              dvc_outs=lambda r: [str(run_dir(p, r))], runs=ids, extra="--stale archive",
              persist=True, threads=threads, narrow=narrow, metric=True),
        Stage("eval_lm", ("lm",), ("",), lambda r: [str(eval_path(p, r))],
              inputs=lambda r: [*data, final_output(p, r)], runs=ids, threads=threads, narrow=narrow, metric=True),
    ]


# ----------------------------------------------------------------------------- CLI helpers
def add_run_argument(parser) -> None:
    """--run of the LM stages that read one run (the CLI gives every stage --params and --scale)."""
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="an LM run: <row of lm.rows>-s<seed>, e.g. base-s0")


def load_stage(args, with_run: bool = True):
    """(params, RunSpec or None) from the stage's arguments; a bad params file or run id is a
    one-line error."""
    from ...config import params_from_args

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    return params, (find_lm_run(params, args.run) if with_run else None)
