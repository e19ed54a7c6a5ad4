# kernattn: the DAG. Every rule calls the `kernattn` CLI; params.yaml is the one source of truth.
#
#   snakemake --cores all                      # the scale named in params.yaml (tiny by default)
#   snakemake --cores all --config scale=micro # another scale, same DAG
#   snakemake --profile slurm all              # on a cluster (see profiles/slurm, `kernattn install-profile`)
#
# dvc.yaml holds the same stages for `dvc repro` (generated: `kernattn dvc-yaml`).
from kernattn.config import load_params, run_matrix
from kernattn import pipeline
from snakemake.exceptions import WorkflowError

PARAMS_FILE = config.get("params", "params.yaml")
P = load_params(PARAMS_FILE, config.get("scale"))
ARGS = pipeline.scale_args(P, PARAMS_FILE)
RUNS = [run.run_id for run in run_matrix(P)]
DATA = pipeline.data_outputs(P)
GPA_RUNS = pipeline.gpa_run_ids(P)
try:  # the local core count (--cores); cluster executors have none and raise
    ALL_CORES = workflow.cores
except WorkflowError:
    ALL_CORES = 1


rule all:
    input:
        pipeline.report_output(P),

include: "rules/vision.smk"


include: "rules/lm.smk"


# Rerun triggers: each rule's `params` carry the params.yaml sections it reads, so editing
# one section reruns exactly the rules that depend on it.
rule prepare:
    output:
        DATA,
    params:
        data=P.raw["data"],
    log:
        "results/logs/prepare.log",
    shell:
        "kernattn prepare {ARGS} > {log} 2>&1"


rule train:
    # The run folder keeps its checkpoint across failures; a rerun resumes from it.
    input:
        DATA[:3],
    output:
        pipeline.run_output(P, "{run}"),
    params:
        model=P.raw["model"],
        train=P.raw["train"],
        matrix=P.raw["matrix"],
    log:
        "results/logs/train-{run}.log",
    threads: P.train.threads or 4
    shell:
        "kernattn train {ARGS} --run {wildcards.run} --stale archive > {log} 2>&1"


rule analyze_corpus:
    # seed 001 Figure 5b: the corpus's newline separations, once per scale.
    input:
        DATA[:3],
    output:
        pipeline.corpus_analysis_output(P),
    params:
        analysis=P.raw["analysis"],
    log:
        "results/logs/analyze-corpus.log",
    shell:
        "kernattn analyze-corpus {ARGS} > {log} 2>&1"


rule analyze_gpa:
    # seed 001 3.1-3.2 and 4 on one GPA run: bank shapes, bump, sampled text, head removal.
    input:
        DATA[:3],
        pipeline.run_output(P, "{run}"),
    output:
        pipeline.analysis_output(P, "{run}"),
    wildcard_constraints:
        run="|".join(GPA_RUNS) or "no-gpa-run",
    params:
        model=P.raw["model"],
        train=P.raw["train"],
        run=lambda wildcards: pipeline.run_spec(P, wildcards.run),
        analysis=P.raw["analysis"],
    log:
        "results/logs/analyze-{run}.log",
    threads: P.train.threads or 4
    shell:
        "kernattn analyze-gpa {ARGS} --run {wildcards.run} > {log} 2>&1"


rule bench:
    # Whole-model throughput, memory and MFU (GKA paper Table 4). Run locally it asks for every
    # core so that no training job runs beside it and disturbs the timings; on a cluster the
    # job has its node's CPUs to itself anyway (profiles set its resources).
    output:
        pipeline.bench_output(P),
    params:
        bench=P.raw["bench"],
        model=P.raw["model"],
        matrix=P.raw["matrix"],
    log:
        "results/logs/bench.log",
    threads: ALL_CORES
    shell:
        "kernattn bench {ARGS} > {log} 2>&1"


rule report:
    input:
        DATA[3],
        pipeline.bench_output(P),
        expand(pipeline.run_output(P, "{run}"), run=RUNS),
        pipeline.corpus_analysis_output(P),
        expand(pipeline.analysis_output(P, "{run}"), run=GPA_RUNS),
        VISION_REPORT_INPUTS,
        lm_pipeline.report_inputs(P),
    output:
        pipeline.report_output(P),
    params:
        report=P.raw["report"],
        analysis=P.raw["analysis"],
        bench=P.raw["bench"],
    log:
        "results/logs/report.log",
    shell:
        "kernattn report {ARGS} > {log} 2>&1"
