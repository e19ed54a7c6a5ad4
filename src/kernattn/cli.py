"""Command line of the kernattn pipeline: `kernattn <stage> [options]`.

Each stage is a subcommand listed in STAGES below (its module and one-line help) whose module
provides
    run(args) -> int                the stage itself; returns the exit status
    add_arguments(parser) -> None   its own options, if it has any
The options every stage shares are taken here, once: `--params FILE` and `--scale NAME`
(the params file and its scale; not for the stages in OWN_PARAMS) and `--overrides FILE`
(a YAML file of params overrides: `args.overrides`, which kernattn.config.params_from_args
applies), shown in each stage's --help; `--overrides` may also come before the command name,
with the same meaning. `kernattn --help`
lists the commands by GROUPS; a renamed command's old name (RENAMED) still runs it, after a
one-line hint on stderr. Bad arguments end with one line on stderr
("kernattn <stage>: error: ...") and exit status 2; a stage reports a bad combination of
arguments it can only detect itself by raising `UsageError` (or the attention registry's
`AttentionConfigError`), which is turned into the same one line. A stage's name in Snakemake,
DVC and profiles/ is its subcommand with `_` for `-` (kernattn.stage.command_name).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import textwrap

from .errors import ParamsError, UsageError  # noqa: F401 (re-exported: kernattn.cli.UsageError)
from . import __version__, units
from .stage import runs_as_ranks

# subcommand -> (module, one-line help). Only the invoked stage's module is imported, so a
# light stage (prepare, dvc-yaml) does not pay for torch, MLflow or matplotlib. The tools below
# belong to no unit; every unit's commands come from kernattn.units.UNITS.
TOOLS: dict[str, tuple[str, str]] = {
    "preflight": ("kernattn.preflight.cli", "before the GPU-hours: data, every row's step at the scale's shapes on the CPU, GPU memory, the SLURM profile"),
    "check-variant": ("kernattn.check_variant.cli", "the conformance suite of one attention variant, built-in or plugin (fast == reference, causal, precision, training, resume)"),
    "variants": ("kernattn.check_variant.variants", "list every attention variant, built-in or plugin: summary, tracks, options with defaults, source (--json)"),
    "data": ("kernattn.data_cli", "list the data sets a scale reads and where they are, or pull them into the cache"),
    "report": ("kernattn.page.build", "render report/index.html from the runs"),
    "lm-eval": ("kernattn.tracks.lm.harness_cli", "score an LM run with EleutherAI's lm-evaluation-harness (model `kernattn`), or write CORE-6 as its local tasks"),
    "records": ("kernattn.page.records", "export the files a scale's report reads (no checkpoints), or rebuild its claims CSV from them at this commit"),
    "results-table": ("kernattn.report.results_table", "write (or --check) the README's results table from the claims CSV it names"),
    "gpu-check": ("kernattn.gpu_check.stage", "prove and measure every GPU path in parts (tests, kernels, models, train) -> results/gpu/<device>/"),
    "dvc-yaml": ("kernattn.dag.dvc", "write dvc.yaml (the DVC form of the Snakefile's DAG) from params.yaml"),
    "plan": ("kernattn.dag.plan_cli", "FLOPs, GPU-hours and wall time of every training and evaluation job, and of the DAG on a cluster"),
    "timing": ("kernattn.dag.timing_cli", "each rule's measured cost (its jobs' Snakemake benchmark files) beside the plan's prediction, with date, commit and machine"),
    "install-profile": ("kernattn.profiles", "install the SLURM snakemake profile with your site's values"),
    "mlflow-server": ("kernattn.tracking.server", "start a local MLflow server (SQLite store) on 127.0.0.1; --stop stops it"),
    "sync-mlflow": ("kernattn.tracking.sync", "upload finished runs missing from the MLflow store (params, metrics, artifacts)"),
}
STAGES: dict[str, tuple[str, str]] = {**TOOLS, **units.commands()}


# `kernattn --help` lists the commands under these headings, each command once, in this order:
# the set-up, each unit's commands under its title, then the tools.
GROUPS: dict[str, tuple[str, ...]] = {
    "set-up and data": ("data", "preflight"),
    **{u.title: tuple(u.commands) for u in units.UNITS},
    "pipeline and cluster": ("dvc-yaml", "plan", "timing", "install-profile"),
    "tracking": ("mlflow-server", "sync-mlflow"),
    "checks": ("gpu-check", "check-variant", "variants", "lm-eval"),
    "report": ("report", "results-table", "records"),
}

# Old name -> new name of a renamed command (verb first, as prepare-lm, train-lm, eval-lm). No
# pipeline stage is renamed here: a stage's name is its Snakemake rule, DVC stage and profile key.
RENAMED: dict[str, str] = {"lm-import": "import-lm", "lm-export": "export-lm"}


# The stages that read params.yaml differently: which of the shared options they take.
OWN_PARAMS: dict[str, tuple[str, ...]] = {
    "install-profile": (),        # writes a SLURM profile; reads params only for --plan-scale (--plan-params)
    "results-table": (),          # reads a claims CSV and the README
    "records": (),                # export: results/<scale>/ of this checkout; rebuild: its own --params
    "lm-eval": (),                # the harness's own command line (and `tasks --params`)
    "bench-attention": (),        # times the attention kernels alone, at its own shapes
    "gpu-check": ("--params",),
    "variants": ("--params",),       # only for its `plugins:`; none needed
    "check-variant": ("--params",),  # its training check runs at the micro scale, whatever the file's   # a part sets its own sizes (--tiny); the train part writes its own scale
}

# What --overrides does to a command whose params are not "the params file at its scale" (said
# in its --help); a command without --params otherwise reads none, so they change nothing.
OVERRIDES_EFFECT: dict[str, str] = {
    # its records (results/gpu/<device>/, read by the report and by `kernattn plan`) are of
    # fixed shapes: the paper's, the micro scale's and its own gpucheck scale's
    "gpu-check": "accepted as by every command; gpu-check measures fixed shapes at its own scales, "
                 "so they change nothing",
    # its only params are the plan's, which sets the stages' runtimes
    "install-profile": "applied over --plan-params at --plan-scale",
}
BEFORE_COMMAND = "overrides_before_command"  # the dest of `kernattn --overrides FILE COMMAND`
OVERRIDES_HELP = "YAML file of params overrides (what the Snakefile writes for snakemake --config and --configfile)"


def add_params_options(parser: argparse.ArgumentParser, stage: str) -> None:
    """--params and --scale, as `stage` takes them, and --overrides (every command)."""
    options = OWN_PARAMS.get(stage, ("--params", "--scale"))
    if "--params" in options:
        parser.add_argument("--params", default="params.yaml", metavar="FILE",
                            help="params file (default: params.yaml in the current folder)")
    if "--scale" in options:
        parser.add_argument("--scale", default=None, metavar="NAME",
                            help="scale of the params file (default: its `scale` key, or KERNATTN_SCALE)")
    if stage in OVERRIDES_EFFECT:
        effect = OVERRIDES_EFFECT[stage]
    elif "--params" not in options:
        effect = f"accepted as by every command; {stage} reads no params file, so they change nothing"
    else:
        effect = "applied over the params file at its scale"
    parser.add_argument("--overrides", default=None, metavar="FILE", help=f"{OVERRIDES_HELP}, {effect}")


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) and exit status 2."""

    def error(self, message: str):  # noqa: D401 (argparse's signature)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _TopParser(_Parser):
    """The `kernattn` parser: `--overrides FILE` before the command name is the command's
    `args.overrides`, as after it. argparse gives it another dest here: a subcommand's
    parser writes its own defaults (overrides=None) over what the top-level parser parsed."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        before = vars(parsed).pop(BEFORE_COMMAND, None)
        if before is not None and getattr(parsed, "overrides", None) not in (None, before):
            self.error(f"--overrides {before} before the command and --overrides {parsed.overrides} after it: "
                       f"give one file")
        if before is not None:
            parsed.overrides = before
        return parsed, extra


def commands_help(width: int) -> str:
    """The commands by GROUPS, each with its one-line help wrapped beside its name (argparse's
    layout: two spaces, the name, the help from column 24 or after the longest name)."""
    column = min(max(len(name) for name in STAGES) + 4, 24)
    out = []
    for title, names in GROUPS.items():
        out.append(f"{title}:")
        for name in names:
            lines = textwrap.wrap(STAGES[name][1], max(width - column, 20), break_on_hyphens=False)
            first = f"  {name}".ljust(column) if len(name) + 4 <= column else f"  {name}\n" + " " * column
            out.append(first + lines[0])
            out += [" " * column + line for line in lines[1:]]
        out.append("")
    return "\n".join(out).rstrip()


def build_parser(stage: str | None = None) -> argparse.ArgumentParser:
    """The `kernattn` parser; `parser.stages` maps each subcommand to its own parser.

    Only `stage` (if given) gets its module imported and its options added."""
    width = shutil.get_terminal_size().columns - 2  # argparse's own width
    parser = _TopParser(prog="kernattn", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=commands_help(width),
                     description=textwrap.fill(
                         "The kernel view of attention: the pipeline's stages and its tools, one command each. Every "
                         "command also takes --overrides FILE: a YAML file of params overrides (what snakemake --config "
                         "writes).", width))
    parser.add_argument("--version", action="version", version=f"kernattn {__version__}")
    parser.add_argument("--overrides", dest=BEFORE_COMMAND, default=None, metavar="FILE",
                        help=f"{OVERRIDES_HELP}: the same as the command's own --overrides FILE")
    parser.stages = {}
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser,
                                title="commands", help="one of those below; `kernattn COMMAND --help` for its options")
    for name, (module_name, help_text) in STAGES.items():  # no help=: commands_help lists them, by group
        if name != stage:
            parser.stages[name] = sub.add_parser(name, description=help_text)
            continue
        module = importlib.import_module(module_name)
        doc = (module.__doc__ or "").strip().split("\n\n")[0]
        stage_parser = sub.add_parser(name, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        add_params_options(stage_parser, name)
        if hasattr(module, "add_arguments"):
            module.add_arguments(stage_parser)
        stage_parser.set_defaults(_run=module.run)
        parser.stages[name] = stage_parser
    return parser


def _take_renamed(argv: list[str]) -> list[str]:
    """argv with a renamed command's old name (RENAMED) replaced by its new one, after a
    one-line hint on stderr."""
    for i, arg in enumerate(argv):
        if arg in STAGES:
            return argv
        if arg in RENAMED:
            print(f"kernattn {arg}: renamed to {RENAMED[arg]}; the old name still works", file=sys.stderr)
            return [*argv[:i], RENAMED[arg], *argv[i + 1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    """Run one stage; returns the exit status (0 on success, 2 on a usage error)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    argv = _take_renamed(argv)
    command = next((a for a in argv if a in STAGES), "")
    # train-*, eval-lm and prune on several ranks: torchrun starts them (engine/launch.py)
    if runs_as_ranks(command) and any(a.partition("=")[0] in ("--nproc", "--nodes") for a in argv):
        from .engine.launch import launch

        try:
            launched = launch(argv)
        except UsageError as exc:
            print(f"kernattn {command}: error: {exc}", file=sys.stderr)
            return 2
        if launched is not None:
            return launched
    parser = build_parser(command or None)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the stage's parser, so the message names the stage
            parser.stages[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help (0) or a bad argument (2, message already printed)
        return exc.code if isinstance(exc.code, int) else 1
    from .attention import AttentionConfigError

    try:
        return int(args._run(args) or 0)
    except (UsageError, AttentionConfigError, ParamsError) as exc:  # already one line each
        print(f"kernattn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    # `python -m kernattn.cli`: run the imported module's main, so that stages raising
    # kernattn.cli.UsageError are caught by the same class (not a copy in __main__).
    from kernattn.cli import main as _main

    sys.exit(_main())
