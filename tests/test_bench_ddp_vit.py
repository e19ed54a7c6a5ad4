"""ViT training throughput under DDP (bench/ddp_vit.py, gpu-check's vit_ddp part, the report's
reader bench/report_ddp.py): the part run on a CPU as 2 gloo ranks (the code a GPU node runs with
NCCL, bf16 and the paper's per-GPU batches), the totals on constructed step times, each rank's
share of the global batch, and the report's table on a constructed CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernattn.bench.ddp_vit import SCHEMA, combine, rank_inputs
from kernattn.bench.typed_csv import read_rows, write_csv_atomic
from kernattn.cli import main
from kernattn.engine.dist import World
from kernattn.bench.report_ddp import ddp_table, device_table

ROOT = Path(__file__).resolve().parents[1]


def _rank_row(rank: int, times: list[float], digest: str, model: str = "deit_tiny", baseline: str = "") -> dict:
    return {"model": model, "baseline": baseline, "variant": model.split("_")[0], "shape": "224px/16 d192 12x3",
            "batch": 4, "global_batch": 8, "ranks": 2, "rank": rank, "backend": "gloo", "times_ms": times,
            "peak_mib": 10.0 + rank, "params": 5, "digest": digest, "status": "ok", "device": "cpu",
            "dtype": "float32", "torch": torch.__version__, "compile": False, "timestamp": "t"}


def test_the_total_is_the_global_batch_over_the_slowest_ranks_median_step():
    rows = combine([_rank_row(0, [10.0, 20.0, 30.0], "a"), _rank_row(1, [12.0, 18.0, 40.0], "a")])
    # slowest per step: 12, 20, 40 ms -> median 20 ms; 8 images / 0.020 s = 400 img/s
    assert [r["step_ms"] for r in rows] == [20.0, 20.0]
    assert [r["items_per_s_total"] for r in rows] == pytest.approx([400.0, 400.0])
    # each rank's own median: 20 ms and 18 ms for its 4 images
    assert [r["items_per_s"] for r in rows] == pytest.approx([200.0, 4 / 0.018])
    assert all(r["in_sync"] for r in rows) and set(rows[0]) == set(SCHEMA)


def test_ranks_with_other_weights_or_a_missing_rank_are_not_in_sync():
    assert not any(r["in_sync"] for r in combine([_rank_row(0, [1.0], "a"), _rank_row(1, [1.0], "b")]))
    assert not combine([_rank_row(0, [1.0], "a")])[0]["in_sync"]  # rank 1 of 2 gave no row


def test_each_rank_trains_a_disjoint_share_of_the_global_batch():
    from kernattn.bench.cases import vit_cases
    from kernattn.config import load_params

    case = vit_cases(load_params(ROOT / "params.yaml", "micro"), "small")[0]
    whole, _ = case.batch(6, torch.device("cpu"))
    shares = [rank_inputs(case, 3, World(r, 2, r), torch.device("cpu"))[0] for r in (0, 1)]
    assert [s.shape[0] for s in shares] == [3, 3]
    assert torch.equal(torch.cat(shares).sort(dim=0).values, whole.sort(dim=0).values)
    assert not torch.equal(shares[0], shares[1])


@pytest.mark.e2e
def test_the_vit_ddp_part_trains_on_two_gloo_ranks_that_stay_in_sync(tmp_path):
    # a compiled backward in this process first, as `gpu-check --part all` trains before this
    # part: ranks forked from this process could not train after it (autograd's threads)
    torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.ones(1, 2)).sum().backward()
    out = tmp_path / "out"
    assert main(["gpu-check", "--part", "vit_ddp", "--out-dir", str(out), "--params", str(ROOT / "params.yaml")]) == 0
    rows = read_rows(out / "vit_ddp.csv", SCHEMA)
    assert sorted((r["model"], r["rank"]) for r in rows) == sorted((m, k) for m in ("deit_cpu", "gka_cpu", "vlt_cpu")
                                                                   for k in (0, 1))
    for r in rows:
        assert (r["ranks"], r["backend"], r["batch"], r["global_batch"], r["in_sync"]) == (2, "gloo", 2, 4, True)
        assert r["items_per_s"] > 0 and r["items_per_s_total"] > 0 and r["peak_mib"] > 0 and r["reps"] == 2
    assert "| deit_cpu |" in (out / "vit_ddp.md").read_text()


def test_a_rank_that_fails_fails_the_part_in_one_line(tmp_path, monkeypatch):
    """Rank 1 raises before its first measurement (the test hook; the ranks get this process's
    environment at their start): the other rank is ended, the part fails with the rank's error, and no
    row is written."""
    from kernattn.bench import ddp_vit

    monkeypatch.setenv(ddp_vit.FAIL_ENV, "1")
    out = tmp_path / "out"
    assert main(["gpu-check", "--part", "vit_ddp", "--out-dir", str(out), "--params", str(ROOT / "params.yaml")]) == 1
    assert read_rows(out / "vit_ddp.csv", SCHEMA) == []
    assert "rank 1 failed: RuntimeError: rank 1 failed on purpose (KERNATTN_DEBUG_FAIL_RANK)" in (out / "vit_ddp.md").read_text()


def test_the_report_table_sums_ranks_and_sets_each_model_beside_deit_and_the_paper(tmp_path):
    rows = [{**r, "device": "gpu-x"} for r in combine([
        _rank_row(0, [20.0], "a"), _rank_row(1, [20.0], "a"),                             # 400 img/s in all
        _rank_row(0, [40.0], "b", "gka_tiny", "deit_tiny"), _rank_row(1, [25.0], "b", "gka_tiny", "deit_tiny")])]
    for r in rows:
        r["batch"] = 64  # the paper's per-GPU batch, for its column
    write_csv_atomic(tmp_path / "gpu-x" / "vit_ddp.csv", SCHEMA, rows)
    paper = {"vit": {"tiny": {"deit": {"train64": 700.0}, "gka": {"train64": 350.0}}}}
    table = ddp_table(tmp_path, paper).set_index("model")
    assert table.loc["deit_tiny", "img/s total"] == pytest.approx(8 / 0.020)
    assert table.loc["deit_tiny", "img/s per GPU"] == pytest.approx(4 / 0.020)
    assert table.loc["gka_tiny", "img/s total"] == pytest.approx(8 / 0.040)  # the slower rank sets the pace
    assert table.loc["gka_tiny", "vs deit"] == "0.50x" and table.loc["gka_tiny", "paper vs deit"] == "0.50x"
    assert table.loc["gka_tiny", "peak MiB (max rank)"] == 11.0
    assert table.loc["deit_tiny", "paper img/s total (7 GPUs)"] == 700.0
    assert ddp_table(tmp_path / "none", paper) is None and device_table(tmp_path / "none", paper) is None
    assert device_table(tmp_path / "gpu-x", paper).equals(ddp_table(tmp_path, paper))


def test_the_report_shows_a_devices_ddp_table_beside_its_models_table(tmp_path, monkeypatch):
    """bench_models' per-device entry gains the DDP table (and its CSV) when the device's folder
    has a vit_ddp.csv beside its models.csv; a folder without one shows none."""
    from types import SimpleNamespace

    from kernattn.bench.models import SCHEMA as MODELS_SCHEMA
    from kernattn.bench import report as bench_models

    gpu = tmp_path / "gpu"
    for device in ("gpu-x", "gpu-y"):
        write_csv_atomic(gpu / device / bench_models.CSV_NAME, MODELS_SCHEMA, [])
    rows = [{**r, "device": "gpu-x", "batch": 64} for r in combine([_rank_row(0, [20.0], "a"), _rank_row(1, [20.0], "a")])]
    write_csv_atomic(gpu / "gpu-x" / "vit_ddp.csv", SCHEMA, rows)
    monkeypatch.setattr(bench_models, "GPU_DIR", gpu)
    (tmp_path / "report" / "tables").mkdir(parents=True)
    params = SimpleNamespace(scale="micro", bench=SimpleNamespace(out_dir=str(tmp_path / "none")))
    entries = {e["label"]: e for e in bench_models._models(tmp_path / "report", params)["entries"]}
    assert set(entries) == {"GPU: gpu-x", "GPU: gpu-y"}
    titles = [t["title"] for t in entries["GPU: gpu-x"]["tables"]]
    assert any("under DDP" in t for t in titles) and not entries["GPU: gpu-y"]["tables"]
    assert "deit_tiny" in (tmp_path / "report" / "tables" / "bench-models-gpu-x-vit-ddp.csv").read_text()
