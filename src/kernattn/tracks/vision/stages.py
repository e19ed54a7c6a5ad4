"""The vision track's files in the DAG (kernattn.dag.stages builds its stages from them):

    prepare_vision -> train_vision@<run> (vision.rows x seeds) -> analyze_vision@<run> (the
    rows of softmax and GKA attention at vision.viz_seed); count_vision (no inputs); all of
    them -> report
"""

from __future__ import annotations

from ...config import RunSpec, resolve_attention, runs_of
from ...config.rows import find_run
from ...config.vision import VARIANTS, VISION_DEFAULTS, VIZ_ATTENTIONS
from .params import VisionParams

META = "meta.json"


def data_output(vp: VisionParams) -> str:
    return f"{vp.data_dir}/{META}"


def runs(vp: VisionParams) -> list[RunSpec]:
    return runs_of(vp.rows, vp.seeds)


def run_ids(vp: VisionParams) -> list[str]:
    return [r.run_id for r in runs(vp)]


def find_vision_run(params, run_id: str) -> RunSpec:
    return find_run(runs(params.vision), run_id, f"{params.path} (vision.rows of scale {params.scale!r})",
                    "vision run")


def attention_of(row) -> str:
    """The registry attention a vision row (or run) trains."""
    return resolve_attention(row.variant, row.options, VARIANTS, VISION_DEFAULTS)[0]


def run_output(vp: VisionParams, run_id: str) -> str:
    return f"{vp.out_dir}/{run_id}/final.json"


def viz_runs(vp: VisionParams) -> list[str]:
    """Section 7's runs: each row of softmax or GKA attention (VIZ_ATTENTIONS) at viz_seed (or
    the row's first seed when it does not train viz_seed)."""
    out = []
    for row in vp.rows:
        seeds = row.seeds if row.seeds is not None else vp.seeds
        if attention_of(row) in VIZ_ATTENTIONS:
            out.append(f"{row.name}-s{vp.viz_seed if vp.viz_seed in seeds else seeds[0]}")
    return out


def analysis_output(vp: VisionParams, run_id: str) -> str:
    return f"{vp.analysis_dir}/{run_id}/summary.json"


def counts_output(vp: VisionParams) -> str:
    return f"{vp.counts_dir}/counts.json"


def report_inputs(vp: VisionParams) -> list[str]:
    """What the report reads of the vision part (Snakefile's report rule, dvc's report stage)."""
    return [data_output(vp), counts_output(vp), *(run_output(vp, r) for r in run_ids(vp)),
            *(analysis_output(vp, r) for r in viz_runs(vp))]
