# kernattn: the DAG. Every rule is a stage of the stage table (kernattn.dag.stages): its
# inputs, outputs, rerun params and command come from there, as dvc.yaml's do.
#
#   snakemake --cores all                              # the scale named in params.yaml (tiny by default)
#   snakemake --cores all --config scale=micro         # another scale, same DAG
#   snakemake --cores all --config train.lr=0.5        # a params override (or --configfile FILE)
#   snakemake --profile slurm all                      # on a cluster (profiles/slurm, `kernattn install-profile`)
#   snakemake --cores all studies                      # the studies of issue 17 (not part of `all`)
#
# --configfile and --config override params.yaml (deep-merged, then validated like it: an
# unknown key stops the parse, naming the key and its source); `scale` and `params` (another
# params file) are ours. The rules pass the overrides to each command (--overrides FILE), and a
# rule reruns when a section it reads changes, whatever the source.
from kernattn.dag import snakemake as dag_smk
from kernattn.dag import stages as dag_stages
from kernattn.dag.stages import stage_table
from snakemake.exceptions import WorkflowError

PARAMS_FILE = config.get("params", "params.yaml")
OVERRIDES = dag_smk.override_sources(workflow.config_settings)
P = dag_smk.load(PARAMS_FILE, config.get("scale"), OVERRIDES)
ARGS = dag_smk.scale_args(P, PARAMS_FILE, dag_smk.overrides_file(OVERRIDES))
STAGES = stage_table(P)
try:  # the local core count (--cores); cluster executors have none and raise
    ALL_CORES = workflow.cores
except WorkflowError:
    ALL_CORES = 1


def run_constraint(stage):
    """Only the stage's own run ids match its `{run}` (the tracks' output patterns overlap)."""
    return "|".join(stage.runs) or f"no-{stage.name}-run"


def threads_of(stage):
    return ALL_CORES if stage.threads == "all" else stage.threads


def shell_of(stage):
    """The stage's command as a template: {ARGS} and the run are filled in per job (so the
    rule's code, Snakemake's rerun trigger, does not change with the overrides)."""
    run = "{wildcards.run}" if stage.per_run else None
    return stage.cmd("{ARGS}", run) + " > {log} 2>&1"


rule all:
    input:
        STAGES["report"].outputs(None),


rule studies:
    # The experiments the papers leave open (rules/studies.smk): each study's summary. The
    # report shows them when it is built after them (it reads what exists; see README).
    input:
        dag_stages.studies_outputs(STAGES),


include: "rules/char.smk"
include: "rules/vision.smk"
include: "rules/lm.smk"
include: "rules/report.smk"
include: "rules/studies.smk"
