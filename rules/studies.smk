# The studies of issue 17 (`snakemake --cores all studies`; not part of `all`): the line-wrap
# counterfactual, GKA's bandwidth at initialisation, removing weak heads. Paths, params and
# commands: kernattn.dag.stages.studies_stages.


rule prepare_wrap:
    input:
        STAGES["prepare_wrap"].inputs(None),
    output:
        STAGES["prepare_wrap"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["prepare_wrap"], P),
    log:
        STAGES["prepare_wrap"].log(None),
    threads: threads_of(STAGES["prepare_wrap"])
    shell:
        shell_of(STAGES["prepare_wrap"])


rule train_wrap:
    # A GPA row of the matrix on a counterfactual corpus; resumes from its checkpoint.
    input:
        STAGES["train_wrap"].inputs("{run}"),
    output:
        STAGES["train_wrap"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["train_wrap"]),
    params:
        **dag_smk.rule_params(STAGES["train_wrap"], P),
    log:
        STAGES["train_wrap"].log("{run}"),
    threads: threads_of(STAGES["train_wrap"])
    shell:
        shell_of(STAGES["train_wrap"])


rule wrap_study:
    input:
        STAGES["wrap_study"].inputs(None),
    output:
        STAGES["wrap_study"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["wrap_study"], P),
    log:
        STAGES["wrap_study"].log(None),
    threads: threads_of(STAGES["wrap_study"])
    shell:
        shell_of(STAGES["wrap_study"])


rule train_gka_init:
    # A GKA row (char, LM or vision) with one init_sigma of the ablation; resumes from its
    # checkpoint. Its input is its own track's data (a function of the run; DVC's foreach lists all three).
    input:
        lambda wildcards: STAGES["train_gka_init"].inputs(wildcards.run),
    output:
        STAGES["train_gka_init"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["train_gka_init"]),
    params:
        **dag_smk.rule_params(STAGES["train_gka_init"], P),
    log:
        STAGES["train_gka_init"].log("{run}"),
    threads: threads_of(STAGES["train_gka_init"])
    shell:
        shell_of(STAGES["train_gka_init"])


rule gka_init_study:
    input:
        STAGES["gka_init_study"].inputs(None),
    output:
        STAGES["gka_init_study"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["gka_init_study"], P),
    log:
        STAGES["gka_init_study"].log(None),
    threads: threads_of(STAGES["gka_init_study"])
    shell:
        shell_of(STAGES["gka_init_study"])


rule prune:
    # Two fine-tunings (heads removed / control) of one trained GPA run; each resumes.
    input:
        STAGES["prune"].inputs("{run}"),
    output:
        STAGES["prune"].outputs("{run}"),
    wildcard_constraints:
        run=run_constraint(STAGES["prune"]),
    params:
        **dag_smk.rule_params(STAGES["prune"], P),
    log:
        STAGES["prune"].log("{run}"),
    threads: threads_of(STAGES["prune"])
    shell:
        shell_of(STAGES["prune"])


rule prune_study:
    input:
        STAGES["prune_study"].inputs(None),
    output:
        STAGES["prune_study"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["prune_study"], P),
    log:
        STAGES["prune_study"].log(None),
    threads: threads_of(STAGES["prune_study"])
    shell:
        shell_of(STAGES["prune_study"])
