"""The prune study's files and stages (no torch: the stage table imports this).

    train@<gpa run> (main DAG) -> prune@<gpa run> -> prune_study

Under <studies.out_dir>/prune/:
    <run>/{pruned,control,random}/  the three fine-tunings of one trained GPA run (engine run folders)
    <run>/summary.json              losses before/after removal and fine-tuning, ablations, costs
    summary.json, prune.csv, prune_rows.csv   every pruned run in one table
"""

from __future__ import annotations

from pathlib import Path

from ...config import Params
from ...config.studies import prune_rows, row_seeds
from ...stage import Stage
from ...tracks.char import stages as char
from ..common import SUMMARY, root, summary_path

REPORT_SECTIONS = ()  # the page's part reads only summary.json (where it exists: not an input)
STUDY = "prune"
ARMS = ("pruned", "control", "random")  # the weak heads removed; none; as many random other heads removed


def prune_runs(p: Params) -> list[str]:
    """The main DAG's GPA runs the prune study reads."""
    return [f"{row}-s{seed}" for row in prune_rows(p) for seed in row_seeds(p, row)]


def prune_dir(p: Params, run_id: str) -> Path:
    return root(p) / STUDY / run_id


def prune_output(p: Params, run_id: str) -> str:
    return str(prune_dir(p, run_id) / SUMMARY)


def stages(p: Params) -> list[Stage]:
    runs = tuple(prune_runs(p))
    return [
        Stage("prune", ("model", "train", "matrix", "analysis", "studies"), ("",),
              lambda r: [prune_output(p, r)], inputs=lambda r: [*char.array_inputs(p), char.final_output(p, r)],
              dvc_outs=lambda r: [str(prune_dir(p, r))], runs=runs, persist=True,
              threads=p.train.threads or 4, narrow=lambda r: {"matrix": char.run_spec(p, r)}),
        Stage("prune_study", ("analysis", "studies"), ("studies/prune", "studies/common.py"),
              lambda _: [str(summary_path(p, STUDY)),
                         *(str(root(p) / STUDY / f) for f in ("prune.csv", "prune_rows.csv"))],
              inputs=lambda _: [prune_output(p, r) for r in runs]),
    ]


def report_inputs(p: Params) -> list[str]:
    """None: the study is outside the main DAG; the page reads its summary where it ran."""
    return []


def run_roots(p: Params) -> list:
    """Each pruned run's folder (its three fine-tunings are engine run folders inside)."""
    return [prune_dir(p, r) for r in prune_runs(p)]
