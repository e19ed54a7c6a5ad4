"""The report's cost-plan part (kernattn.page.plan) on a plan written as `kernattn plan --out`
writes it, from constructed jobs with hand-computed hours; and its note when no plan exists."""

from __future__ import annotations

import json

import pytest

from kernattn.config import load_params
from kernattn.dag import plan as pl
from kernattn.dag import plan_flops as pf
from kernattn.tracks.char.stages import runs
from kernattn.work import PlannedRun, Work, row_tables
from kernattn.page import plan as part
from kernattn.report.part import ReportContext
from kernattn.stage import Stage

from .paths import REPO

PARAMS = REPO / "params.yaml"


def _write_plan(folder, p, monkeypatch) -> None:
    """rope-s0: 3600 FLOPs, gpa_dp_m8-s0: 7200 at 1 FLOP/s x MFU 0.5 on 1 GPU each: 2 and 4 GPU-hours."""
    table = {s.name: s for s in [
        Stage("prepare", (), (), lambda _: ["d"]),
        Stage("train", (), (), lambda r: [f"{r}.json"], inputs=lambda _: ["d"], runs=("rope-s0", "gpa_dp_m8-s0"))]}
    fake = {"rope": Work(1.0, 0.0, 1, 3600, 0), "gpa_dp_m8": Work(1.0, 0.0, 1, 7200, 0)}
    trainings = {"train": lambda q: {r.run_id: PlannedRun("char", r, lambda _p, spec: fake[spec.row],
                                                          paper=row_tables(q.matrix.rows, r.row)) for r in runs(q)}}
    monkeypatch.setattr(pf, "planned_stages", lambda: trainings)
    plan = pl.make_plan(p, table, pl.Device("test", 1.0, 0.5, "stated"), 2, lambda stage: 1)
    folder.mkdir(parents=True)
    pl.table(plan, safety=1.0).to_csv(folder / f"{p.scale}.csv", index=False)
    (folder / f"{p.scale}.json").write_text(json.dumps(pl.summary(plan)))


def test_plan_part_sums_stages_and_names_the_missing_plan(tmp_path, monkeypatch):
    p = load_params(PARAMS, "micro", {"bench": {"out_dir": str(tmp_path / "results" / "bench")}})
    _write_plan(tmp_path / "results" / "plan", p, monkeypatch)
    ctx = ReportContext(p, str(PARAMS), tmp_path / "report", papers={})
    ctx.tables.mkdir(parents=True)
    monkeypatch.setattr(part, "COMMITTED", tmp_path / "committed")  # none kept in git
    mine, paper = part.section(ctx)["plans"]
    assert mine["found"] and mine["summary"]["gpu_hours"] == 6.0 and mine["summary"]["wall_h"] == 4.0
    assert mine["summary"]["gpu_hours_by_source"] == {"gpa-short": 4.0, "gpa-short/gpa-long": 2.0}
    # rope is the RoPE of both seeds' Figure 2, gpa_dp_m8 (params.yaml) the decaying periodic kernel of 000's
    assert mine["summary"]["gpu_hours_by_paper_table"] == {"gpa-short Figure 2": 6.0, "gpa-long Figure 2": 2.0}
    import pandas as pd

    stages = pd.read_csv(ctx.tables / "plan-micro.csv")
    assert stages.to_dict("records") == [{"stage": "train", "jobs": 2, "FLOPs": 10800.0, "GPU-hours": 6.0, "MFU": 0.5,
                                          "longest wall (h)": 4.0, "SLURM limit (min)": 4 * 60 + pl.MARGIN_MIN}]
    assert not paper["found"] and paper["command"] == f"kernattn plan --scale paper --gpu h100 --out {tmp_path}/results/plan/paper.csv"


def test_plan_part_falls_back_to_the_committed_plan(tmp_path, monkeypatch):
    p = load_params(PARAMS, "micro", {"bench": {"out_dir": str(tmp_path / "results" / "bench")}})
    _write_plan(tmp_path / "committed", p, monkeypatch)  # micro's plan, kept "in git"
    monkeypatch.setattr(part, "COMMITTED", tmp_path / "committed")
    ctx = ReportContext(p, str(PARAMS), tmp_path / "report", papers={})
    ctx.tables.mkdir(parents=True)
    mine = part.section(ctx)["plans"][0]
    assert mine["found"] and mine["path"] == str(tmp_path / "committed" / "micro.csv")


def test_the_committed_paper_plan_is_readable():
    """results/plan/paper.csv: the columns the part reads, every planned stage, the summary's sum."""
    import pandas as pd

    frame = pd.read_csv(REPO / "results" / "plan" / "paper.csv")
    summary = json.loads((REPO / "results" / "plan" / "paper.json").read_text())
    paper = load_params(REPO / "params.yaml", "paper")
    planned = {s for s in pf.planned_stages() if pf.stage_runs(paper, s)}  # the paper scale has no budget sweep
    assert set(frame["stage"]) == planned and summary["scale"] == "paper"
    assert frame["gpu_hours"].sum() == pytest.approx(summary["gpu_hours"])
    assert len(part.stage_table(frame)) == len(planned)


def test_the_shipped_profile_s_time_limits_are_the_committed_paper_plan_s():
    """profiles/slurm's runtime of each planned stage is results/plan/paper.csv's longest run of
    that stage (`slurm_minutes`: planned wall x 2 + 15 min), so a change of the plan that is not
    carried into the profile (or the reverse) fails here."""
    import pandas as pd
    import yaml

    frame = pd.read_csv(REPO / "results" / "plan" / "paper.csv")
    want = frame.groupby("stage")["slurm_minutes"].max().to_dict()
    for name in ("slurm", "slurm-test"):
        resources = yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())["set-resources"]
        assert {stage: resources[stage]["runtime"] for stage in want} == want, name
