"""`kernattn lm-eval`: EleutherAI's lm-evaluation-harness command with kernattn's LM runs as a model.

    kernattn lm-eval tasks --out DIR [--limit N] [--eval-dir DIR | --params FILE]   # CORE-6, local
    kernattn lm-eval run --model kernattn --model_args run=<LM run folder> --tasks ... [harness options]

Everything after `lm-eval` but `tasks` is the harness's own command line (`lm_eval --help`), run
with the `kernattn` model registered (tracks/lm/harness.py: lm-eval 0.4 discovers no models of
other packages; its own `lm_eval --model kernattn` finds this one only when a task folder that
`tasks` wrote is loaded: harness_tasks.UTILS). A kernattn run scored without --output_path
writes its results beside the run's own evaluation, in <lm.out_dir>/../eval/<run_id>-lm-eval/
(the harness's results JSON, per-sample logs with --log_samples), and its scores go into the
run's MLflow run (harness_results)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("harness_args", nargs=argparse.REMAINDER,
                        help="`tasks --out DIR [--limit N] [--eval-dir DIR]`, or the harness's own arguments "
                             "(lm_eval run --help)")


def _option(args: list[str], name: str) -> str | None:
    """The value of option `name` in a harness command line (`--name value` or `--name=value`)."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def default_output(args: list[str]) -> list[str]:
    """The harness's arguments with --output_path beside the run's own evaluation when the model
    is kernattn's and none is given."""
    if _option(args, "--output_path") or "-o" in args:
        return args
    run = _model_run(args)
    if run is None:
        return args
    return [*args, "--output_path", str(run.parent.parent / "eval" / f"{run.name}-lm-eval")]


def _model_run(args: list[str]) -> Path | None:
    """The kernattn run folder a harness command line scores (--model_args run=...), or None."""
    if _option(args, "--model") != "kernattn":
        return None
    pairs = dict(kv.split("=", 1) for kv in (_option(args, "--model_args") or "").split(",") if "=" in kv)
    return Path(pairs["run"]) if "run" in pairs else None


def write_tasks(argv: list[str]) -> int:
    from . import harness_tasks

    p = argparse.ArgumentParser(prog="kernattn lm-eval tasks",
                                description="write the CORE-6 tasks as local lm-eval tasks")
    p.add_argument("--out", required=True, type=Path, help="folder for the tasks (then lm_eval ... --tasks DIR)")
    p.add_argument("--limit", type=int, default=None, help="the first N items of each task")
    p.add_argument("--eval-dir", type=Path, default=None,
                   help="folder of the CORE files (default: where `kernattn eval-lm` finds them for --params)")
    p.add_argument("--params", default="params.yaml", help="params file naming lm.eval_dir or lm.eval_set")
    a = p.parse_args(argv)
    eval_dir = a.eval_dir or _catalogue_eval_dir(a.params)
    names = harness_tasks.write(eval_dir, a.out, a.limit)
    print(f"{a.out}: {', '.join(names)} (tag {harness_tasks.GROUP}); score a run with "
          f"`lm_eval --model kernattn --model_args run=<LM run folder> --tasks {a.out}` (or `kernattn lm-eval "
          f"run ...`, which also logs to the run's MLflow run)")
    return 0


def _catalogue_eval_dir(params_file: str) -> Path:
    """The CORE files' folder, as `kernattn eval-lm` finds it (mirror, cache, then a download)."""
    from ...config import load_params
    from .data import eval_folder

    return Path(eval_folder(load_params(params_file)))


def run(args: argparse.Namespace) -> int:
    argv = list(args.harness_args)
    if argv[:1] == ["tasks"]:
        return write_tasks(argv[1:])
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        raise UsageError("lm-evaluation-harness is not installed; pip install -e '.[lm]'") from None
    from . import harness  # noqa: F401  (registers the `kernattn` model)

    argv = default_output(argv)
    sys.argv = ["lm_eval", *argv]
    cli_evaluate()
    run_folder, output = _model_run(argv), _option(argv, "--output_path") or _option(argv, "-o")
    if run_folder is not None and output is not None:
        from . import harness_results

        harness_results.log(run_folder, Path(output), warn=lambda m: print(m, file=sys.stderr))
    return 0
