"""Where the time went (kernattn.dag.timing, the page's timing part, `kernattn timing`): constructed
Snakemake benchmark files with hand-computed sums, spans and plan ratios; and the Snakefile's rules
each writing one."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from kernattn.config import load_params
from kernattn.dag import snakemake as dag_smk
from kernattn.dag import timing
from kernattn.dag.stages import stage_table
from kernattn.page import timing as part
from kernattn.report.part import ReportContext

from .paths import REPO

HEAD = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(folder, name, wall, cpu, rss, end):
    """One benchmark file as Snakemake writes it, its mtime the job's end."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.tsv"
    path.write_text(HEAD + f"{wall}\t0:00:{int(wall):02d}\t{rss}\t1\t1\t1\t0.5\t0.25\t90\t{cpu}\n")
    os.utime(path, (end, end))
    return path


@pytest.fixture
def bench(tmp_path):
    """prepare 10 s ending at t=1010 (started 1000); two train jobs 30 s and 50 s ending at 1040 and
    1060; an analysis whose run id has dashes. Span 1000..1060 = 60 s."""
    f = tmp_path / "benchmarks"
    _bench(f, "prepare", 10, 2, 100, 1010)
    _bench(f, "train-rope-s0", 30, 28, 900, 1040)
    _bench(f, "train-gpa_dp_m8-s0", 50, 45, 1000, 1060)
    _bench(f, "analyze_gpa-gpa_dp_m8-s0", 5, 4, 300, 1058)
    return f


def test_jobs_split_rule_and_run_and_sum_per_rule(bench):
    frame = timing.jobs(bench)
    assert set(zip(frame["rule"], frame["run"].fillna(""))) == {
        ("prepare", ""), ("train", "rope-s0"), ("train", "gpa_dp_m8-s0"), ("analyze_gpa", "gpa_dp_m8-s0")}
    rules = timing.per_rule(frame)
    assert list(rules["rule"]) == ["train", "prepare", "analyze_gpa"]  # costliest first
    train = rules.iloc[0]
    assert (train.jobs, train.wall_s, train.mean_wall_s, train.longest_s, train.cpu_s, train.max_rss_mb) == (
        2, 80.0, 40.0, 50.0, 73.0, 1000.0)


def test_span_is_first_start_to_last_end(bench):
    s = timing.span(timing.jobs(bench))
    assert s["jobs"] == 4 and s["span_s"] == pytest.approx(60.0) and s["job_s"] == 95.0
    assert s["cpu_s"] == 79.0 and s["busy_cores"] == pytest.approx(79.0 / 60.0)


def test_against_plan_ratios_and_unplanned_rules(bench):
    plan = pd.DataFrame({"stage": ["train", "train"], "run": ["rope-s0", "gpa_dp_m8-s0"],
                         "wall_h": [20 / 3600, 20 / 3600]})
    versus = timing.against_plan(timing.jobs(bench), plan).set_index("rule")
    assert versus.loc["train", "measured_s"] == 80.0 and versus.loc["train", "planned_s"] == pytest.approx(40.0)
    assert versus.loc["train", "ratio"] == pytest.approx(2.0)
    assert versus.loc["prepare", "note"] == timing.NOT_PLANNED and pd.isna(versus.loc["prepare", "ratio"])
    # without a plan every rule is unplanned
    assert set(timing.against_plan(timing.jobs(bench), None)["note"]) == {timing.NOT_PLANNED}


def test_an_empty_benchmark_file_names_itself_and_the_fix(tmp_path):
    (tmp_path / "train-rope-s0.tsv").write_text("")
    with pytest.raises(ValueError, match=r"train-rope-s0.tsv: an empty benchmark file .* delete it and rerun"):
        timing.jobs(tmp_path)


def test_every_rule_writes_a_benchmark_file_per_job():
    """Each stage's job has its own file under results/<scale>/benchmarks/, named rule-run."""
    p = load_params(REPO / "params.yaml", "micro")
    table = stage_table(p)
    paths = [dag_smk.benchmark_of(s, "micro", r) for s in table.values() for r in (s.runs or [None])]
    assert len(paths) == len(set(paths))
    assert dag_smk.benchmark_of(table["train"], "micro", "rope-s0") == "results/micro/benchmarks/train-rope-s0.tsv"
    assert "benchmark:" in (REPO / "Snakefile").read_text()


def test_the_part_shows_rules_slowest_jobs_and_the_plan(tmp_path, bench, monkeypatch):
    p = load_params(REPO / "params.yaml", "micro", {"bench": {"out_dir": str(tmp_path / "bench")}})
    monkeypatch.setattr(timing, "folder_of", lambda scale: bench)
    ctx = ReportContext(p, str(REPO / "params.yaml"), tmp_path / "report", papers={})
    ctx.tables.mkdir(parents=True)
    assert part.section(ctx)["plan_path"] is None  # no plan written at this scale
    (tmp_path / "plan").mkdir()  # plan_csv: beside the scale's bench folder
    pd.DataFrame({"stage": ["train"], "run": ["rope-s0"], "wall_h": [15 / 3600]}).to_csv(
        tmp_path / "plan" / "micro.csv", index=False)
    got = part.section(ctx)
    assert got["found"] and got["span"]["jobs"] == 4 and got["ratio_range"] == pytest.approx((2.0, 2.0))
    assert "gpa_dp_m8-s0" in got["slowest"] and "not planned" in got["versus"]
    assert list(pd.read_csv(ctx.tables / "timing-rules.csv")["rule"]) == ["train", "prepare", "analyze_gpa"]


def test_the_part_says_where_benchmarks_are_expected(tmp_path, monkeypatch):
    p = load_params(REPO / "params.yaml", "micro")
    monkeypatch.setattr(timing, "folder_of", lambda scale: tmp_path / "none")
    ctx = ReportContext(p, str(REPO / "params.yaml"), tmp_path / "report", papers={})
    assert part.section(ctx) == {"found": False, "folder": str(tmp_path / "none")}


def test_calibration_fits_start_up_and_efficiency_from_different_measurements():
    """Two char trainings whose loops took 10 s and 20 s for 2e11 and 4e11 FLOPs at a 1e11 FLOP/s peak
    (efficiency 0.2) and whose jobs took 4 s more (start-up 4); an evaluation with no loop record,
    6 s of job for 1e11 FLOPs: (6 - 4) s busy, efficiency 0.5."""
    from kernattn.dag import calibrate

    jobs = pd.DataFrame({"stage": ["train", "train", "eval_lm"], "run": ["a-s0", "b-s0", "a-s0"],
                         "key": ["char", "char", "eval_lm"], "flops": [2e11, 4e11, 1e11],
                         "wall_s": [14.0, 24.0, 6.0], "loop_s": [10.0, 20.0, float("nan")]})
    fitted = calibrate.fit(jobs, peak=1e11)
    assert fitted["startup_s"] == 4.0
    assert fitted["efficiency"] == {"char": pytest.approx(0.2), "eval_lm": pytest.approx(0.5)}
    assert calibrate.efficiency_key("eval_lm", "lm") == "eval_lm" and calibrate.efficiency_key("train_lm", "lm") == "lm"
    with pytest.raises(ValueError, match="no planned job has a loop record"):
        calibrate.fit(jobs[jobs["stage"] == "eval_lm"], peak=1e11)


def test_the_cpu_plan_adds_start_up_and_divides_by_each_tracks_efficiency(monkeypatch):
    """resolve_device('cpu') takes gpus.yaml's calibrated block; a job's wall = start-up + FLOPs /
    (peak x its key's efficiency)."""
    from kernattn.bench import peaks
    from kernattn.dag import plan as pl

    monkeypatch.setattr(peaks, "measure_cpu_peak", lambda threads=1: 1e11)
    monkeypatch.setattr(pl, "cpu_defaults", lambda: {"mfu": 0.5, "startup_s": 4.0, "source": "test",
                                                    "efficiency": {"char": 0.2, "eval_lm": 2.0}})
    device = pl.resolve_device("cpu", None)
    assert (device.peak, device.startup_s) == (1e11, 4.0)
    assert device.mfu_for("char", "train") == 0.2 and device.mfu_for("lm", "eval_lm") == 2.0
    assert device.mfu_for("vision", "train_vision") == 0.5  # no stated efficiency: the block's mfu
