"""`kernattn gpu-check` at tiny shapes on CPU, so that the command a GPU node runs cannot rot:
each part's files and schema, the report reading its models.csv, refusal to replace a kept
result, a broken fast path failing the tests part, the FLOP count on a known case, and the
train part (kill and resume through `kernattn train`) with MLflow, Snakemake, DVC, rustbpe
and tiktoken made unimportable, as on a bare GPU node installed with --no-deps."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from kernattn.bench.models import SCHEMA as MODELS_SCHEMA
from kernattn.cli import main
from kernattn.gpu_check import checks, kernels
from kernattn.gpu_check.common import Context
from kernattn.bench.report import lm_table
from tests import paths

ROOT = Path(__file__).resolve().parents[1]
DICKENS = paths.DICKENS
BLOCKED = ("mlflow", "snakemake", "dvc", "rustbpe", "tiktoken")


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """tests, kernels and models (char GPT and LM) in one tiny run; (exit status, folder)."""
    out = tmp_path_factory.mktemp("gpu-check")
    code = main(["gpu-check", "--part", "tests", "--out-dir", str(out), "--params", str(ROOT / "params.yaml")])
    for part, extra in (("kernels", []), ("models", ["--family", "char_gpt", "--family", "lm"])):
        code |= main(["gpu-check", "--part", part, "--out-dir", str(out), "--params", str(ROOT / "params.yaml"), *extra])
    return code, out


@pytest.mark.e2e
def test_tests_part_passes_and_writes_its_table(tiny_run):
    code, out = tiny_run
    assert code == 0
    rows = _rows(out / "tests.csv")
    assert list(rows[0]) == list(checks.SCHEMA)
    assert {r["check"] for r in rows} >= {"lag-table", "lm-window", "module gpa-add-M64-rope", "module gka"}
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    assert {r["status"] for r in rows} <= {"pass", "info", "known-limit"}  # known-limit: GKA at sigma = 1 (gka_sigma)
    assert any(r["tensor"] == "grad_table" for r in rows)  # the lag table's gradient is compared
    summary = (out / "summary.md").read_text()
    assert "## tests (passed)" in summary and "## kernels (passed)" in summary and "## models (passed)" in summary


def test_kernels_part_measures_every_variant_and_shape(tiny_run):
    _, out = tiny_run
    rows = _rows(out / "kernels.csv")
    assert list(rows[0]) == list(kernels.SCHEMA)
    want = {(v, str(n), c, m) for v in kernels.VARIANTS for n in kernels.TINY.lengths
            for c in ("true", "false") for m in kernels.MODES}
    assert {(r["variant"], r["n"], r["causal"], r["mode"]) for r in rows} == want
    assert all(r["status"] == "ok" and float(r["tflops"]) > 0 and float(r["frac_matmul"]) > 0 for r in rows)


def test_models_part_writes_what_the_report_reads(tiny_run):
    _, out = tiny_run
    df = pd.read_csv(out / "models.csv")
    assert list(df.columns) == list(MODELS_SCHEMA)
    assert set(df["family"]) == {"char_gpt", "lm"} and (df["status"] == "ok").all()
    table = lm_table(df)
    assert set(table["model"]) == set(df["model"])
    ratios = pd.read_csv(out / "models_ratios.csv", keep_default_na=False)
    assert (ratios["met"] == "").all()  # targets are judged on a GPU only


def test_a_kept_result_is_not_replaced_without_force(tiny_run, capsys):
    _, out = tiny_run
    before = (out / "kernels.csv").read_bytes()
    assert main(["gpu-check", "--part", "kernels", "--out-dir", str(out)]) == 2
    assert "kernels.csv already exists" in capsys.readouterr().err
    assert (out / "kernels.csv").read_bytes() == before


def test_a_broken_fast_path_fails_the_tests_part(monkeypatch, tmp_path):
    """A fast path that is off by 1% of its output's size must fail (so the check can fail)."""
    def off_by_a_little(*args, **kwargs):
        out = checks.attend.__wrapped__(*args, **kwargs)
        return out + 1e-2 * out.detach().abs().amax()
    off_by_a_little.__wrapped__ = checks.attend
    monkeypatch.setattr(checks, "attend", off_by_a_little)
    ctx = Context(device=torch.device("cpu"), tiny=True, out_dir=tmp_path)
    shape = checks.Shape(batch=1, heads=1, d_head=8, lengths=(16,), window=3, lm_d_head=8)
    rows = checks.kernel_checks(ctx, shape, log=lambda _: None)
    outputs = [r for r in rows if r["tensor"] == "out" and r["dtype"] == "float32"]
    assert outputs and {r["status"] for r in outputs} == {"fail"}  # (the shift is detached: grads stay right)


def test_attention_flops_known_case():
    # B=1, H=1, n=2, d=1: Q K^T and P V are 2 x 2 x 1 each, 2 x 4 multiply-adds = 16 FLOPs.
    assert kernels.attention_flops(1, 1, 2, 1, causal=False, mode="fwd") == 16
    assert kernels.attention_flops(1, 1, 2, 1, causal=True, mode="fwd") == 8
    assert kernels.attention_flops(3, 2, 4, 8, causal=False, mode="fwd+bwd") == 3.5 * 4 * 3 * 2 * 16 * 8


def _blocker_dir(tmp_path: Path) -> Path:
    """A folder shadowing the optional packages with modules that refuse to import; first on
    PYTHONPATH, it holds for the subprocesses `kernattn train` runs in as well."""
    d = tmp_path / "blocked"
    for name in BLOCKED:
        (d / name).mkdir(parents=True)
        (d / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed on this node')\n")
    return d


@pytest.mark.e2e
def test_train_part_kills_and_resumes_without_optional_packages(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_blocker_dir(tmp_path)), str(ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", "gpu-check", "--part", "train", "--rows", "gpa_m64_rope",
                           "--out-dir", str(out), "--work-dir", str(work), "--corpus", str(DICKENS),
                           "--params", str(ROOT / "params.yaml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = _rows(out / "train.csv")
    assert row["status"] == "ok" and row["loss_fell"] == "true" and row["resumed_ok"] == "true"
    ce = int(row["checkpoint_every"])
    assert int(row["killed_after_step"]) > ce and int(row["resumed_from_step"]) == ce
    assert float(row["last_val_loss"]) < float(row["first_val_loss"])
    assert not any(work.glob("runs/*/ckpt.pt.*"))  # no temporary checkpoint left behind
    for name in BLOCKED:  # the blockers were in force: importing them fails in that environment
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True)
        assert "is not installed on this node" in probe.stderr


@pytest.mark.e2e
def test_ddp_part_two_gloo_ranks_train_what_one_process_trains(tmp_path):
    """On a CPU the ddp part runs `kernattn train --nproc 2` (gloo) against one process with the
    same global batch and micro-batch (accumulating 2 a step): the validation losses agree to
    float32 summation order, and the row records both runs' throughput."""
    out, work = tmp_path / "out", tmp_path / "work"
    assert main(["gpu-check", "--part", "ddp", "--rows", "rope", "--out-dir", str(out), "--work-dir", str(work),
                 "--corpus", str(DICKENS), "--params", str(ROOT / "params.yaml")]) == 0
    (row,) = _rows(out / "ddp.csv")
    assert (row["status"], row["ranks"], row["backend"]) == ("ok", "2", "gloo")
    assert int(row["micro_batch"]) * 2 == int(row["global_batch"]) and int(row["steps"]) == 6
    assert float(row["max_val_diff"]) <= float(row["tolerance"]) == 1e-4
    assert float(row["tokens_per_s_one"]) > 0 and float(row["tokens_per_s_many"]) > 0
    assert "| rope-s0 | 2 (gloo) |" in (out / "ddp.md").read_text()
    for n in (1, 2):  # each run wrote its own run folder, one rank's worth of files
        runs = list((work / "ddp" / f"ranks{n}" / "runs").glob("*/final.json"))
        assert len(runs) == 1, runs
