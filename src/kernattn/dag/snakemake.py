"""What the Snakefile takes from here: its rules' `params` (the rerun trigger: the sections a
stage reads, a per-run stage seeing only its own row of the matrix), threads, wildcard
constraints and shell commands, and the `--configfile` / `--config` overrides, read as
params.yaml is (kernattn.config.loader: the precedence) and handed to every command.

    P = load(PARAMS_FILE, workflow.config_settings)   # a bad key or value stops the parse
    ARGS = scale_args(P, PARAMS_FILE, overrides_file(P))
    params: **rule_params(stage, P), options=command_options(ARGS)   # shell: shell_of(stage)
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import yaml

from ..config import Params
from ..config.yaml_files import read_yaml
from ..io import atomic_write_text
from ..stage import Stage, runs_as_ranks
from ..yaml_text import safe_load

# Snakemake config keys of ours that params.yaml does not hold: `params` names another params
# file. (`scale` is params.yaml's own key: a source's `scale` selects the scale.)
RESERVED = ("params",)


def rule_params(stage: Stage, params: Params) -> dict:
    """{section: its resolved values}; a per-run stage's narrowed sections are functions of
    the job's wildcards (Snakemake evaluates them per job)."""
    out = {section: params.raw[section] for section in stage.params}
    if stage.narrow is not None and stage.runs:
        for section in stage.narrow(stage.runs[0]):
            out[section] = (lambda wildcards, s=section: stage.narrow(wildcards.run)[s])
    return out


def override_sources(config_settings) -> list[tuple[str, dict]]:
    """(source, mapping) per --configfile in order, then --config, less the reserved keys;
    each in params.yaml's shape (a full copy of it included), the source named in every error."""
    sources = [(str(path), read_yaml(Path(path), "configfile (--configfile)")) for path in config_settings.configfiles or ()]
    sources.append(("--config", _typed(dict(config_settings.config or {}))))
    return [(source, {k: v for k, v in doc.items() if k not in RESERVED}) for source, doc in sources]


def _typed(value):
    """--config values as YAML would type them: Snakemake parses `train={lr: 0.5}` with YAML's
    BaseLoader, which leaves every scalar inside a mapping a string ("0.5")."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, str):
        try:
            return safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            return value
    return value


def load(params_file: str, config_settings) -> Params:
    """load_params for the Snakefile with Snakemake's overrides (override_sources); the scale
    is theirs (`--config scale=...`, a configfile's `scale`) or the file's. A bad params file
    or override stops the parse with its one line (Snakemake would print a traceback)."""
    from ..config import load_params
    from ..errors import ParamsError

    try:
        return load_params(params_file, None, override_sources(config_settings))
    except ParamsError as exc:
        sys.exit(f"kernattn: error: {exc}")


def overrides_file(params: Params, folder: str = ".snakemake/kernattn") -> str | None:
    """Write what the overrides changed of the params file at the chosen scale (Params.changes)
    where every job's `kernattn` reads it (named by its content, so concurrent parses write the
    same file); None when they changed nothing: the commands are then those of no override."""
    if not params.changes:
        return None
    text = yaml.safe_dump(params.changes, sort_keys=True)
    path = Path(folder) / f"overrides-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)
    return str(path)


def scale_args(params: Params, params_file: str, overrides: str | None = None) -> str:
    """The options every stage command takes."""
    args = f"--params {params_file} --scale {params.scale}"
    return f"{args} --overrides {overrides}" if overrides else args


# The rule param of the options every command takes (scale_args), {params.options} in its shell
# command; no params section has this name.
OPTIONS = "options"


def command_options(args: str):
    """The value of a rule's OPTIONS param: `args` (--params, --scale and --overrides), which the
    shell command reads from the rule's params (`snakemake --lint` wants every value a command
    uses among its rule's directives). A function of the job's `input`: Snakemake leaves a param
    derived from input, output, threads or resources out of its params rerun trigger, and where
    the params come from is no reason to rerun (the sections a stage reads are its trigger:
    rule_params), so an override still reruns only the stages that read what it changes."""
    def options(wildcards, input):  # noqa: ARG001 (Snakemake passes what the signature names)
        return args
    return options


def local_cores(workflow) -> int:
    """The local core count (--cores); 1 under a cluster executor, which has none."""
    from snakemake.exceptions import WorkflowError

    try:
        return workflow.cores
    except WorkflowError:
        return 1


def run_constraint(stage: Stage) -> str:
    """Only the stage's own run ids match its `{run}` (the tracks' output patterns overlap)."""
    return "|".join(stage.runs) or f"no-{stage.name}-run"


# Each job's Snakemake benchmark file (a TSV: wall s, max RSS, I/O, CPU time), per scale so that
# the page of a scale reads its own jobs' costs (kernattn.page.timing).
BENCHMARKS = "results/{scale}/benchmarks"


def benchmark_of(stage: Stage, scale: str, run: str | None = None) -> str:
    """The benchmark file of the stage's job (of `run`, a wildcard pattern or an id)."""
    name = f"{stage.name}-{run}" if stage.per_run else stage.name
    return f"{BENCHMARKS.format(scale=scale)}/{name}.tsv"


def threads_of(stage: Stage, cores: int) -> int:
    """The stage's threads; `all` is the local core count `cores`."""
    return cores if stage.threads == "all" else stage.threads


# The world of one training (or eval-lm, prune) run, a profile's resources (set-resources: train_lm: {ranks: 8}):
# processes (GPUs) per node and nodes. One process by default, the CPU scales' way.
RUN_RESOURCES = {"ranks": 1, "nodes": 1}


def trains(stage: Stage) -> bool:
    """The stage can run as several ranks: it trains through the engine (kernattn train,
    train-lm, train-vision, the studies' train-*), scores one run over ranks (eval-lm) or
    fine-tunes one run's arms over them (prune)."""
    return runs_as_ranks(stage.command)


def resources_of(stage: Stage) -> dict:
    """The rule's default resources: RUN_RESOURCES for a training stage, which the profile overrides."""
    return dict(RUN_RESOURCES) if trains(stage) else {}


def shell_of(stage: Stage) -> str:
    """The stage's command as a template: its options (the OPTIONS param) and the run are filled
    in per job, so the rule's code, Snakemake's rerun trigger, does not change with the overrides.
    A training stage starts its job's world (engine/launch.py: torchrun when it has more than
    one process, srun + torchrun over several nodes)."""
    run = "{wildcards.run}" if stage.per_run else None
    world = " --nproc {resources.ranks} --nodes {resources.nodes}" if trains(stage) else ""
    return stage.cmd(f"{{params.{OPTIONS}}}", run) + world + " > {log} 2>&1"
