"""The old name of the DAG module, kept for code that imports it: everything now lives in
kernattn.dag (the stage table, dvc.yaml, what the Snakefile reads)."""

from __future__ import annotations

from .dag.dvc import HELP, add_arguments, dvc_stages, render, run, watched
from .dag.snakemake import scale_args
from .dag.stages import (DATA_FILES, analysis_output, bench_output, corpus_analysis_output, data_outputs,
                         gpa_run_ids, report_output, run_output, run_spec, stage_table)

__all__ = ["DATA_FILES", "HELP", "add_arguments", "analysis_output", "bench_output", "corpus_analysis_output",
           "data_outputs", "dvc_stages", "gpa_run_ids", "render", "report_output", "run", "run_output", "run_spec",
           "scale_args", "stage_table", "watched"]
