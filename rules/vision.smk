# GKA on vision (seed 003 sections 4 and 7): included by the Snakefile. The same stages as
# kernattn.vision.stages.add_dvc_stages writes into dvc.yaml.
from kernattn.vision import stages as vision_stages

VP = P.vision
VISION_RUNS = vision_stages.run_ids(VP)
VISION_VIZ = vision_stages.viz_runs(VP)
VISION_REPORT_INPUTS = vision_stages.report_inputs(VP)


rule prepare_vision:
    output:
        vision_stages.data_output(VP),
    params:
        vision=P.raw["vision"],
    log:
        "results/logs/prepare-vision.log",
    shell:
        "kernattn prepare-vision {ARGS} > {log} 2>&1"


rule count_vision:
    # Tables 2/3/5 parameter and FLOP counts (meta device): no data needed.
    output:
        vision_stages.counts_output(VP),
    params:
        vision=P.raw["vision"],
    log:
        "results/logs/count-vision.log",
    shell:
        "kernattn count-vision {ARGS} > {log} 2>&1"


rule train_vision:
    # The run folder keeps its checkpoint across failures; a rerun resumes from it.
    input:
        vision_stages.data_output(VP),
    output:
        vision_stages.run_output(VP, "{vrun}"),
    wildcard_constraints:
        vrun="|".join(VISION_RUNS),
    params:
        vision=P.raw["vision"],
        tracking=P.raw["tracking"],
    log:
        "results/logs/train-vision-{vrun}.log",
    threads: VP.threads or 4
    shell:
        "kernattn train-vision {ARGS} --run {wildcards.vrun} --stale archive > {log} 2>&1"


rule analyze_vision:
    # seed 003 section 7: one forward pass with hooks on the trained model.
    input:
        vision_stages.data_output(VP),
        vision_stages.run_output(VP, "{vrun}"),
    output:
        vision_stages.analysis_output(VP, "{vrun}"),
    wildcard_constraints:
        vrun="|".join(VISION_VIZ) or "no-vision-viz",
    params:
        vision=P.raw["vision"],
    log:
        "results/logs/analyze-vision-{vrun}.log",
    threads: VP.threads or 4
    shell:
        "kernattn analyze-vision {ARGS} --run {wildcards.vrun} > {log} 2>&1"
