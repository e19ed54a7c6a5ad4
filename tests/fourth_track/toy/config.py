"""The toy track's params section, `toy:` in params.yaml: a unit's own section (config.loader's
unit_sections), built and checked by the same schema rules as every section."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.common import RunSettings, run_default
from ...config.rows import Row, check_rows
from ...config.schema import positive
from ...errors import ParamsError

SECTION = "toy"


@dataclass(frozen=True)
class Section(RunSettings):
    out_dir: str = run_default("out_dir", "results/{scale}/toy/runs")
    compile: bool = run_default("compile", False)
    data_dir: str = "results/{scale}/toy/data"
    lr: float = field(default=3e-3, metadata=positive("Adam's learning rate."))
    max_steps: int = field(default=20, metadata=positive("Optimizer steps of a run."))
    eval_every: int = field(default=10, metadata=positive("Steps between evaluations."))
    batch_size: int = field(default=8, metadata=positive("Sequences a step."))
    context: int = field(default=16, metadata=positive("Tokens a sequence."))
    vocab: int = field(default=8, metadata=positive("Token ids 0..vocab-1."))
    lag: int = field(default=3, metadata=positive("The target is the input `lag` tokens back."))
    d_model: int = field(default=16, metadata=positive("Model width."))
    n_head: int = field(default=2, metadata=positive("Attention heads."))
    seeds: tuple[int, ...] = (0,)
    rows: tuple[Row, ...] = (Row("softmax", "softmax"),)


def check(section: Section, where: str) -> None:
    check_rows(section.rows, "toy.rows", where, aliases={}, defaults={}, compute=False)
    if section.lag >= section.context:
        raise ParamsError(f"{where}: toy.lag {section.lag} must be below toy.context {section.context}")
