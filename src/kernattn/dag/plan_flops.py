"""The planned stages of every unit: what `kernattn plan` counts, gathered from the units.

Each unit with a cost.py declares there `PLANNED`: stage name -> a function of the params giving
that stage's runs as kernattn.work.PlannedRun, each with the counter of its work (FLOPs
counted on the meta device: kernattn.work). Not planned: the benchmark and the extrapolation
stages (forward passes of a few windows per run: at paper scale under 1e-5 of the DAG's
FLOPs) and every stage that trains nothing. A unit may add its own report to the plan command
(`PLAN_REPORTS`: `kernattn plan --<name>`, e.g. the LM's --lm-eval-suite).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from ..config import Params
from ..units import UNITS
from ..work import PlannedRun

COST_MODULE = "cost"  # <unit package>.cost: the unit's part of the plan


def cost_modules() -> list[ModuleType]:
    """The units' cost modules, in UNITS order (a unit that trains nothing has none)."""
    return [u.module(COST_MODULE) for u in UNITS if u.has_module(COST_MODULE)]


def planned_stages() -> dict[str, Callable[[Params], dict[str, PlannedRun]]]:
    """stage name -> its runs, over every unit; a stage two units declare is an error."""
    out: dict[str, Callable] = {}
    for module in cost_modules():
        for stage, runs in module.PLANNED.items():
            if stage in out:
                raise ValueError(f"{module.__name__}.PLANNED declares stage {stage!r}, which another unit plans too")
            out[stage] = runs
    return out


def stage_runs(p: Params, stage: str) -> dict[str, PlannedRun]:
    """The runs of a planned stage by run id."""
    return planned_stages()[stage](p)


def plan_reports() -> dict[str, tuple[str, Callable]]:
    """`kernattn plan --<name>` of every unit: name -> (help, print(params, device) -> str)."""
    return {name: entry for module in cost_modules() for name, entry in getattr(module, "PLAN_REPORTS", {}).items()}
