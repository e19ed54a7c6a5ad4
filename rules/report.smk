# The whole-model benchmark and the report. Paths, params and commands:
# kernattn.dag.stages.shared_stages.


rule bench:
    # Whole-model throughput, memory and MFU (GKA paper Table 4). Run locally it asks for every
    # core so that no training job runs beside it and disturbs the timings; on a cluster the
    # job has its node's CPUs to itself anyway (profiles set its resources).
    input:
        STAGES["bench"].inputs(None),
    output:
        STAGES["bench"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["bench"], P),
    log:
        STAGES["bench"].log(None),
    threads: threads_of(STAGES["bench"])
    shell:
        shell_of(STAGES["bench"])


rule report:
    input:
        STAGES["report"].inputs(None),
    output:
        STAGES["report"].outputs(None),
    params:
        **dag_smk.rule_params(STAGES["report"], P),
    log:
        STAGES["report"].log(None),
    threads: threads_of(STAGES["report"])
    shell:
        shell_of(STAGES["report"])
