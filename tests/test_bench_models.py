"""kernattn bench (issue 7): the whole-model harness, its ratios, the stage and the report table.

Timings are never asserted: only that each measurement exists, is positive and is recorded
with its device, dtype and shape; FLOP counts are checked against hand-computed cases."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from kernattn.bench import models as bm
from kernattn.bench.typed_csv import read_rows
from kernattn.config import ParamsError, load_params
from kernattn.bench import report as bench_models
from kernattn.yaml_text import safe_dump, safe_load

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def linear_case(name: str, width: int = 4, baseline: str | None = None) -> bm.Case:
    def batch(b, device):
        return torch.ones(b, 8, device=device), torch.zeros(b, width, device=device)
    return bm.Case(family="vit", model=name, variant=name.split("_")[0], shape="8->4", unit="img",
                   items_per_sample=1, build=lambda: nn.Linear(8, width, bias=False), batch=batch,
                   loss=lambda m, xy: ((m(xy[0]) - xy[1]) ** 2).mean(), forward=lambda m, xy: m(xy[0]),
                   baseline=baseline)


def test_flops_are_counted_not_guessed():
    # y = x W^T for x [1, 8], W [4, 8]: 2*8*4 = 64 FLOPs forward; backward needs only dL/dW
    # (x does not require grad): another 64. The loss's elementwise ops are not matmuls.
    case = linear_case("deit_x")
    assert bm.count_flops(case, "infer", CPU) == 64
    assert bm.count_flops(case, "train", CPU) == 128


def test_measure_family_rows_are_complete():
    cases = [linear_case("deit_x"), linear_case("gka_x", baseline="deit_x")]
    settings = bm.Settings(device=CPU, train_batches=(2, 4), infer_batches=(2,), warmup=1, reps=3)
    rows = bm.measure_family(cases, settings)
    assert [(r["model"], r["mode"], r["batch"]) for r in rows] == [
        ("deit_x", "train", 2), ("gka_x", "train", 2), ("deit_x", "train", 4), ("gka_x", "train", 4),
        ("deit_x", "infer", 2), ("gka_x", "infer", 2)]
    for r in rows:
        assert set(r) == set(bm.SCHEMA)
        assert r["status"] == "ok" and r["reps"] == 3 and r["items_per_s"] > 0 and r["step_ms"] > 0
        assert r["peak_mib"] > 0 and r["params"] == 32 and r["device"] and r["dtype"] == "float32"
        assert math.isnan(r["mfu"])  # no honest peak for a CPU
    train = next(r for r in rows if r["mode"] == "train")
    assert train["flops_per_item"] == 128
    # training holds weights + grads + two AdamW moments: at least 4 x 32 floats
    assert train["peak_mib"] * 2**20 >= 4 * 32 * 4


def _row(model, mode, batch, speed, mem, baseline="", family="vit", device="GPU"):
    return {"family": family, "model": model, "baseline": baseline, "mode": mode, "batch": batch,
            "items_per_s": speed, "peak_mib": mem, "status": "ok", "mfu": float("nan"), "device": device}


def test_ratios_pair_batches_and_best_inference():
    rows = [_row("deit_t", "train", 64, 100.0, 10.0), _row("gka_t", "train", 64, 120.0, 10.0, "deit_t"),
            _row("deit_t", "infer", 32, 500.0, 4.0), _row("deit_t", "infer", 64, 800.0, 6.0),
            _row("gka_t", "infer", 32, 900.0, 3.0, "deit_t"), _row("gka_t", "infer", 64, 700.0, 5.0, "deit_t")]
    got = {(r["mode"], r["metric"]): r for r in bm.compute_ratios(rows, "cuda")}
    assert got[("train", "throughput")]["ratio"] == pytest.approx(1.2)
    assert got[("train", "throughput")]["met"] == "yes"
    assert got[("train", "memory")]["ratio"] == 1.0 and got[("train", "memory")]["met"] == "yes"
    inf = got[("infer", "throughput")]
    assert inf["batch"] == "best (32 vs 64)" and inf["ratio"] == pytest.approx(900 / 800)
    assert got[("infer", "memory")]["ratio"] == pytest.approx(3 / 6)
    on_cpu = bm.compute_ratios(rows, "cpu")
    assert {r["met"] for r in on_cpu} == {""}  # CPU rows are shown, not judged


def test_mfu_target_and_peak_table():
    assert bm.peak_for_name("NVIDIA H100 PCIe", torch.bfloat16) == 756e12
    assert bm.peak_for_name("NVIDIA H100 80GB HBM3", torch.bfloat16) == 989.4e12
    assert bm.peak_for_name("NVIDIA H100 80GB HBM3", torch.float32) is None
    assert bm.peak_for_name("Some CPU", torch.bfloat16) is None
    row = {**_row("char-rope", "train", 256, 1.0, 1.0, family="char_gpt"), "mfu": 0.31}
    (mfu,) = [r for r in bm.compute_ratios([row], "cuda") if r["metric"] == "mfu"]
    assert mfu["met"] == "yes" and mfu["target"] == ">=0.3"


@pytest.mark.e2e
def test_bench_stage_on_micro(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", "bench", "--scale", "micro", "--out-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(out / "models.csv", bm.SCHEMA)
    params = load_params(REPO / "params.yaml", "micro")
    assert {r["model"] for r in rows} == {f"char-{r}" for r in params.bench.char_rows}
    assert all(r["status"] == "ok" and r["items_per_s"] > 0 and r["torch"] == torch.__version__ for r in rows)
    ratios = read_rows(out / "models_ratios.csv", bm.RATIO_SCHEMA)
    assert {r["metric"] for r in ratios} == {"throughput", "memory"}


@pytest.mark.parametrize("override, key", [({"families": ["vit", "rnn"]}, "bench.families"),
                                           ({"char_rows": ["rope", "nope"]}, "bench.char_rows"),
                                           ({"size": "huge"}, "bench.size")])
def test_bad_bench_params(tmp_path, override, key):
    import yaml
    doc = safe_load((REPO / "params.yaml").read_text())
    doc["bench"].update(override)
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc))
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(path, "paper")


def _vit_rows(models, shape: str) -> list[dict]:
    rows = []
    for model, f in models:
        rows += [{"family": "vit", "model": model, "mode": "train", "batch": 64, "items_per_s": 100 * f,
                  "peak_mib": 10 * f, "status": "ok", "shape": shape},
                 {"family": "vit", "model": model, "mode": "infer", "batch": 128, "items_per_s": 1000 * f,
                  "peak_mib": 5.0, "status": "ok", "shape": shape}]
    return rows


def test_table4_layout_and_paper_deltas():
    rows = _vit_rows((("deit_tiny", 1.0), ("gka_tiny", 1.1)), "224px/16 d192 12x3")
    table = bench_models.vit_table(pd.DataFrame(rows), bench_models.paper_table4())
    assert list(table["model"]) == ["deit_tiny", "gka_tiny", "Δ gka vs deit", "Δ gka vs deit (paper)"]
    ours = table.iloc[2]
    assert ours["train b64 img/s"] == "+10%" and ours["infer img/s (batch)"] == "+10%" and ours["infer MiB"] == "+0%"
    paper = table.iloc[3]
    assert paper["train b64 img/s"] == "-38%" and paper["train b64 MiB"] == "+100%"  # Table 4, Ti


@pytest.mark.e2e
def test_vit_cases_paper_counts_and_small_stage(tmp_path):
    """The bench measures the models the vision track defines: at paper size DeiT/GKA/VLT-Ti/S/B
    with the paper's parameter totals; at small size the scale's own ViT runs through the stage."""
    from kernattn.bench import cases
    params = load_params(REPO / "params.yaml", "micro")
    paper = {c.model: c for c in cases.vit_cases(params, "paper")}
    assert set(paper) == {f"{v}_{s}" for v in ("deit", "gka", "vlt") for s in ("tiny", "small", "base")}
    assert paper["gka_small"].baseline == "deit_small" and paper["deit_small"].baseline is None
    with torch.device("meta"):
        total = sum(p.numel() for p in paper["gka_tiny"].build().parameters())
    assert total == 4_383_436  # gka-paper Table 2: 4.38M
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", "bench", "--scale", "micro", "--family", "vit",
                           "--out-dir", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(out / "models.csv", bm.SCHEMA)
    assert {r["model"] for r in rows} == {"deit_cpu", "gka_cpu", "vlt_cpu"}
    assert {r["mode"] for r in rows} == {"train", "infer"} and all(r["status"] == "ok" for r in rows)


def test_table4_leads_with_the_paper_shape_and_vit_paper_cases():
    """The small CPU shapes measured first still follow the 224 px rows; bench.paper_vit_sizes
    picks the paper's sizes (Ti only on the tiny scale) and names a wrong one with its key."""
    from kernattn.bench import cases

    small = _vit_rows((("deit_cpu", 1.0), ("gka_cpu", 0.9)), "28px/4 d48 3x3")
    paper = _vit_rows((("deit_tiny", 1.0), ("gka_tiny", 1.1)), "224px/16 d192 12x3")
    table = bench_models.vit_table(pd.DataFrame(small + paper), bench_models.paper_table4())
    assert list(table["model"])[:4] == ["deit_tiny", "gka_tiny", "Δ gka vs deit", "Δ gka vs deit (paper)"]
    assert list(table["shape"])[4:] == ["28px/4 d48 3x3"] * 3
    params = load_params(REPO / "params.yaml", "tiny")
    assert params.bench.families[0] == "vit_paper"
    got = cases.paper_vit_cases(params, params.bench.paper_vit_sizes)
    assert [c.model for c in got] == ["deit_tiny", "vlt_tiny", "gka_tiny"]  # DeiT first (the baseline)
    assert all(c.shape.startswith(bench_models.PAPER_SHAPE) for c in got)
    with pytest.raises(ParamsError, match=r"bench\.paper_vit_sizes names unknown size\(s\) 'XL'; sizes: Ti, S, B"):
        cases.paper_vit_cases(params, ("Ti", "XL"))


def test_vit_rows_choose_the_vits_measured_against_deit():
    """bench.vit_rows (issue 50): the controls' ViTs at the paper shape, each with its row's
    options and DeiT as every ratio's baseline; a list that does not start at DeiT is refused."""
    from kernattn.bench.cases import vit_cases

    p = load_params(REPO / "params.yaml", "paper", {"bench": {"vit_rows": ["deit", "rbf", "sigmoid"]}})
    cases = vit_cases(p, "paper", ("Ti",))
    assert [c.model for c in cases] == ["deit_tiny", "rbf_tiny", "sigmoid_tiny"]
    assert [c.baseline for c in cases] == [None, "deit_tiny", "deit_tiny"]
    rbf = cases[1].build()
    assert rbf.blocks[0].attn.inner.options.init_sigma == "sqrt_d"   # the row's option reached the model
    assert [c.model for c in vit_cases(load_params(REPO / "params.yaml", "paper"), "paper", ("Ti",))] == [
        "deit_tiny", "vlt_tiny", "gka_tiny"]   # default: Table 5's three
    bad = load_params(REPO / "params.yaml", "paper", {"bench": {"vit_rows": ["rbf", "deit"]}})
    with pytest.raises(ParamsError, match="bench.vit_rows must name rows of vision.rows, DeiT's first"):
        vit_cases(bad, "paper", ("Ti",))
