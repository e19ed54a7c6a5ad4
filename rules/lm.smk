# The nanochat-style LM track (seed 003 section 5): tokenizer + token streams, one training and
# one evaluation per LM run. Paths, params and commands: kernattn.dag.stages.lm_stages.


rule prepare_lm:
    input:
        STAGES["prepare_lm"].inputs(None),
    output:
        STAGES["prepare_lm"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["prepare_lm"], P),
    log:
        STAGES["prepare_lm"].log(None),
    threads: threads_of(STAGES["prepare_lm"])
    shell:
        shell_of(STAGES["prepare_lm"])


rule train_lm:
    # The run folder keeps its checkpoint; a rerun resumes (or only rewrites final.json).
    input:
        STAGES["train_lm"].inputs("{run}"),
    output:
        STAGES["train_lm"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["train_lm"]),
    params:
        **dag_smk.rule_params(STAGES["train_lm"], P),
    log:
        STAGES["train_lm"].log("{run}"),
    threads: threads_of(STAGES["train_lm"])
    shell:
        shell_of(STAGES["train_lm"])


rule eval_lm:
    input:
        STAGES["eval_lm"].inputs("{run}"),
    output:
        STAGES["eval_lm"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["eval_lm"]),
    params:
        **dag_smk.rule_params(STAGES["eval_lm"], P),
    log:
        STAGES["eval_lm"].log("{run}"),
    threads: threads_of(STAGES["eval_lm"])
    shell:
        shell_of(STAGES["eval_lm"])
