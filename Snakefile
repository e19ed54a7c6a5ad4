# kernattn: the DAG. Every rule is a stage of the stage table (kernattn.dag.stages): its
# inputs, outputs, rerun params and command come from there, as dvc.yaml's do.
#
#   snakemake --cores all                              # the scale named in params.yaml (tiny by default)
#   snakemake --cores all --config scale=micro         # another scale, same DAG
#   snakemake --cores all --config train.lr=0.5        # a params override (or --configfile FILE)
#   snakemake --profile slurm all                      # on a cluster (profiles/slurm, `kernattn install-profile`)
#   snakemake --cores all studies                      # the studies of issue 17 (not part of `all`)
#
# --configfile and --config take what params.yaml takes, a full copy of it included (`scale`
# selects the scale; the precedence: kernattn.config.loader), validated like it: an unknown
# key stops the parse, naming every such key and its source; `params` (another params file)
# is ours. The rules pass what the overrides change to each command (--overrides FILE), and a
# rule reruns when a section it reads changes, whatever the source.
from functools import partial

from kernattn.dag import snakemake as dag_smk
from kernattn.dag import stages as dag_stages
from kernattn.dag.snakemake import run_constraint, shell_of
from kernattn.dag.stages import stage_table

PARAMS_FILE = config.get("params", "params.yaml")
P = dag_smk.load(PARAMS_FILE, workflow.config_settings)
ARGS = dag_smk.scale_args(P, PARAMS_FILE, dag_smk.overrides_file(P))
STAGES = stage_table(P)
threads_of = partial(dag_smk.threads_of, cores=dag_smk.local_cores(workflow))


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
