"""The attention benchmark stage: CSV schema, ratios, CLI behaviour. Never timings."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import torch

from kernattn import hardware
from kernattn.bench import attention as bench
from kernattn.bench import attention_measure as measure_mod
from kernattn.bench import attention_configs as configs
from kernattn.bench import attention_ratios as ratios_mod
from kernattn.bench import timing, typed_csv
from kernattn.cli import main

# The documented schema, spelled out so that a change to it is a deliberate test change.
COLUMNS = [
    "variant", "options", "label", "impl", "causal", "window", "B", "H", "d_head", "N", "dtype",
    "device", "torch_version", "threads", "repeats", "median_ms", "min_ms", "tokens_per_s",
    "peak_mib", "timestamp",
]
RATIO_COLUMNS = [
    "comparison", "label", "impl", "baseline_label", "baseline_impl", "N", "metric", "value",
    "target", "meets_target", "device", "dtype", "timestamp",
]
QUICK = ["bench-attention", "--quick", "--threads", "1"]


def _header(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {lines}"
    return lines[0]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One in-process run shared by the schema tests: 2 configurations x 2 impls x N in (16, 32)."""
    out_dir = tmp_path_factory.mktemp("bench")
    out = out_dir / "attention.csv"
    rc = main([*QUICK, "--seq-lens", "16", "32", "--variants", "gka,softmax-rope", "--out", str(out)])
    return rc, out


def test_in_process_run_writes_documented_schema(quick_run):
    rc, out = quick_run
    assert rc == 0
    assert list(measure_mod.SCHEMA) == COLUMNS
    assert _header(out) == COLUMNS
    rows = bench.read_rows(out)  # typed by the schema; raises on a malformed value
    assert len(rows) == 2 * 2 * 2
    assert {(r["label"], r["impl"], r["N"]) for r in rows} == {
        (label, impl, n) for label in ("gka", "softmax-rope") for impl in ("fast", "reference") for n in (16, 32)
    }
    for r in rows:
        assert r["variant"] == {"gka": "gka", "softmax-rope": "softmax"}[r["label"]]
        assert isinstance(json.loads(r["options"]), dict)
        assert r["causal"] is True and r["window"] is None
        assert (r["B"], r["H"], r["d_head"], r["dtype"]) == (2, 4, 32, "float32")
        assert r["torch_version"] == torch.__version__
        assert r["device"] == timing.device_name(torch.device("cpu"))
        assert r["threads"] == 1 and r["repeats"] == 2
        assert 0 < r["min_ms"] <= r["median_ms"] < 60_000
        assert r["tokens_per_s"] == pytest.approx(r["B"] * r["N"] / (r["median_ms"] / 1e3), rel=1e-9)
        assert 0 <= r["peak_mib"] < 1024
        datetime.fromisoformat(r["timestamp"])
    assert json.loads(next(r for r in rows if r["label"] == "softmax-rope")["options"]) == {"position": "rope"}


def test_ratios_file_and_no_temp_files(quick_run):
    rc, out = quick_run
    ratios = bench.ratios_path(out)
    assert ratios == out.with_name("attention_ratios.csv")
    assert _header(ratios) == RATIO_COLUMNS
    rows = bench.read_rows(ratios, ratios_mod.RATIO_SCHEMA)
    comparisons = {(r["comparison"], r["metric"]) for r in rows}
    assert ("gka_fast_vs_reference", "reference_over_fast_time") in comparisons
    assert ("gka_fast_vs_reference", "reference_over_fast_memory") in comparisons
    assert ("gka_vs_rope", "throughput_over_baseline") in comparisons
    gka = [r for r in rows if r["comparison"] == "gka_fast_vs_reference"]
    assert {r["N"] for r in gka} == {32}  # the largest N having both impls
    for r in rows:
        assert r["value"] > 0 and r["meets_target"] in ("yes", "no", "")
    # Written through a temporary file and os.replace: nothing else is left in the folder.
    assert sorted(p.name for p in out.parent.iterdir()) == ["attention.csv", "attention_ratios.csv"]


def test_threads_setting_is_restored(tmp_path):
    before = torch.get_num_threads()
    out = tmp_path / "a.csv"
    args = ["bench-attention", "--quick", "--seq-lens", "8", "--variants", "nw-linear", "--impls", "fast",
            "--threads", str(before + 1), "--out", str(out)]
    assert main(args) == 0
    assert [r["threads"] for r in bench.read_rows(out)] == [before + 1]
    assert torch.get_num_threads() == before


@pytest.mark.e2e
def test_subprocess_module_entry_point(tmp_path):
    out = tmp_path / "sub" / "a.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "kernattn.cli", *QUICK, "--seq-lens", "16", "--variants", "softmax-alibi",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = bench.read_rows(out)
    assert {(r["label"], r["impl"]) for r in rows} == {("softmax-alibi", "fast"), ("softmax-alibi", "reference")}
    assert "softmax-alibi" in proc.stdout  # the table
    assert "USDT" not in proc.stderr  # kineto's start/stop chatter is silenced
    assert out.with_name("a_ratios.csv").exists()


@pytest.mark.e2e
def test_bad_variant_subprocess_one_line(tmp_path):
    out = tmp_path / "a.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "kernattn.cli", "bench-attention", "--variants", "gka,nope", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    line = _one_line(proc.stderr)
    assert "'nope'" in line and all(label in line for label in configs.labels())
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_bad_variant_in_process(tmp_path, capsys):
    out = tmp_path / "a.csv"
    assert main(["bench-attention", "--variants", "nope", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("kernattn bench-attention: error: unknown variant label(s) 'nope'; valid labels: ")
    assert "gpa-add-dp-M64" in line
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["--seq-lens", "16", "abc"],
    ["--seq-lens", "0"],
    ["--dtype", "int8"],
    ["--repeats", "0"],
    ["--impls", "slow"],
    ["--device", "tpu"],
    ["--warmup", "-1"],
    ["--no-such-option"],
])
def test_bad_arguments_one_line(args, tmp_path, capsys):
    out = tmp_path / "a.csv"
    assert main(["bench-attention", *args, "--out", str(out)]) == 2
    assert _one_line(capsys.readouterr().err).startswith("kernattn bench-attention: error: ")
    assert not out.exists()


def test_no_stage_is_an_error(capsys):
    assert main([]) == 2
    assert _one_line(capsys.readouterr().err).startswith("kernattn: error: ")


def test_list_prints_every_label(capsys):
    assert main(["bench-attention", "--list"]) == 0
    printed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == configs.labels()


def test_default_variant_list():
    assert configs.labels() == [
        "softmax-none", "softmax-rope", "softmax-learned_rope", "softmax-alibi", "softmax-t5",
        "softmax-lag_table", "valueless", "gpa-add-dp-M64", "gpa-add-dp-rope-M64", "gpa-mult-dp-M8",
        "gpa-mult-decay-M8", "gka", "gka-lm", "nw-gaussian", "nw-yat", "nw-linear", "favor-m256",
        "softmax-kerple_log", "softmax-kerple_power", "fire", "sigmoid", "differential", "rbf", "fox", "cope",
    ]
    # Every configuration builds (no timing), with the run's largest N for lag_table.
    from kernattn import attention

    for cfg in configs.DEFAULT_CONFIGS:
        assert cfg.causal
        attention.build(cfg.variant, d_model=16, n_head=2, causal=cfg.causal, **cfg.build_options(4096))
    lag = next(c for c in configs.DEFAULT_CONFIGS if c.label == "softmax-lag_table")
    assert lag.build_options(4096)["max_len"] == 4096


def test_reference_plan():
    settings = measure_mod.BenchSettings(configs=list(configs.DEFAULT_CONFIGS), seq_lens=[256, 1024, 2048])
    jobs = measure_mod.plan(settings)
    ref = {(c.label, n) for c, impl, n in jobs if impl == "reference"}
    fast = {(c.label, n) for c, impl, n in jobs if impl == "fast"}
    assert fast == {(label, n) for label in configs.labels() for n in (256, 1024, 2048)}
    assert {label for label, n in ref if n == 2048} == {"gka", "softmax-rope", "gpa-mult-decay-M8"}
    assert {n for label, n in ref if label == "gpa-add-dp-M64"} == {256}
    assert {n for label, n in ref if label == "nw-yat"} == {256, 1024}
    capped = measure_mod.plan(measure_mod.BenchSettings(configs=list(configs.DEFAULT_CONFIGS),
                                                        seq_lens=[256, 1024, 2048], max_reference_n=256))
    assert {n for c, impl, n in capped if impl == "reference"} == {256}
    full = measure_mod.plan(measure_mod.BenchSettings(configs=list(configs.DEFAULT_CONFIGS),
                                                      seq_lens=[256, 1024, 2048], full_reference=True))
    assert len([j for j in full if j[1] == "reference"]) == 3 * len(configs.DEFAULT_CONFIGS)


def _row(label, impl, n, ms, mib):
    return {"label": label, "impl": impl, "N": n, "median_ms": ms, "peak_mib": mib,
            "tokens_per_s": 2 * n / (ms / 1e3), "device": "cpu-model", "dtype": "float32"}


def test_compute_ratios_from_rows():
    rows = [
        _row("gka", "fast", 256, 2.0, 1.0), _row("gka", "reference", 256, 10.0, 30.0),
        _row("gka", "fast", 1024, 10.0, 2.0), _row("gka", "reference", 1024, 50.0, 30.0),
        _row("gka", "fast", 2048, 20.0, 4.0),  # no reference at 2048: the ratio uses 1024
        _row("softmax-rope", "fast", 1024, 8.0, 1.0),
        _row("softmax-alibi", "fast", 1024, 12.0, 1.0),
        _row("gpa-add-dp-M64", "fast", 1024, 9.6, 5.0),
        _row("nw-yat", "fast", 1024, 100.0, 1.0),  # not a lag-bias configuration
    ]
    out = {(r["comparison"], r["label"], r["N"], r["metric"]): r for r in ratios_mod.compute_ratios(rows)}
    t = out[("gka_fast_vs_reference", "gka", 1024, "reference_over_fast_time")]
    assert (t["value"], t["target"], t["meets_target"]) == (5.0, ">=10", "no")
    m = out[("gka_fast_vs_reference", "gka", 1024, "reference_over_fast_memory")]
    assert (m["value"], m["meets_target"]) == (15.0, "no")
    a = out[("lag_bias_vs_rope", "softmax-alibi", 1024, "time_over_baseline")]
    assert (a["value"], a["target"], a["meets_target"]) == (1.5, "<=1.3", "no")
    g = out[("lag_bias_vs_rope", "gpa-add-dp-M64", 1024, "time_over_baseline")]
    assert g["value"] == pytest.approx(1.2) and g["meets_target"] == "yes"
    assert not any(k[1] == "nw-yat" for k in out)
    th = out[("gka_vs_rope", "gka", 1024, "throughput_over_baseline")]
    assert th["value"] == pytest.approx(0.8) and th["target"] == ""  # the >= 1.0 target is for CUDA
    assert out[("gka_vs_rope", "gka", 1024, "memory_over_baseline")]["value"] == 2.0
    cuda = ratios_mod.compute_ratios(rows, device_type="cuda")
    th = next(r for r in cuda if r["metric"] == "throughput_over_baseline")
    assert (th["target"], th["meets_target"]) == (">=1.0", "no")
    assert ratios_mod.compute_ratios([]) == []


def test_a_cpu_device_label_says_what_its_kernels_run_at():
    """Every bench CSV's `device`: the CPU model, then ATen's level and bf16 where native."""
    native = " bf16" if hardware.cpu_has_native_bf16() else ""
    assert timing.device_name(torch.device("cpu")) == f"{timing.cpu_model()} [{hardware.cpu_capability()}{native}]"


def test_cpu_peak_bytes_of_a_known_allocation_pattern():
    mib = 2**20
    held = torch.empty(8 * mib, dtype=torch.uint8)

    def pattern():
        nonlocal held
        a = torch.empty(10 * mib, dtype=torch.uint8)
        b = torch.empty(5 * mib, dtype=torch.uint8)
        del a
        c = torch.empty(20 * mib, dtype=torch.uint8)  # peak: b + c = 25 MiB above the start
        del b, c
        held = None  # freeing what was held before does not lower the peak below 0

    assert timing.cpu_peak_bytes(pattern) == 25 * mib
    assert timing.cpu_peak_bytes(lambda: None) == 0


def test_peak_of_a_reference_step_exceeds_its_kernel_matrix():
    # gka reference at N=128 keeps a [B, H, N, N] float32 kernel for backward: >= 0.5 MiB.
    m = measure_mod.measure(next(c for c in configs.DEFAULT_CONFIGS if c.label == "gka"), "reference", n=128,
                            batch=2, heads=4, d_head=8, dtype=torch.float32, device=torch.device("cpu"),
                            warmup=0, repeats=1, max_n=128)
    assert m.peak_bytes >= 2 * 4 * 128 * 128 * 4
    assert len(m.times_ms) == 1 and m.times_ms[0] > 0


def test_atomic_write_leaves_no_partial_file(tmp_path):
    out = tmp_path / "a.csv"
    out.write_text("previous\n")
    schema = {"x": int, "y": float}
    with pytest.raises(KeyError):
        typed_csv.write_csv_atomic(out, schema, [{"x": 1, "y": 2.0}, {"x": 2}])  # second row lacks y
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]
    typed_csv.write_csv_atomic(out, schema, [{"x": 1, "y": 2.5}, {"x": None, "y": math.inf}])
    assert bench.read_rows(out, schema) == [{"x": 1, "y": 2.5}, {"x": None, "y": math.inf}]


def test_failing_rows_are_skipped_listed_and_flagged(tmp_path, monkeypatch, capsys):
    real = measure_mod.prepare

    def prepare(cfg, impl, **kw):  # inject the failure torch gives for cdist in half precision
        if impl == "reference":
            raise NotImplementedError('"cdist" not implemented for \'Half\'\nsecond line')
        return real(cfg, impl, **kw)

    monkeypatch.setattr(measure_mod, "prepare", prepare)
    out = tmp_path / "a.csv"
    assert main([*QUICK, "--seq-lens", "8", "--variants", "gka", "--out", str(out)]) == 1
    assert [(r["label"], r["impl"]) for r in bench.read_rows(out)] == [("gka", "fast")]
    err = capsys.readouterr().err
    assert "1 of 2 rows failed" in err and "gka reference N=8: NotImplementedError" in err
    assert "second line" not in err
