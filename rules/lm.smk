# The nanochat-style LM track (seed 003 section 5): tokenizer + token streams, one training
# and one evaluation per LM run (baseline; GKA at matched tokens and at matched FLOPs).
from kernattn.lm import pipeline as lm_pipeline

LM_RUNS = lm_pipeline.run_ids(P)
LM_DATA = lm_pipeline.data_outputs(P)


rule lm_prepare:
    output:
        LM_DATA,
    params:
        lm=P.raw["lm"],
    log:
        "results/logs/prepare-lm.log",
    shell:
        "kernattn prepare-lm {ARGS} > {log} 2>&1"


rule lm_train:
    # The run folder keeps its checkpoint; a rerun resumes (or only rewrites final.json).
    input:
        LM_DATA,
    output:
        lm_pipeline.final_output(P, "{lmrun}"),
    wildcard_constraints:
        lmrun="|".join(LM_RUNS) or "no-lm-run",
    params:
        lm=P.raw["lm"],
    log:
        "results/logs/train-{lmrun}.log",
    threads: P.lm.threads or 4
    shell:
        "kernattn train-lm {ARGS} --run {wildcards.lmrun} --stale archive > {log} 2>&1"


rule lm_eval:
    input:
        LM_DATA,
        lm_pipeline.final_output(P, "{lmrun}"),
    output:
        lm_pipeline.eval_output(P, "{lmrun}"),
    wildcard_constraints:
        lmrun="|".join(LM_RUNS) or "no-lm-run",
    params:
        lm=P.raw["lm"],
    log:
        "results/logs/eval-{lmrun}.log",
    threads: P.lm.threads or 4
    shell:
        "kernattn eval-lm {ARGS} --run {wildcards.lmrun} > {log} 2>&1"
