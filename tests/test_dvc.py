"""The generated dvc.yaml under real DVC, on the micro DAG's outputs as Snakemake made them
(the `micro_dag` fixture: the DAG is trained once per session, not again here).
`dvc commit` adopts them: it hashes every dep and out dvc.yaml declares and fails on one that
Snakemake did not write, so passing checks dvc.yaml's paths against Snakemake's, and `dvc repro
report` is then up to date. Outputs deleted are rebuilt by `dvc repro` (each track's training
stage and the report), rerunning only what reads an output that changed. (`dvc exp run -S
key=value` rerunning exactly the stages that read that key: tests/test_dvc_exp.py, in a
workspace of its own, on another worker.)

The tests share one workspace (a module fixture) and an xdist group, and run in file order.
The studies' stages (dvc.yaml has them too: `dvc repro` alone runs them after the main DAG)
are not run here: tests/test_pipeline.py checks that they are Snakemake's jobs with the same
params, and tests/test_studies_stages.py runs them through Snakemake."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess

import pytest
import yaml

from kernattn.cli import main

from .test_pipeline import check_outputs, run
from .workspace import BIN

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dvc")]  # one worker: the module's workspace
# What `dvc repro` must rebuild once deleted: each track's data or a training run of it, and
# the page (the other outputs stay, so DVC reruns only what reads an output that changed).
REBUILT = {"prepare": "results/micro/data/dickens", "train@rope-s0": "results/micro/runs/rope-s0",
           "train_lm@base-s0": "results/micro/lm/runs/base-s0",
           "train_vision@deit-s0": "results/micro/vision/runs/deit-s0", "report": "report/index.html"}


def git(ws, *args):
    proc = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def dvc(ws, *args) -> str:
    proc = run([str(BIN / "dvc"), *args], ws)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"dvc {' '.join(args)}:\n{out[-3000:]}"
    return out


def dvc_stdout(ws, *args) -> str:
    """What `dvc <args>` prints on stdout (a --json or --csv answer, without stderr's notes)."""
    proc = run([str(BIN / "dvc"), *args], ws)
    assert proc.returncode == 0, f"dvc {' '.join(args)}:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def adopted(micro_dag, tmp_path_factory):
    """A git + DVC workspace holding a copy of the micro DAG's outputs, recorded by `dvc commit`
    of `report` and everything it depends on, committed as the baseline."""
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    ws = micro_dag.copy(tmp_path_factory.mktemp("dvc"))
    assert main(["dvc-yaml", "--params", str(ws / "params.yaml"), "--out", str(ws / "dvc.yaml")]) == 0
    git(ws, "init", "-q")
    git(ws, "config", "user.email", "ci@kernattn.invalid")
    git(ws, "config", "user.name", "kernattn ci")
    dvc(ws, "init", "-q")
    (ws / ".gitignore").write_text("results/\nreport/\n.snakemake/\n")
    dvc(ws, "commit", "--force", "--with-deps", "report")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "baseline")
    return ws


def test_dvc_adopts_snakemakes_outputs_and_is_then_up_to_date(adopted):
    ws = adopted
    lock = yaml.safe_load((ws / "dvc.lock").read_text())["stages"]
    assert set(REBUILT) <= set(lock) and "analyze_gpa@gpa_dp_m8-s0" in lock, sorted(lock)
    assert not [s for s in lock if s.startswith(("train_gka_init", "train_wrap", "prune"))]  # not the report's inputs
    out = dvc(ws, "repro", "report")
    assert "Data and pipelines are up to date" in out, out[-3000:]
    assert not _stages(out, "Running stage '"), out[-3000:]
    for stage in ("prepare", "train@rope-s0", "train_lm@base-s0", "train_vision@deit-s0", "report"):
        assert f"Stage '{stage}' didn't change, skipping" in out, out[-3000:]


def test_dvc_metrics_plots_and_exp_show_read_the_finished_dag(adopted, tmp_path):
    """dvc.yaml's top-level metrics (every run's final record) and plots (the extrapolation
    tables, the report's validation curves, claims and budget gaps) are files the DAG wrote, and
    `dvc metrics show`, `dvc plots show` and `dvc exp show` list their values."""
    ws = adopted
    doc = yaml.safe_load((ws / "dvc.yaml").read_text())
    final, lm_eval, vit = ("results/micro/runs/rope-s0/final.json", "results/micro/lm/eval/base-s0.json",
                           "results/micro/vision/runs/deit-s0/final.json")
    assert {final, lm_eval, vit, "results/micro/runs/budgets/rope-s0-b4/final.json",
            "results/micro/lm/runs/base-s0/final.json"} <= set(doc["metrics"]), doc["metrics"]
    assert all((ws / m).is_file() for m in doc["metrics"]), doc["metrics"]
    for plot in doc["plots"]:  # each data plot's axes are columns of its file
        [(path, props)] = plot.items() if isinstance(plot, dict) else [(plot, {})]
        assert (ws / path).is_file(), path
        if props:
            header = (ws / path).read_text().splitlines()[0].split(",")
            assert {props["x"], props["y"]} <= set(header), (path, header)
    want = {final: ("val_loss", json.loads((ws / final).read_text())["val_loss"]),
            lm_eval: ("val_bpb", json.loads((ws / lm_eval).read_text())["val_bpb"]),
            vit: ("top1", json.loads((ws / vit).read_text())["top1"])}

    shown = json.loads(dvc_stdout(ws, "metrics", "show", "--json"))
    [files] = [rev["data"] for rev in shown.values()]  # one revision: the workspace
    for path, (key, value) in want.items():
        assert files[path]["data"][key] == value, (path, key, files.get(path))
    # the claims summary: the verdicts counted, in all and per document key
    summary = files["report/tables/claims-summary.json"]["data"]
    n_claims = len(list(csv.DictReader(io.StringIO((ws / "report/tables/claims.csv").read_text()))))
    assert summary["claims"] == n_claims == sum(summary["by_verdict"].values()), summary
    assert {"gpa-short", "gpa-long", "kr-blog", "gka-paper"} <= set(summary["by_document"])
    table = dvc(ws, "metrics", "show")
    row = next(line for line in table.splitlines() if line.startswith(final))
    assert str(round(want[final][1], 5)) in row.split(), row

    html = tmp_path / "plots"
    out = dvc(ws, "plots", "show", "-o", str(html))
    page = (html / "index.html").read_text()
    assert str(html / "index.html") in out, out
    assert "Length extrapolation (char)" in page and "Claims: our estimate" in page, page[:2000]
    assert '"run_id": "rope-s0"' in page  # the extrapolation table's rows, as data
    assert "val_curves_all.png" in page and any((html / "static").glob("*val_curves_all.png"))

    columns = [f"{path}:{key}" for path, (key, _) in want.items()]
    csv_out = dvc_stdout(ws, "exp", "show", "--csv", "--drop", ".*", "--keep", "Experiment",
                         *(arg for c in columns for arg in ("--keep", re.escape(c) + "$")))
    rows = list(csv.DictReader(io.StringIO(csv_out)))
    assert set(rows[0]) == {"Experiment", *columns}, rows[0]
    workspace = rows[0]  # the workspace first, then the baseline commit (cache: false: not in git)
    for path, (key, value) in want.items():
        assert float(workspace[f"{path}:{key}"]) == pytest.approx(value), (path, key, workspace)


def test_dvc_repro_rebuilds_deleted_outputs_and_reruns_only_what_reads_them(adopted):
    ws = adopted
    lock = yaml.safe_load((ws / "dvc.lock").read_text())["stages"]
    for path in REBUILT.values():
        (shutil.rmtree if (ws / path).is_dir() else (ws / path).unlink)(ws / path)
    # DVC would check the corpus out of its run cache (same command, deps and params): force it
    forced = dvc(ws, "repro", "--force", "--single-item", "prepare")
    assert _stages(forced, "Running stage '") == ["prepare"], forced[-3000:]
    out = dvc(ws, "repro", "report")
    ran, readers = set(_stages(out, "Running stage '")), _readers(lock, set(REBUILT))
    assert set(REBUILT) - {"prepare"} <= ran <= readers - {"prepare"}, (sorted(ran), sorted(readers))
    assert "Running stage 'train_gka_init" not in out  # the studies are not the report's inputs
    # the corpus came out the same, so the run that was kept is not trained again
    assert "Stage 'train@gpa_dp_m8-s0' didn't change, skipping" in out, out[-3000:]
    # and neither is its cooldown branch: each branch depends on its own trunk run only
    assert "Running stage 'cooldown@rope-s0-b4'" in out and "Running stage 'cooldown@gpa_dp_m8-s0-b4'" not in out
    check_outputs(ws)
    again = dvc(ws, "repro", "report")
    assert "Data and pipelines are up to date" in again, again[-3000:]
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "--allow-empty", "-m", "rebuilt by dvc repro")  # the workspace's new baseline


def _watchers(lock: dict, section: str) -> set[str]:
    """The stages of dvc.lock that watch `section` of params.yaml (or a key inside it)."""
    return {name for name, stage in lock.items()
            if any(k == section or k.startswith(section + ".") for k in stage.get("params", {}).get("params.yaml", {}))}


def _dependents(lock: dict, section: str) -> set[str]:
    """The watchers of `section` and every stage that reads their outputs, transitively: what
    DVC may rerun when it changes."""
    return _readers(lock, _watchers(lock, section))


def _readers(lock: dict, stages: set[str]) -> set[str]:
    """`stages` and every stage of dvc.lock that reads (a path under) one of their outputs,
    transitively."""
    def reads(stage, outs):
        return any(d["path"] == o or d["path"].startswith(o.rstrip("/") + "/") or o.startswith(d["path"] + "/")
                   for d in stage.get("deps", []) for o in outs)

    found = set(stages)
    grew = True
    while grew:
        outs = [o["path"] for name in found for o in lock[name].get("outs", [])]
        more = {name for name, stage in lock.items() if name not in found and reads(stage, outs)}
        found |= more
        grew = bool(more)
    return found


def _stages(out: str, prefix: str) -> list[str]:
    return [line.split(prefix, 1)[1].split("'", 1)[0] for line in out.splitlines() if prefix in line]
