"""The vision track's stages, runs and the only owner of where its files live:

    prepare_vision -> train_vision@<run> (vision.rows x seeds) -> analyze_vision@<run> (the
    rows of softmax and GKA attention at vision.viz_seed); count_vision (no inputs); all of
    them -> report
"""

from __future__ import annotations

from pathlib import Path

from ...config import Params, RunSpec, resolve_attention, runs_of
from ...config.rows import find_in
from ...config.vision import VARIANTS, VISION_DEFAULTS, VIZ_ATTENTIONS, VisionParams
from ...stage import RunFolders, Stage, narrowed_section

NAME = "vision"
SECTIONS = MODEL_SECTIONS = REPORT_SECTIONS = ("vision",)  # see kernattn.tracks.char.stages
META = "meta.json"


# ----------------------------------------------------------------------------- runs
def vision_runs(vp: VisionParams) -> list[RunSpec]:
    """The runs of a `vision:` section: its rows x seeds."""
    return runs_of(vp.rows, vp.seeds)


def runs(p: Params) -> list[RunSpec]:
    return vision_runs(p.vision)


def run_ids(vp: VisionParams) -> list[str]:
    return [r.run_id for r in vision_runs(vp)]


def find_vision_run(p: Params, run_id: str) -> RunSpec:
    return find_in(runs(p), run_id, f"{p.path} (vision.rows of scale {p.scale!r})", "vision run")


def attention_of(row) -> str:
    """The registry attention a vision row (or run) trains."""
    return resolve_attention(row.variant, row.options, VARIANTS, VISION_DEFAULTS)[0]


def viz_runs(p: Params) -> list[str]:
    """Section 7's runs: each row of softmax or GKA attention (VIZ_ATTENTIONS) at viz_seed (or
    the row's first seed when it does not train viz_seed)."""
    vp, out = p.vision, []
    for row in vp.rows:
        seeds = row.seeds if row.seeds is not None else vp.seeds
        if attention_of(row) in VIZ_ATTENTIONS:
            out.append(f"{row.name}-s{vp.viz_seed if vp.viz_seed in seeds else seeds[0]}")
    return out


# ----------------------------------------------------------------------------- paths
def data_output(p: Params) -> str:
    """The prepared data set's provenance (what later stages depend on)."""
    return f"{p.vision.data_dir}/{META}"


RUNS = RunFolders("vision")  # <vision.out_dir>/<run id>/: the engine's run folder (stage.RunFolders)
runs_root, run_dir, final_output = RUNS.root, RUNS.run_dir, RUNS.final_output


def run_roots(p: Params) -> list[Path]:
    """The folders its runs lie in (what `kernattn sync-mlflow` walks)."""
    return [runs_root(p)]



def analysis_dir(p: Params, run_id: str) -> Path:
    """One run's section 7 figures (kernattn analyze-vision)."""
    return Path(p.vision.analysis_dir) / run_id


def analysis_output(p: Params, run_id: str) -> str:
    return str(analysis_dir(p, run_id) / "summary.json")


def counts_output(p: Params) -> str:
    return f"{p.vision.counts_dir}/counts.json"


def report_inputs(p: Params) -> list[str]:
    """What the report reads of this track."""
    return [data_output(p), counts_output(p), *(final_output(p, r) for r in run_ids(p.vision)),
            *(analysis_output(p, r) for r in viz_runs(p))]


# ----------------------------------------------------------------------------- stages
def stages(p: Params) -> list[Stage]:
    vp, data, specs = p.vision, [data_output(p)], runs(p)
    threads = vp.threads or 4

    def narrow(run_id: str) -> dict:
        return narrowed_section(p, "vision", specs, run_id)
    return [
        Stage("prepare_vision", ("vision",), ("tracks/vision/data.py", "fetch.py"), lambda _: data,
              dvc_outs=lambda _: [vp.data_dir]),
        Stage("count_vision", ("vision",), ("tracks/vision", "attention"), lambda _: [counts_output(p)],
              dvc_outs=lambda _: [vp.counts_dir]),
        Stage("train_vision", ("vision",), ("",), lambda r: [final_output(p, r)],
              inputs=lambda _: data, dvc_outs=lambda r: [str(run_dir(p, r))],
              runs=tuple(r.run_id for r in specs), extra="--stale archive", persist=True, threads=threads,
              narrow=narrow, metric=True),
        Stage("analyze_vision", ("vision",), ("",), lambda r: [analysis_output(p, r)],
              inputs=lambda r: [*data, final_output(p, r)], dvc_outs=lambda r: [str(analysis_dir(p, r))],
              runs=tuple(viz_runs(p)), threads=threads, narrow=narrow),
    ]
