# kernattn: the DAG. Every rule is a stage of the stage table (kernattn.dag.stages): its
# inputs, outputs, rerun params and command come from there, as dvc.yaml's do. The rules'
# names are the stages' (`train`, `train_lm`, ...): profiles/ key resources by them.
#
#   snakemake --cores all                              # the scale named in params.yaml (tiny by default)
#   snakemake --cores all --config scale=micro         # another scale, same DAG
#   snakemake --cores all --config 'train={lr: 0.5}'   # a params override (or --configfile FILE)
#   snakemake --profile slurm all                      # on a cluster (profiles/slurm, `kernattn install-profile`)
#   snakemake --cores all studies                      # the studies of issue 17 (not part of `all`)
#   snakemake --cores all preflight --config scale=paper   # kernattn preflight: before the GPU-hours
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
    # The experiments the papers leave open (the stages kernattn.units names in `targets`): each
    # study's summary. The report shows them when it is built after them (it reads what exists).
    input:
        dag_stages.studies_outputs(STAGES),


rule preflight:
    # `kernattn preflight` (data, every row's step on the CPU, GPU memory, the SLURM profile) as a
    # target: no output, so it runs each time it is asked for, on this machine (a login node),
    # never as a SLURM job; it writes nothing the DAG reads. Its report goes to the terminal and
    # to its log (bash's pipefail, Snakemake's default, keeps its exit status).
    localrule: True
    params:
        options=dag_smk.command_options(ARGS),
    log:
        "results/logs/preflight.log",
    shell:
        "kernattn preflight {params.options} 2>&1 | tee {log}"


# One rule per stage of the table, in its order: a track's rules come with its stages
# (kernattn.tracks.<t>.stages), so a new track needs no rule file. A per-run stage has the
# wildcard `run`, constrained to its own run ids (the tracks' output patterns overlap).
for stage in STAGES.values():
    job = "{run}" if stage.per_run else None

    rule:
        name:
            stage.name
        localrule: stage.local
        input:
            # a per-run stage's inputs are those of its job's run (a GKA-init run reads its own track's data)
            (lambda wildcards, s=stage: s.inputs(wildcards.run)) if stage.per_run else stage.inputs(None),
        output:
            stage.outputs(job),
        wildcard_constraints:
            **({"run": run_constraint(stage)} if stage.per_run else {}),
        params:
            **dag_smk.rule_params(stage, P),
            # the command's --params/--scale/--overrides: not a rerun trigger (dag_smk.command_options)
            options=dag_smk.command_options(ARGS),
        log:
            stage.log(job),
        benchmark:
            # wall, CPU, max RSS and I/O of each job: the report's "Where the time went"
            dag_smk.benchmark_of(stage, P.scale, job)
        threads: threads_of(stage)
        resources:
            # a training run's world (ranks per node, nodes): the profile's set-resources override it
            **dag_smk.resources_of(stage),
        shell:
            # Snakemake evaluates this twice: at parse time (here `stage` is this rule's) and again
            # when the job runs, after the loop (`stage` is then the last one, but the job's own
            # `rule`, its name, is a local of the function Snakemake runs it in).
            shell_of(STAGES[locals().get("rule", stage.name)])
