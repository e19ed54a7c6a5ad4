"""kernattn.units.UNITS: every unit has the same shape, and the DAG, the CLI, the page and the
MLflow sync each loop over that one list (a unit left out of any of them fails here)."""

from __future__ import annotations

import importlib.resources
import importlib.util
from pathlib import Path

import pytest

from kernattn.cli import STAGES, build_parser
from kernattn.config import load_params
from kernattn.dag.stages import stage_table
from kernattn.page.build import page_parts
from kernattn.tracking.sync import run_roots
from kernattn.units import TRACKS, UNITS, unit

from .paths import REPO


@pytest.fixture(scope="module")
def micro():
    return load_params(REPO / "params.yaml", "micro")


@pytest.mark.parametrize("u", UNITS, ids=lambda u: u.name)
def test_every_unit_has_the_shape(u, micro):
    stages = u.module("stages")
    assert callable(stages.stages) and callable(stages.run_roots) and callable(stages.report_inputs)
    assert isinstance(stages.REPORT_SECTIONS, tuple)
    assert all(isinstance(path, str) for path in stages.report_inputs(micro))
    files = importlib.resources.files(u.package)
    for part in u.parts:
        module = u.module(part.module)
        assert module.OUTLINE[0] and isinstance(module.CLAIM_KINDS, dict)
        assert callable(module.section) and callable(module.claims)
        for template in (part.template, part.provenance):
            assert template is None or files.joinpath(template).is_file(), (u.name, template)
    for command, (module, _) in u.commands.items():
        assert importlib.util.find_spec(f"{u.package}.{module}") is not None, (command, module)


def test_the_cli_lists_every_units_commands_once_under_the_units_heading():
    from kernattn.cli import GROUPS

    for u in UNITS:
        assert GROUPS[u.title] == tuple(u.commands), u.name
        for command, (module, help_text) in u.commands.items():
            assert STAGES[command] == (f"{u.package}.{module}", help_text)
    listed = [c for names in GROUPS.values() for c in names]
    assert sorted(listed) == sorted(STAGES) and len(listed) == len(set(listed))
    parser = build_parser("train-lm")
    assert parser.stages["train-lm"].get_default("_run").__module__ == "kernattn.tracks.lm.track"


def test_the_dag_is_every_units_stages_then_the_page(micro):
    table = stage_table(micro)
    own = {u.name: [s.name for s in u.module("stages").stages(micro)] for u in UNITS}
    assert list(table) == [*(s for names in own.values() for s in names), "plan", "report"]
    report = table["report"]
    wanted = [f for u in UNITS for f in u.module("stages").report_inputs(micro)]
    assert set(wanted) <= set(report.inputs(None))
    assert set(report.code) >= {"report", "page", "tracks", "studies", "bench"}


def test_the_page_has_every_units_parts_in_order():
    keys = [p.key for p in page_parts()]
    assert keys == [part.key for u in UNITS for part in u.parts] + ["plan", "timing"]
    assert keys[:len(TRACKS)] == list(TRACKS)


def test_sync_walks_every_units_run_folders(micro):
    roots = run_roots(micro)
    for name in ("wrap", "gka_init", "prune"):  # the studies' runs are uploaded too
        studies = unit(name).module("stages").run_roots(micro)
        assert studies and set(map(Path, studies)) <= set(roots), name
    for t in TRACKS:
        assert Path(unit(t).module("stages").runs_root(micro)) in roots
    char = unit("char").module("stages")
    assert Path(char.runs_root(micro)) / char.BUDGETS in roots  # the budget sweep's cooldown branches


def test_an_unknown_unit_names_the_units():
    with pytest.raises(ValueError, match="the units are char, lm, vision, extrapolation, wrap, gka_init, prune, bench"):
        unit("nope")
