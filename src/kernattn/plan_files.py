"""Where the DAG's `plan` stage writes a scale's cost plan, and the `kernattn plan` arguments it
runs with: read by the report's plan part and by the stage table (kernattn.dag.stages, which
parses with every Snakemake command: this module imports nothing of the package)."""

from __future__ import annotations

from pathlib import Path


def plan_csv(params, scale: str) -> str:
    """Where the DAG's `plan` stage writes the plan of `scale` (results/<scale>/plan/<scale>.csv,
    beside the scale's bench folder; its summary beside it as .json): the report's plan part reads it."""
    return str(Path(params.bench.out_dir).parent / "plan" / f"{scale}.csv")


def summary_path(plan_table: str | Path) -> Path:
    """The plan's summary beside its per-job table (`kernattn plan --out F.csv` writes F.json)."""
    return Path(plan_table).with_suffix(".json")


def plan_arguments(params, scale: str) -> str:
    """The `kernattn plan` arguments for `scale` as params' own scale plans it: a CPU scale on
    this machine's two cores (its peak measured), any other on the default 8 x H100 node."""
    on_cpu = scale == params.scale and params.train.device == "cpu"
    return f"{'--gpu cpu --gpus-per-node 2' if on_cpu else '--gpu h100'} --out {plan_csv(params, scale)}"
