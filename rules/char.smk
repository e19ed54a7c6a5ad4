# The char-level GPT track (seeds 000/001): the corpus, one training per matrix run, the GPA
# readings. Paths, params and commands: kernattn.dag.stages.char_stages.


rule prepare:
    input:
        STAGES["prepare"].inputs(None),
    output:
        STAGES["prepare"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["prepare"], P),
    log:
        STAGES["prepare"].log(None),
    threads: threads_of(STAGES["prepare"])
    shell:
        shell_of(STAGES["prepare"])


rule train:
    # The run folder keeps its checkpoint across failures; a rerun resumes from it.
    input:
        STAGES["train"].inputs("{run}"),
    output:
        STAGES["train"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["train"]),
    params:
        **dag_smk.rule_params(STAGES["train"], P),
    log:
        STAGES["train"].log("{run}"),
    threads: threads_of(STAGES["train"])
    shell:
        shell_of(STAGES["train"])


rule analyze_corpus:
    # seed 001 Figure 5b: the corpus's newline separations, once per scale.
    input:
        STAGES["analyze_corpus"].inputs(None),
    output:
        STAGES["analyze_corpus"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["analyze_corpus"], P),
    log:
        STAGES["analyze_corpus"].log(None),
    threads: threads_of(STAGES["analyze_corpus"])
    shell:
        shell_of(STAGES["analyze_corpus"])


rule analyze_gpa:
    # seed 001 3.1-3.2 and 4 on one GPA run: bank shapes, bump, sampled text, head removal.
    input:
        STAGES["analyze_gpa"].inputs("{run}"),
    output:
        STAGES["analyze_gpa"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["analyze_gpa"]),
    params:
        **dag_smk.rule_params(STAGES["analyze_gpa"], P),
    log:
        STAGES["analyze_gpa"].log("{run}"),
    threads: threads_of(STAGES["analyze_gpa"])
    shell:
        shell_of(STAGES["analyze_gpa"])
