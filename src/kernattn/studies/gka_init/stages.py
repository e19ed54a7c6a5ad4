"""The GKA-init study's files and stages (no torch: the stage table imports this).

    prepare / prepare_lm / prepare_vision -> train_gka_init@<run> (char, LM and vision GKA rows) -> gka_init_study

Under <studies.out_dir>/gka_init/:
    runs/<run>/     a GKA run per track, init and seed (metrics.jsonl holds sigma per head)
    summary.json    final loss per init, sigma over training, mean diagonal weight
Run ids: <row>-init_<init>-s<seed> for the char track, <track>_<row>-init_<init>-s<seed> for
the others.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ...config import Params, RunSpec
from ...config.rows import runs_of
from ...config.studies import init_label, seeds
from ...stage import Stage, narrowed_section
from ...tracks import track_module
from ..common import final, root, summary_path

REPORT_SECTIONS = ()  # the page's part reads only summary.json (where it exists: not an input)
STUDY = "gka_init"
INIT_SECTIONS = ("model", "train", "matrix", "lm", "vision", "studies")  # what a GKA-init run may read


@dataclasses.dataclass(frozen=True)
class InitRun:
    """One run of the GKA-init study: `spec` is its track's run of the row with
    options.init_sigma set and the study's run id."""
    track: str   # char, lm or vision
    label: str   # the init as it appears in run ids (init_label)
    spec: RunSpec


def init_base_runs(p: Params, track: str, row: str) -> list[RunSpec]:
    """The runs of `track`'s row `row` the study repeats per init: the char row at
    studies.gka_init.seeds (or the studies' seeds), an LM or vision row at the seeds its track
    trains it with."""
    if track == "char":
        r = next(r for r in p.matrix.rows if r.name == row)
        own = p.studies.gka_init.seeds
        return runs_of([r if own is None else dataclasses.replace(r, seeds=own)], seeds(p))
    # none when the scale's rows leave the row out (config.studies.init_rows_not_trained)
    return [r for r in track_module(track, "stages").runs(p) if r.row == row]


def gka_runs(p: Params) -> dict[str, InitRun]:
    """{run id: the run}: each gka_init row x init x seed."""
    out = {}
    for entry in p.studies.gka_init.rows:
        base = init_base_runs(p, entry.track, entry.row)
        prefix = "" if entry.track == "char" else f"{entry.track}_"
        for init in p.studies.gka_init.inits:
            label = init_label(init)
            for run in base:
                run_id = f"{prefix}{run.row}-init_{label}-s{run.seed}"
                out[run_id] = InitRun(entry.track, label, dataclasses.replace(
                    run, run_id=run_id, options={**run.options, "init_sigma": init},
                    label=f"{run.label or run.row}, sigma init {label}"))
    return out


def gka_run_dir(p: Params) -> Path:
    return root(p) / STUDY / "runs"


def stages(p: Params) -> list[Stage]:
    """A GKA row of each track (char, LM, vision) per init and seed. A run reads only its own
    track's sections, narrowed to its row and seed (the others are empty for it: changing the
    LM does not retrain a char run)."""
    runs = gka_runs(p)
    tracks = {t: track_module(t, "stages") for t in ("char", "lm", "vision")}
    track_data = {"char": tracks["char"].array_inputs(p), "lm": tracks["lm"].data_outputs(p),
                  "vision": [tracks["vision"].data_output(p)]}

    def narrow(r: str) -> dict:
        run = runs[r]
        base_id = f"{run.spec.row}-s{run.spec.seed}"
        view = {"matrix": dataclasses.asdict(run.spec)} if run.track == "char" else narrowed_section(
            p, run.track, tracks[run.track].runs(p), base_id)
        own = {s: view.get(s, p.raw[s]) for s in tracks[run.track].SECTIONS if s in INIT_SECTIONS}
        return {s: own.get(s, {}) for s in INIT_SECTIONS[:-1]} | {"studies": {"init": run.label}}

    finals = [final(gka_run_dir(p), r) for r in runs]
    return [
        Stage("train_gka_init", INIT_SECTIONS, ("",), lambda r: [final(gka_run_dir(p), r)],
              inputs=lambda r: track_data[runs[r].track] if r in runs else [f for d in track_data.values() for f in d],
              dvc_outs=lambda r: [str(gka_run_dir(p) / r)], runs=tuple(runs), extra="--stale archive",
              persist=True, threads=p.train.threads or 4, narrow=narrow),
        Stage("gka_init_study", INIT_SECTIONS, ("",), lambda _: [str(summary_path(p, STUDY))],
              inputs=lambda _: [*dict.fromkeys(f for r in runs.values() for f in track_data[r.track]), *finals]),
    ]


def report_inputs(p: Params) -> list[str]:
    """None: the study is outside the main DAG; the page reads its summary where it ran."""
    return []


def run_roots(p: Params) -> list:
    return [gka_run_dir(p)]
