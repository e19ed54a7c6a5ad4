"""The vision part of the DAG: outputs, and the dvc.yaml stages (rules/vision.smk is the
Snakefile's form of the same stages).

dvc stages vision-prepare -> vision-train-<run> (variant x seed) -> vision-analyze-<run> (DeiT, GKA
at vision.viz_seed); vision-count (no inputs); all of them -> report. (Named vision-* so that the
char-GPT stages keep the train-* and analyze-* prefixes to themselves.)
"""

from __future__ import annotations

from .params import VisionParams

META = "meta.json"
VIZ_VARIANTS = ("deit", "gka")  # section 7 shows GKA beside DeiT
CODE = "src/kernattn"


def data_output(vp: VisionParams) -> str:
    return f"{vp.data_dir}/{META}"


def run_ids(vp: VisionParams) -> list[str]:
    return [f"{v}-s{s}" for v in vp.variants for s in vp.seeds]


def run_output(vp: VisionParams, run_id: str) -> str:
    return f"{vp.out_dir}/{run_id}/final.json"


def viz_runs(vp: VisionParams) -> list[str]:
    seed = vp.viz_seed if vp.viz_seed in vp.seeds else vp.seeds[0]
    return [f"{v}-s{seed}" for v in vp.variants if v in VIZ_VARIANTS]


def analysis_output(vp: VisionParams, run_id: str) -> str:
    return f"{vp.analysis_dir}/{run_id}/summary.json"


def counts_output(vp: VisionParams) -> str:
    return f"{vp.counts_dir}/counts.json"


def report_inputs(vp: VisionParams) -> list[str]:
    """What the report reads of the vision part (Snakefile's report rule, dvc's report stage)."""
    return [data_output(vp), counts_output(vp), *(run_output(vp, r) for r in run_ids(vp)),
            *(analysis_output(vp, r) for r in viz_runs(vp))]


def add_dvc_stages(stages: dict, params, params_file: str, cache: bool = False) -> None:
    """Add the vision stages to dvc.yaml's `stages` and make the report depend on them."""
    from ..pipeline import scale_args, watched

    vp = params.vision
    args = scale_args(params, params_file)
    keys = watched(params, params_file, ("vision",))
    stages["vision-prepare"] = {
        "cmd": f"kernattn prepare-vision {args}", "deps": [f"{CODE}/vision/data.py"], "params": keys,
        "outs": [{vp.data_dir: {"cache": cache}}],
    }
    stages["vision-count"] = {
        "cmd": f"kernattn count-vision {args}", "deps": [f"{CODE}/vision", f"{CODE}/attention"], "params": keys,
        "outs": [{vp.counts_dir: {"cache": cache}}],
    }
    train_keys = watched(params, params_file, ("vision", "tracking"))
    for run in run_ids(vp):
        stages[f"vision-train-{run}"] = {
            "cmd": f"kernattn train-vision {args} --run {run} --stale archive",
            "deps": [vp.data_dir, CODE], "params": train_keys,
            "outs": [{f"{vp.out_dir}/{run}": {"cache": cache, "persist": True}}],
        }
    for run in viz_runs(vp):
        stages[f"vision-analyze-{run}"] = {
            "cmd": f"kernattn analyze-vision {args} --run {run}",
            "deps": [vp.data_dir, run_output(vp, run), CODE], "params": keys,
            "outs": [{f"{vp.analysis_dir}/{run}": {"cache": cache}}],
        }
    report = stages["report"]
    report["deps"] = [*report["deps"], vp.data_dir, vp.counts_dir, *(run_output(vp, r) for r in run_ids(vp)),
                      *(f"{vp.analysis_dir}/{r}" for r in viz_runs(vp))]
    report_keys = report["params"][0]
    for k in watched(params, params_file, ("vision",))[0][params_file]:
        if k not in report_keys[params_file]:
            report_keys[params_file].append(k)
