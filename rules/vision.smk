# GKA on vision (seed 003 sections 4 and 7). Paths, params and commands:
# kernattn.dag.stages.vision_stages.


rule prepare_vision:
    input:
        STAGES["prepare_vision"].inputs(None),
    output:
        STAGES["prepare_vision"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["prepare_vision"], P),
    log:
        STAGES["prepare_vision"].log(None),
    threads: threads_of(STAGES["prepare_vision"])
    shell:
        shell_of(STAGES["prepare_vision"])


rule count_vision:
    # Tables 2/3/5 parameter and FLOP counts (meta device): no data needed.
    input:
        STAGES["count_vision"].inputs(None),
    output:
        STAGES["count_vision"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["count_vision"], P),
    log:
        STAGES["count_vision"].log(None),
    threads: threads_of(STAGES["count_vision"])
    shell:
        shell_of(STAGES["count_vision"])


rule train_vision:
    # The run folder keeps its checkpoint across failures; a rerun resumes from it.
    input:
        STAGES["train_vision"].inputs("{run}"),
    output:
        STAGES["train_vision"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["train_vision"]),
    params:
        **dag_smk.rule_params(STAGES["train_vision"], P),
    log:
        STAGES["train_vision"].log("{run}"),
    threads: threads_of(STAGES["train_vision"])
    shell:
        shell_of(STAGES["train_vision"])


rule analyze_vision:
    # seed 003 section 7: one forward pass with hooks on the trained model.
    input:
        STAGES["analyze_vision"].inputs("{run}"),
    output:
        STAGES["analyze_vision"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["analyze_vision"]),
    params:
        **dag_smk.rule_params(STAGES["analyze_vision"], P),
    log:
        STAGES["analyze_vision"].log("{run}"),
    threads: threads_of(STAGES["analyze_vision"])
    shell:
        shell_of(STAGES["analyze_vision"])
