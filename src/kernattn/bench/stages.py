"""The benchmarks' part of the DAG: `kernattn bench` once per scale, which builds every track's
models (so it reads their model sections and code). The attention and loader benchmarks are
commands run by hand (`make bench`), not stages."""

from __future__ import annotations

from pathlib import Path

from ..config import Params
from ..stage import Stage
from ..units import TRACKS, unit

REPORT_SECTIONS = ("bench",)  # what the page's benchmark part reads beside its output


def bench_output(params: Params) -> str:
    """The whole-model benchmark's CSV (kernattn bench): once per scale."""
    return f"{params.bench.out_dir}/models.csv"


def stages(p: Params) -> list[Stage]:
    model_sections = (s for t in TRACKS for s in unit(t).module("stages").MODEL_SECTIONS)
    return [Stage("bench", ("bench", *model_sections), ("bench", "attention", "tracks"),
                  lambda _: [bench_output(p)], dvc_outs=lambda _: [p.bench.out_dir], threads="all")]


def report_inputs(p: Params) -> list[str]:
    return [bench_output(p)]


def run_roots(p: Params) -> list[Path]:
    return []  # it trains no runs
