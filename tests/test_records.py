"""Published records (kernattn.page.records): what an export keeps, and that every published
claims CSV with records beside it rebuilds byte for byte at this commit (issue 48)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernattn.errors import UsageError
from kernattn.page import records

REPO = Path(__file__).resolve().parents[1]
KERNATTN = str(Path(sys.executable).with_name("kernattn"))
# every records folder under results/records/ names the claims CSV it rebuilds: results/claims/<name>.csv
PUBLISHED = sorted(p for p in (REPO / "results" / "records").glob("*") if (p / records.MANIFEST).is_file())


def _tree(root: Path) -> None:
    files = {
        "results/s/runs/rope-s0/final.json": b"{}",
        "results/s/runs/rope-s0/metrics.jsonl": b'{"step": 0}\n',
        "results/s/runs/rope-s0/lr.npy": b"lr",
        "results/s/runs/rope-s0/param_trace.npz": b"bank",
        "results/s/runs/rope-s0/ckpt.pt": b"weights",
        "results/s/runs/budgets/rope-s0-b2/param_trace.npz": b"a branch's bank",
        "results/s/runs/budgets/rope-s0-b2/final.json": b"{}",
        "results/s/lm/runs/base-s0/model.pt": b"weights",
        "results/s/data/dickens/train.npy": b"corpus",
        "results/s/data/dickens/meta.json": b'{"n_train": 9}',
        "results/s/lm/data/tokenizer.tiktoken": b"merges",
        "results/s/benchmarks/train-rope-s0.tsv": b"s\n1\n",
        "results/unit-tests.xml": b"<testsuites/>",
        "results/cpu/attention-x.csv": b"a,b\n",
        "results/other/stray.json": b"{}",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_export_keeps_what_the_report_reads_and_no_weights_or_data_arrays(tmp_path):
    _tree(tmp_path)
    manifest = records.export("s", tmp_path / "out" / "s-2026-12-02", root=tmp_path)
    kept = set(manifest["files"])
    assert kept == {"results/s/runs/rope-s0/final.json", "results/s/runs/rope-s0/metrics.jsonl",
                    "results/s/runs/rope-s0/lr.npy", "results/s/runs/rope-s0/param_trace.npz",
                    "results/s/runs/budgets/rope-s0-b2/final.json",
                    "results/s/data/dickens/meta.json", "results/s/benchmarks/train-rope-s0.tsv",
                    "results/unit-tests.xml", "results/cpu/attention-x.csv"}
    out = tmp_path / "out" / "s-2026-12-02"
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert on_disk == kept | {records.MANIFEST}
    for rel, entry in manifest["files"].items():
        data = (out / rel).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    written = json.loads((out / records.MANIFEST).read_text())
    assert written["scale"] == "s" and written["files"] == manifest["files"] and "cores" in written
    assert not list((tmp_path / "out").glob(".*tmp*")), "no scratch folder left behind"


def test_export_refuses_an_existing_folder_and_a_scale_without_results(tmp_path):
    _tree(tmp_path)
    (tmp_path / "taken").mkdir()
    with pytest.raises(UsageError, match="exists; records are written once"):
        records.export("s", tmp_path / "taken", root=tmp_path)
    with pytest.raises(UsageError, match="no results of scale 'nope'"):
        records.export("nope", tmp_path / "new", root=tmp_path)


def test_rebuild_names_a_folder_that_is_not_records(tmp_path):
    with pytest.raises(UsageError, match="manifest.json: missing"):
        records.rebuild(tmp_path)


def test_the_published_tables_sit_beside_the_claims_csv():
    got = records.published_tables(Path("results/claims/small_long-2026-12-02.csv"))
    assert {k: v.name for k, v in got.items()} == {
        "claims.csv": "small_long-2026-12-02.csv", "claims-pairs.csv": "small_long-2026-12-02-pairs.csv",
        "budget-gaps.csv": "small_long-2026-12-02-budget-gaps.csv"}


def test_first_difference_names_the_line_and_both_sides():
    assert records.first_difference(b"a\nb\nc\n", b"a\nB\nc\n") == "line 2:\n  published: b\n  rebuilt:   B"
    assert records.first_difference(b"a\n", b"a\nb\n") == "line 2: one has 1 lines, the other 2"


@pytest.mark.e2e   # the report built as a process on a scale's records (about 20 s)
@pytest.mark.parametrize("folder", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_published_claims_rebuild_byte_for_byte_from_their_records(folder):
    """The published verdicts are `kernattn report` at this commit on the published records: a
    changed rule shows as a changed table (`kernattn records rebuild ... --write` republishes it)."""
    csv = REPO / "results" / "claims" / f"{folder.name}.csv"
    assert csv.is_file(), f"{folder} names no published CSV {csv}"
    done = subprocess.run([KERNATTN, "records", "rebuild", str(folder), "--params", str(REPO / "params.yaml"),
                           "--check", str(csv)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]


def test_some_records_are_published():
    """The rebuild test above is not vacuous: at least one records folder is in the repository."""
    assert PUBLISHED, "results/records/ holds no records folder (kernattn records export)"


def test_add_brings_later_runs_and_names_their_commit_and_keeps_what_was_recorded(tmp_path):
    first, later = tmp_path / "first", tmp_path / "later"
    _tree(first)
    out = tmp_path / "records" / "s-2026-12-02"
    records.export("s", out, root=first)
    _tree(later)
    (later / "results/s/runs/rope_lr10-s0").mkdir(parents=True)
    (later / "results/s/runs/rope_lr10-s0/final.json").write_text('{"val_loss": 1.0}')
    (later / "results/s/runs/rope_lr10-s0/ckpt.pt").write_bytes(b"weights")
    (later / "results/s/benchmarks/train-rope-s0.tsv").write_bytes(b"s\n2\n")   # a rerun's: the record stays
    assert records.add("s", out, root=later) == ["results/s/runs/rope_lr10-s0/final.json"]
    manifest = json.loads((out / records.MANIFEST).read_text())
    assert manifest["additions"][0]["files"] == ["results/s/runs/rope_lr10-s0/final.json"]
    assert "commit" in manifest["additions"][0] and "cores" in manifest["additions"][0]
    assert (out / "results/s/runs/rope_lr10-s0/final.json").read_text() == '{"val_loss": 1.0}'
    assert (out / "results/s/benchmarks/train-rope-s0.tsv").read_bytes() == b"s\n1\n"
    assert manifest["files"]["results/s/runs/rope_lr10-s0/final.json"]["bytes"] == len('{"val_loss": 1.0}')
    (later / "results/s/data/dickens/meta.json").write_text('{"n_train": 9, "created_utc": "later", "seconds": 2}')
    assert records.add("s", out, root=later) == []   # the same data prepared again: nothing new, no error
    (later / "results/s/data/dickens/meta.json").write_text('{"n_train": 10}')
    with pytest.raises(UsageError, match="prepared data differ"):
        records.add("s", out, root=later)
    with pytest.raises(UsageError, match="missing; `add` extends"):
        records.add("s", tmp_path / "nothing", root=later)
