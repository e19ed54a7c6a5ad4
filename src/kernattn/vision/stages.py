"""The vision track's files in the DAG (kernattn.dag.stages builds its stages from them):

    prepare_vision -> train_vision@<run> (variant x seed) -> analyze_vision@<run> (DeiT, GKA at
    vision.viz_seed); count_vision (no inputs); all of them -> report
"""

from __future__ import annotations

from .params import VisionParams

META = "meta.json"
VIZ_VARIANTS = ("deit", "gka")  # section 7 shows GKA beside DeiT


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
