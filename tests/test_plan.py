"""`kernattn plan` (kernattn.dag.plan, plan_flops, plan_cli; the units' cost.py, kernattn.work): FLOPs per step against
FlopCounterMode on each track's real model and batch, the DAG arithmetic (GPU-hours, critical
path, schedule) on constructed jobs with hand-computed answers, the GPU kinds' errors, and the
plan's time against a measured CPU training."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from kernattn.bench import peaks
from kernattn.cli import main
from kernattn.config import load_params
from kernattn.dag import plan as pl
from kernattn import work as wk
from kernattn.dag import plan_flops as pf
from kernattn.tracks.char import cost as char_cost
from kernattn.tracks.lm import cost as lm_cost
from kernattn.tracks.vision import cost as vision_cost
from kernattn.stage import Stage

from .paths import DICKENS, REPO

PARAMS = REPO / "params.yaml"


def fake_counts(monkeypatch, counters: dict) -> None:
    """The planned stages with these stages' counters replaced (their runs kept): stage ->
    count(params, spec) -> Work."""
    real = pf.planned_stages()

    def patched(stage, runs):
        if stage not in counters:
            return runs
        return lambda q: {r: dataclasses.replace(run, count=counters[stage]) for r, run in runs(q).items()}
    stages = {stage: patched(stage, runs) for stage, runs in real.items()}
    monkeypatch.setattr(pf, "planned_stages", lambda: stages)


def _counted(step) -> float:
    """FLOPs of `step` on the CPU. SDPA's math backend: FlopCounterMode has no formula for the
    CPU flash kernel (it would count the attention's matmuls as zero)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    return float(counter.get_total_flops())


# ----------------------------------------------------------------------------- FLOPs per step
def test_char_flops_per_step_equal_flopcounter_on_a_real_batch():
    """The rope row: a GPA or lag-table row takes another path on the CPU (a chunked kernel
    skipping the blocks the causal mask removes) than the meta device's dense one, which the
    plan counts (an upper bound of what a GPU's kernel computes)."""
    from kernattn.tracks.char.model import GPT

    p = load_params(PARAMS, "micro")
    run = pf.stage_runs(p, "train")["rope-s0"].spec
    model = GPT(char_cost.vocab_size(p), p.model, run.variant, run.options)
    x = torch.randint(0, char_cost.vocab_size(p), (p.train.batch_size, p.model.context))
    assert char_cost.train_work(p, run).flops_per_step == _counted(lambda: model.loss(x, x).backward())


def test_the_char_plan_reads_the_prepared_vocabulary(tmp_path):
    """Before prepare the plan counts the Dickens symbol set (93); after it, vocab.json's
    characters (here 5), not the number of keys of the file."""
    p = load_params(PARAMS, "micro", {"data": {"out_dir": str(tmp_path / "data")}})
    assert char_cost.vocab_size(p) == char_cost.DICKENS_VOCAB == 93
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "vocab.json").write_text(json.dumps({"chars": list("\nabc "), "size": 5}))
    assert char_cost.vocab_size(p) == 5


def test_lm_flops_per_step_equal_flopcounter_over_the_accumulated_batch():
    from kernattn.tracks.lm.model import GPT
    from kernattn.tracks.lm.track import row_config

    p = load_params(PARAMS, "micro", {"lm.grad_accum": 2})
    lm = p.lm
    run = pf.stage_runs(p, "train_lm")["gka_tokens-s0"].spec
    model = GPT(row_config(lm, lm.vocab_size, run))
    x = torch.randint(0, lm.vocab_size, (lm.batch_size, lm.context))

    def step():
        for _ in range(lm.grad_accum):  # the engine's micro-batches of one step
            F.cross_entropy(model(x).float().reshape(-1, lm.vocab_size), x.reshape(-1)).backward()
    work = lm_cost.train_work(p, run)
    assert work.samples_per_step == lm.batch_size * 2
    assert work.flops_per_step == _counted(step)


def test_the_lm_eval_suite_costs_its_requests_times_one_full_context_forward():
    """kernattn plan --lm-eval-suite: per task, documents x requests per document forward passes
    of the row's model at its full context (counted by FlopCounterMode here), at the plan's
    eval-lm efficiency."""
    from kernattn.tracks.lm.model import GPT
    from kernattn.tracks.lm.track import row_config

    p = load_params(PARAMS, "micro")
    lm = p.lm
    device = pl.Device("h100", 1e15, 0.5, "test", {"eval_lm": 0.25})
    lines = [x for x in lm_cost.suite_costs(p, device) if x["row"] == "base"]
    run = pf.stage_runs(p, "train_lm")["base-s0"].spec
    model = GPT(row_config(lm, lm.vocab_size, run))
    forward = _counted(lambda: model(torch.randint(0, lm.vocab_size, (1, lm.context))))
    assert [x["task"] for x in lines] == list(lm_cost.SUITE)
    hellaswag = lines[1]
    assert hellaswag["requests"] == 10042 * 4 and hellaswag["context"] == lm.context
    assert hellaswag["flops"] == pytest.approx(hellaswag["requests"] * forward, rel=1e-6)
    assert hellaswag["seconds"] == pytest.approx(hellaswag["flops"] / (1e15 * 0.25))
    text = lm_cost.render(lines, device)
    assert "(suite)" in text and "an upper bound" in text


def test_vision_flops_per_step_and_steps_of_a_real_batch():
    from kernattn.tracks.vision import model as vm

    p = load_params(PARAMS, "micro")
    vp = p.vision
    run = pf.stage_runs(p, "train_vision")["gka-s0"].spec
    model = vm.build_vit(vm.spec_from_params(vp, run.variant, 1, 10, run.options))
    x, y = torch.randn(vp.batch_size, 1, vp.img_size, vp.img_size), torch.randint(0, 10, (vp.batch_size,))
    work = vision_cost.train_work(p, run)
    assert work.flops_per_step == _counted(lambda: F.cross_entropy(model(x), y).backward())
    assert work.steps == vp.epochs * (vp.train_subset // vp.batch_size)  # 96 // 32 = 3 steps an epoch


def test_evaluations_follow_the_engine_cadence():
    assert wk.evaluations(6, 3) == 3       # steps 0, 3, 6
    assert wk.evaluations(7, 3) == 4       # 0, 3, 6 and the end
    w = wk.Work(train_per_sample=10.0, eval_per_sample=2.0, samples_per_step=4, steps=5, eval_samples=3)
    assert w.flops_per_step == 40.0 and w.total == 5 * 40 + 3 * 2


# ----------------------------------------------------------------------------- the DAG arithmetic
def _jobs() -> tuple[list[pl.Job], dict[str, float]]:
    """a (2 h) -> c (1 h) -> d (no GPU) <- b (2.5 h); e (2 GPUs, 1 h) alone."""
    jobs = [pl.Job("a", "t", (), 1.0, 1), pl.Job("b", "t", (), 1.0, 1), pl.Job("c", "t", ("a",), 1.0, 1),
            pl.Job("d", "report", ("b", "c")), pl.Job("e", "t", (), 1.0, 2)]
    return jobs, {"a": 2.0, "b": 2.5, "c": 1.0, "e": 1.0}


def test_critical_path_and_schedule_by_hand():
    jobs, wall = _jobs()
    # longest chain: a -> c -> d (3 h) > b -> d (2.5 h) > e (1 h)
    assert pl.critical_path(jobs, wall) == (3.0, ["a", "c", "d"])
    # 4 GPUs: a, b and e start at 0 (1 + 1 + 2 GPUs), c at 2 after a, d when c ends: 3 h
    assert pl.schedule(jobs, wall, 4) == 3.0
    # 2 GPUs, longest remaining path first: a (3) and b (2.5) at 0; e (needs 2) waits; c 2-3;
    # b ends at 2.5 (1 GPU free: not enough for e); e 3-4
    assert pl.schedule(jobs, wall, 2) == 4.0
    # 1 GPU (without e, which make_plan refuses on it: below): a 0-2, b 2-4.5, c 4.5-5.5
    jobs1 = [j for j in jobs if j.id != "e"]
    assert pl.schedule(jobs1, wall, 1) == 5.5


def test_gpu_hours_and_time_limits():
    h100 = peaks.get_kind("h100")
    assert pl.gpu_hours(h100.bf16 * 0.5 * 3600, h100.bf16, 0.5) == pytest.approx(1.0)
    assert pl.slurm_minutes(1.0, safety=2.0, margin=15) == 135
    assert pl.slurm_minutes(0.0101, safety=1.0, margin=0) == 1  # whole minutes, rounded up


def test_job_graph_reads_dependencies_from_inputs_and_outputs():
    table = {s.name: s for s in [
        Stage("prep", (), (), lambda _: ["d.npy"]),
        Stage("fit", (), (), lambda r: [f"{r}/final.json"], inputs=lambda _: ["d.npy"], runs=("x", "y")),
        Stage("score", (), (), lambda r: [f"{r}.json"], inputs=lambda r: ["d.npy", f"{r}/final.json"], runs=("x",)),
        Stage("report", (), (), lambda _: ["index.html"], inputs=lambda _: ["x.json", "y/final.json"]),
    ]}
    graph = pl.job_graph(table)
    assert graph["prep"] == ("prep", None, ())
    assert graph["fit@y"] == ("fit", "y", ("prep",))
    assert graph["score@x"] == ("score", "x", ("prep", "fit@x"))
    assert graph["report"] == ("report", None, ("score@x", "fit@y"))


def test_make_plan_sums_hours_and_refuses_a_run_larger_than_the_cluster(monkeypatch):
    from kernattn.errors import UsageError

    p = load_params(PARAMS, "micro")
    table = {s.name: s for s in [
        Stage("prepare", (), (), lambda _: ["d"]),
        Stage("train", (), (), lambda r: [f"{r}.json"], inputs=lambda _: ["d"], runs=("rope-s0", "gpa_dp_m8-s0"))]}
    fake = {"rope": wk.Work(1.0, 0.0, 1, 3600, 0), "gpa_dp_m8": wk.Work(1.0, 0.0, 1, 7200, 0)}
    fake_counts(monkeypatch, {"train": lambda _p, spec: fake[spec.row]})
    device = pl.Device("test", peak=1.0, mfu=0.5, mfu_source="test")
    plan = pl.make_plan(p, table, device, 2, lambda stage: 2)
    # 3600 FLOPs at 0.5 FLOP/s = 2 GPU-hours (2 GPUs: 1 h wall), 7200 FLOPs = 4 GPU-hours (2 h)
    assert plan.hours == {"train@rope-s0": 2.0, "train@gpa_dp_m8-s0": 4.0} and plan.gpu_hours == 6.0
    assert plan.wall == {"train@rope-s0": 1.0, "train@gpa_dp_m8-s0": 2.0}
    assert plan.critical_h == 2.0 and plan.makespan_h == 3.0  # 2 GPUs: one 2-GPU run at a time
    assert pl.stage_minutes(plan, safety=1.0) == {"train": 2 * 60 + pl.MARGIN_MIN}
    with pytest.raises(UsageError, match="asks for 2 GPUs per run; the cluster has 1"):
        pl.make_plan(p, table, device, 1, lambda stage: 2)


def test_profile_gpus_per_run(tmp_path):
    """A run's GPUs are its world as the training rule launches it: ranks per node x nodes."""
    path = tmp_path / "config.yaml"
    path.write_text("set-resources:\n  train: {gpu: 4}\n  train_lm: {gres: 'gpu:8', ranks: 8, nodes: 2}\n"
                    "  train_vision: {gpu: 2, ranks: 2, nodes: 1}\n")
    gpus_of = pl.profile_gpus(path)
    assert [gpus_of(s) for s in ("train", "train_lm", "train_vision", "eval_lm")] == [4, 16, 2, 1]
    assert pl.profile_gpus(tmp_path / "none.yaml")("train") == 1
    # the parsed form, as install-profile holds the profile it writes (no file)
    assert pl.profile_doc_gpus({"set-resources": {"train_lm": {"ranks": 4, "nodes": 2}}})("train_lm") == 8
    assert pl.profile_doc_gpus(None)("train") == 1


def test_measured_mfu_is_the_median_of_gpu_check_on_that_kind(tmp_path):
    for folder, rows in {"a": [("NVIDIA H100 80GB HBM3", "0.30"), ("NVIDIA H100 80GB HBM3", "0.50")],
                         "b": [("NVIDIA H100 80GB HBM3", "0.40"), ("NVIDIA A100-SXM4-80GB", "0.9")]}.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.csv").write_text("run,mfu,device\n" + "".join(f"r,{m},{d}\n" for d, m in rows))
    mfu, source = pl.measured_mfu("h100", tmp_path)
    assert mfu == pytest.approx(0.40) and "gpu-check" in source
    assert pl.measured_mfu("h200", tmp_path) is None
    device = pl.resolve_device("h100", None, measured_root=tmp_path)
    assert device.mfu == pytest.approx(0.40) and device.peak == peaks.get_kind("h100").bf16
    assert pl.resolve_device("a100", 0.25, measured_root=tmp_path).mfu_for("vision") == 0.25


def test_stated_defaults_apply_per_track_where_nothing_was_measured(tmp_path):
    import yaml

    table = yaml.safe_load(peaks.TABLE.read_text())
    device = pl.resolve_device("h200", None, measured_root=tmp_path)  # an empty results folder
    assert device.mfu_for("lm") == table["kinds"]["h200"]["mfu"]
    assert device.mfu_for("vision") == table["track_mfu"]["vision"]["mfu"] != device.mfu


# ----------------------------------------------------------------------------- the command
def test_bad_gpu_kind_is_one_line_naming_the_known_kinds(capsys):
    assert main(["plan", "--params", str(PARAMS), "--scale", "micro", "--gpu", "h1000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown GPU kind 'h1000'" in err
    assert all(k in err for k in ("h100", "h200", "a100", "cpu"))


def test_plan_command_prints_and_writes_the_micro_plan(tmp_path, capsys):
    import pandas as pd

    out = tmp_path / "plan.csv"
    assert main(["plan", "--params", str(PARAMS), "--scale", "micro", "--gpu", "a100", "--gpus-per-node", "2",
                 "--nodes", "2", "--mfu", "0.5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    frame = pd.read_csv(out)
    p = load_params(PARAMS, "micro")
    runs = {s: len(pf.stage_runs(p, s)) for s in pf.planned_stages()}
    assert frame["stage"].value_counts().to_dict() == runs
    a100 = peaks.get_kind("a100").bf16
    assert frame["gpu_hours"].tolist() == pytest.approx((frame["flops"] / (a100 * 0.5) / 3600).tolist())
    assert "on 4 x a100" in text and "MFU 0.50: --mfu" in text and "critical path" in text


# ----------------------------------------------------------------------------- what is planned
@pytest.mark.parametrize("scale", ["micro", "tiny", "paper"])
def test_every_stage_that_trains_is_planned(scale):
    """A stage that keeps checkpoints across reruns (persist: it trains) has its work counted: a
    unit's new training stage left out of its cost.PLANNED would leave its GPU-hours out of the
    plan and its time limit out of the profile."""
    from kernattn.dag.stages import stage_table

    training = {s.name for s in stage_table(load_params(PARAMS, scale)).values() if s.persist}
    assert training and training <= set(pf.planned_stages()), training - set(pf.planned_stages())


def test_a_cooldown_branch_is_planned_from_its_branch_point():
    """micro: train.budgets [4] at cooldown_fraction 0.2, so a branch starts at 4 - round(0.8) = 3
    and trains 1 step of the row's char model; evaluated at its start and end (2 x eval_batches 2
    x batch 4 = 16 windows). One count per (row, budget) in the plan."""
    p = load_params(PARAMS, "micro")
    branches = pf.stage_runs(p, "cooldown")
    assert set(branches) == {"rope-s0-b4", "gpa_dp_m8-s0-b4"} and {b.budget for b in branches.values()} == {4}
    work = branches["rope-s0-b4"].work(p)
    full = char_cost.train_work(p, pf.stage_runs(p, "train")["rope-s0"].spec)
    assert (work.steps, work.samples_per_step, work.eval_samples) == (1, 4, 16)
    assert work.total == pytest.approx(4 * full.train_per_sample + 16 * full.eval_per_sample)


# ----------------------------------------------------------------------------- the studies' trainings
def test_the_studies_trainings_are_planned_as_their_tracks_runs():
    """train_wrap repeats a char run on another corpus (its work); train_gka_init trains each
    track's GKA row (each run counted as its own track's, the ViT's and LM's included); prune's
    work by hand: 3 arms x steps x batch samples of fwd + bwd, and evaluations of
    eval_batches x batch windows: the 2 x layers x heads ablations + their base (2), and each
    arm's start and end."""
    from kernattn.studies.wrap.stages import wrap_runs

    p = load_params(PARAMS, "micro")
    wrap = pf.stage_runs(p, "train_wrap")
    assert set(wrap) == set(wrap_runs(p)) and {r.track for r in wrap.values()} == {"char"}
    spec = wrap["gpa_dp_m8-rewrapped-s0"].spec
    assert char_cost.train_work(p, spec) == char_cost.train_work(p, pf.stage_runs(p, "train")["gpa_dp_m8-s0"].spec)
    init = pf.stage_runs(p, "train_gka_init")
    assert {r.track for r in init.values()} == {"char", "lm", "vision"}
    assert init["vision_gka-init_1-s0"].work(p).steps == vision_cost.train_work(
        p, init["vision_gka-init_1-s0"].spec).steps
    assert {r.study for r in init.values()} == {"gka_init"} and {r.study for r in wrap.values()} == {"wrap"}

    tp, mp, steps = p.train, p.model, p.studies.prune.steps
    full = char_cost.train_work(p, pf.stage_runs(p, "train")["gpa_dp_m8-s0"].spec)
    work = pf.stage_runs(p, "prune")["gpa_dp_m8-s0"].work(p)
    window = tp.eval_batches * tp.batch_size
    assert work.steps == 3 * steps and work.samples_per_step == tp.batch_size
    assert work.eval_samples == (2 * mp.n_layer * mp.n_head + 2) * window + 3 * 2 * window
    assert work.total == pytest.approx(3 * steps * tp.batch_size * full.train_per_sample
                                       + work.eval_samples * full.eval_per_sample)


def test_the_plan_sums_the_main_dag_and_the_studies_apart(tmp_path, capsys):
    """The summary's main-DAG hours plus each study's are the total; the studies' rows name
    the claim they serve, not a paper table's row."""
    import pandas as pd

    out = tmp_path / "plan.csv"
    assert main(["plan", "--params", str(PARAMS), "--scale", "micro", "--gpu", "a100", "--mfu", "0.5",
                 "--out", str(out)]) == 0
    frame, summary = pd.read_csv(out, keep_default_na=False), json.loads(out.with_suffix(".json").read_text())
    studies = frame[frame["study"] != ""]
    assert set(studies["stage"]) == {"train_wrap", "train_gka_init", "prune"}
    from kernattn.studies.gka_init.cost import CLAIM as INIT
    from kernattn.studies.prune.cost import CLAIM as PRUNE
    from kernattn.studies.wrap.cost import CLAIM as WRAP

    assert set(studies["paper"]) == {WRAP, PRUNE, INIT}
    assert summary["gpu_hours_by_study"] == pytest.approx(studies.groupby("study")["gpu_hours"].sum().to_dict())
    assert summary["gpu_hours_main"] + sum(summary["gpu_hours_by_study"].values()) == pytest.approx(summary["gpu_hours"])
    assert summary["gpu_hours_main"] == pytest.approx(frame[frame["study"] == ""]["gpu_hours"].sum())
    assert "of the studies (snakemake studies)" in capsys.readouterr().out


# ----------------------------------------------------------------------------- against a measured run
def test_plan_predicts_a_measured_cpu_training_within_2x(tmp_path):
    """The tiny scale's char shape (2 x 128, ctx 128, batch 16) for 6 steps on the micro corpus:
    the MFU measured on the rope run (its FLOPs over its time and this CPU's matmul peak)
    predicts the GKA run's time (other attention, other FLOPs) within 2x. Times in this
    process's CPU time (one torch thread: a dedicated core's), as the peak is measured: wall
    time would count whatever else shares the machine."""
    import time

    from kernattn.config import find_run
    from kernattn.tracks.char.corpus import prepare
    from kernattn.tracks.char.track import train

    assert DICKENS.is_file(), f"{DICKENS} is missing: tests read the shared data beside the repository"
    tiny = load_params(PARAMS, "tiny")
    over = {"data": {"mirror": str(DICKENS), "max_chars": 200_000, "out_dir": str(tmp_path / "data")},
            "train": {"out_dir": str(tmp_path / "runs"), "max_steps": 6, "eval_every": 3, "eval_batches": 2},
            "tracking": {"enabled": False}, "matrix": {"only": ["rope", "gka"], "seeds": [0]}}
    p = load_params(PARAMS, "tiny", over)
    assert (p.model, p.train.batch_size) == (tiny.model, tiny.train.batch_size)
    prepare(p.data)
    warm = load_params(PARAMS, "tiny", {**over, "train": {**over["train"], "max_steps": 1, "out_dir": str(tmp_path / "warm")}})
    assert train(warm, find_run(warm, "rope-s0"), progress=False) == 0  # first-call costs (imports, kernels) paid
    peak = peaks.measure_cpu_peak(p.train.threads or 1)
    walls, works = {}, {}
    for row in ("rope", "gka"):
        spec = find_run(p, f"{row}-s0")
        start = time.process_time()
        assert train(p, spec, progress=False) == 0
        walls[row] = time.process_time() - start
        assert json.loads((tmp_path / "runs" / spec.run_id / "final.json").read_text())["steps"] == 6
        works[row] = char_cost.train_work(p, spec).total
    mfu = works["rope"] / (walls["rope"] * peak)
    predicted = pl.gpu_hours(works["gka"], peak, mfu) * 3600
    assert 0 < mfu <= 1.5, mfu  # a share of the matmul peak (the peak is timed on a shared machine)
    assert walls["gka"] / 2 <= predicted <= walls["gka"] * 2, (predicted, walls)


# ----------------------------------------------------------------------------- the profile's time limits
def test_set_runtimes_replaces_and_adds_only_under_set_resources():
    from kernattn.dag.limits import set_runtimes

    text = ("default-resources:\n  runtime: 30\nset-resources:\n  train:\n    gpu: 1\n    runtime: 240   # guessed\n"
            "  # a comment about eval\n  eval_lm:\n    gpu: 1\n  bench:\n    runtime: 120\n")
    got = set_runtimes(text, {"train": 135, "eval_lm": 20})
    import yaml

    doc = yaml.safe_load(got)
    assert doc["default-resources"]["runtime"] == 30 and doc["set-resources"]["bench"]["runtime"] == 120
    assert doc["set-resources"]["train"] == {"gpu": 1, "runtime": 135}
    assert doc["set-resources"]["eval_lm"] == {"gpu": 1, "runtime": 20}
    assert "# guessed" in got and "# a comment about eval" in got


def test_install_profile_sets_the_planned_stages_time_limits(tmp_path, monkeypatch):
    """Fake work (the FLOP counts are tested above): 3.6e15 x 0.4 FLOPs per row, 1 h on an A100
    at MFU 0.4 for the first row, 2 h for the second, ..."""
    import yaml

    from kernattn.dag.stages import stage_table

    a100 = peaks.get_kind("a100").bf16
    counters = {}
    for stage in pf.planned_stages():
        rows = list(dict.fromkeys(r.spec.row for r in pf.stage_runs(load_params(PARAMS, "micro"), stage).values()))
        counters[stage] = lambda _p, spec, rows=rows: wk.Work(1.0, 0.0, 1, int(a100 * 0.4 * 3600 * (rows.index(spec.row) + 1)), 0)
    fake_counts(monkeypatch, counters)
    dest = tmp_path / "slurm"
    assert main(["install-profile", "--partition", "p", "--gpu-model", "a100", "--source", str(REPO / "profiles/slurm"),
                 "--dest", str(dest), "--plan-scale", "micro", "--plan-params", str(PARAMS), "--plan-mfu", "0.4",
                 "--safety", "3"]) == 0
    resources = yaml.safe_load((dest / "config.yaml").read_text())["set-resources"]
    p = load_params(PARAMS, "micro")
    shipped = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())["set-resources"]
    plan = pl.make_plan(p, stage_table(p), pl.resolve_device("a100", 0.4), 8, pl.profile_gpus(REPO / "profiles/slurm/config.yaml"))
    want = pl.stage_minutes(plan, safety=3)
    assert want == {"train": 2 * 180 + pl.MARGIN_MIN, "train_lm": 3 * 180 + pl.MARGIN_MIN,  # 2 and 3 rows: x 3
                    "eval_lm": 3 * 180 + pl.MARGIN_MIN, "train_vision": 3 * 180 + pl.MARGIN_MIN,
                    "cooldown": 2 * 180 + pl.MARGIN_MIN,  # the budget sweep: a branch per row of train
                    # the studies' trainings: one wrap row, one prune row; GKA init: rows gka, gka_tokens
                    "train_wrap": 180 + pl.MARGIN_MIN, "prune": 180 + pl.MARGIN_MIN,
                    "train_gka_init": 2 * 180 + pl.MARGIN_MIN}
    assert {s: resources[s]["runtime"] for s in want} == want
    assert resources["bench"] == {**shipped["bench"], "slurm_partition": "p", "gpu_model": "a100"}  # not planned: kept
    # --overrides applies to the plan's params as to every command's: one char row left, 1 h
    over = tmp_path / "over.yaml"
    over.write_text("scales:\n  micro:\n    matrix:\n      only: [rope]\n")
    assert main(["install-profile", "--partition", "p", "--gpu-model", "a100", "--source", str(REPO / "profiles/slurm"),
                 "--dest", str(tmp_path / "one"), "--plan-scale", "micro", "--plan-params", str(PARAMS),
                 "--plan-mfu", "0.4", "--safety", "3", "--overrides", str(over)]) == 0
    one = yaml.safe_load((tmp_path / "one" / "config.yaml").read_text())["set-resources"]
    assert one["train"]["runtime"] == 180 + pl.MARGIN_MIN and one["train_lm"] == resources["train_lm"]


def test_paper_tables_of_a_row_and_their_hours():
    """A row's tables come from its `paper:` references; a row two tables name counts in both,
    a row of no document under "no paper table" (hand-summed hours)."""
    import pandas as pd

    p = load_params(PARAMS, "paper")
    assert wk.row_tables(p.matrix.rows, "rope") == "gpa-short Figure 2; gpa-long Figure 2"
    assert wk.row_tables(p.vision.rows, "gka") == "gka-paper Table 5"
    assert wk.row_tables(p.lm.rows, "gka_paper") == "gka-paper Table 8"
    assert wk.row_tables(p.matrix.rows, "alibi") == ""
    frame = pd.DataFrame({"paper": ["gpa-short Figure 2; gpa-long Figure 2", "gka-paper Table 5", "",
                                    "gka-paper Table 5"], "gpu_hours": [1.0, 2.0, 4.0, 8.0]})
    assert pl.hours_by_paper_table(frame) == {"gpa-short Figure 2": 1.0, "gpa-long Figure 2": 1.0,
                                              "gka-paper Table 5": 10.0, "no paper table": 4.0}


def test_a_vit_on_imagenet_is_planned_at_its_input_pipeline_when_that_is_slower(tmp_path, monkeypatch):
    """3.6e6 images (36,000 steps of 100) at 3,600 FLOPs: 1 GPU-hour of compute at 1 FLOP/s.
    bench-loader measured 40 and 60 img/s per worker for timm/PIL on JPEGs (median 50; the
    other pipelines are not what the ViT runs): 14 workers per GPU feed 700 img/s, so one GPU
    waits 3.6e6 / 700 s = 1.43 h for its data; two GPUs 0.71 h, against 0.5 h of compute."""
    folder = tmp_path / "results" / "some-machine"
    folder.mkdir(parents=True)
    (folder / "loader-some-machine.csv").write_text(
        "pipeline,source,images_per_s\ntimm-pil,jpeg 64 x ~500x375,40\ntimm-pil,jpeg 64 x ~500x375,60\n"
        "tv2-uint8,jpeg 64 x ~500x375,500\ntv2-uint8,fashion_mnist mirror,2000\n")
    loader = pl.measured_loader(tmp_path / "results")
    assert loader.per_worker == 50.0 and "loader-some-machine.csv" in loader.source
    assert pl.measured_loader(tmp_path / "none") is None

    p = load_params(PARAMS, "paper")
    assert (p.vision.dataset, p.vision.workers) == ("imagenet", 14)
    table = {"train_vision": Stage("train_vision", (), (), lambda r: [f"{r}.json"], runs=("deit-s0",))}
    fake_counts(monkeypatch, {"train_vision": lambda _p, spec: wk.Work(0.001, 0.0, 100, 36_000, 0)})
    device = pl.Device("test", peak=1.0, mfu=1.0, mfu_source="test")
    one = pl.make_plan(p, table, device, 8, lambda stage: 1, loader)
    assert one.wall["train_vision@deit-s0"] == pytest.approx(3.6e6 / 700 / 3600)
    assert one.hours == one.wall and one.bound == {"train_vision@deit-s0": pl.INPUT}
    two = pl.make_plan(p, table, device, 8, lambda stage: 2, loader)
    assert two.wall["train_vision@deit-s0"] == pytest.approx(3.6e6 / 1400 / 3600)
    assert two.hours["train_vision@deit-s0"] == pytest.approx(2 * 3.6e6 / 1400 / 3600)  # both GPUs held
    fast = pl.Loader(200.0, "test")  # 2,800 img/s per GPU: 0.36 h, below the hour of compute
    assert pl.make_plan(p, table, device, 8, lambda stage: 1, fast).wall["train_vision@deit-s0"] == pytest.approx(1.0)
    assert pl.make_plan(p, table, device, 8, lambda stage: 1, None).bound == {"train_vision@deit-s0": pl.COMPUTE}
    summary = pl.summary(one)
    assert summary["input_bound_jobs"] == ["train_vision@deit-s0"] and summary["loader_images_per_s_per_worker"] == 50.0
    assert list(pl.table(one)["bound"]) == [pl.INPUT]
