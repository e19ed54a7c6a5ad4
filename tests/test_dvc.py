"""The generated dvc.yaml under real DVC: `dvc repro report` runs the micro DAG (the main one,
what `snakemake all` runs) and is then up to date, and `dvc exp run -S key=value` reruns exactly
the stages that read that key.

One repro serves every test here (a module fixture: the whole micro DAG is the expensive part),
so the tests share an xdist group and run in file order. DVC runs stages one at a time, so the
studies' stages (dvc.yaml has them too: `dvc repro` alone runs them after the main DAG) are not
run here: tests/test_pipeline.py checks that they are Snakemake's jobs with the same params,
and tests/test_studies_stages.py runs them through Snakemake."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from kernattn.cli import main

from .test_pipeline import BIN, check_outputs, make_workspace, run

pytestmark = pytest.mark.xdist_group("dvc")


def git(ws, *args):
    proc = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """A git + DVC workspace after one `dvc repro` of the micro DAG, committed as the baseline."""
    ws = make_workspace(tmp_path_factory.mktemp("dvc") / "ws")
    assert main(["dvc-yaml", "--params", str(ws / "params.yaml"), "--out", str(ws / "dvc.yaml")]) == 0
    git(ws, "init", "-q")
    git(ws, "config", "user.email", "ci@kernattn.invalid")
    git(ws, "config", "user.name", "kernattn ci")
    assert run([str(BIN / "dvc"), "init", "-q"], ws).returncode == 0
    (ws / ".gitignore").write_text("results/\nreport/\n.snakemake/\n")
    first = run([str(BIN / "dvc"), "repro", "report"], ws)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "baseline")
    return ws, first.stdout + first.stderr


def test_dvc_repro_runs_the_same_stages_and_then_is_up_to_date(reproduced):
    ws, out = reproduced
    check_outputs(ws)
    for stage in ("prepare", "train@rope-s0", "train_lm@base-s0", "train_vision@deit-s0", "report"):
        assert f"Running stage '{stage}'" in out, out[-3000:]
    assert "Running stage 'train_gka_init" not in out  # the studies are not the report's inputs
    second = run([str(BIN / "dvc"), "repro", "report"], ws)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Data and pipelines are up to date" in second.stdout + second.stderr
    for stage in ("prepare", "train@rope-s0", "report"):
        assert f"Stage '{stage}' didn't change, skipping" in second.stdout + second.stderr


def test_dvc_exp_run_with_one_changed_param_reruns_only_its_dependents(reproduced):
    ws, _ = reproduced
    # The micro scale does not override analysis.temperature, so this changes every GPA
    # analysis (their samples) and whatever reads their outputs; nothing that trains.
    lock = yaml.safe_load((ws / "dvc.lock").read_text())["stages"]
    watchers, downstream = _watchers(lock, "analysis"), _dependents(lock, "analysis")
    assert {"analyze_gpa@gpa_dp_m8-s0", "analyze_corpus"} <= watchers and "report" in downstream, downstream
    exp = run([str(BIN / "dvc"), "exp", "run", "report", "-S", "analysis.temperature=0.8"], ws)
    out = exp.stdout + exp.stderr
    assert exp.returncode == 0, out[-3000:]
    # every stage watching the key reruns; beyond them only stages that read an output that
    # changed (a downstream stage whose inputs came out the same is skipped, by their hashes)
    ran = set(_stages(out, "Running stage '"))
    assert watchers <= ran <= downstream, (sorted(ran), sorted(watchers), sorted(downstream))
    assert "report" in ran, sorted(ran)
    assert not ran & {"prepare", "prepare_lm", "prepare_vision"}, sorted(ran)  # no data is prepared again
    assert not any(s.startswith("train") for s in ran), sorted(ran)           # and no run trains again
    assert "Stage 'train@rope-s0' didn't change, skipping" in out, out[-3000:]

    # A data-only key changes prepare's params (and with it everything downstream, by its
    # outputs). `dvc status` names the changed stage and section without rerunning the DAG;
    # the LM and vision tracks do not read it.
    doc = yaml.safe_load((ws / "params.yaml").read_text())
    doc["scales"]["micro"]["data"]["max_chars"] = 150_000
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    status = run([str(BIN / "dvc"), "status", "--json"], ws)
    assert status.returncode == 0, status.stderr[-3000:]
    changed = json.loads(status.stdout)
    assert changed.get("prepare") == [{"changed deps": {"params.yaml": {"scales.micro.data": "modified"}}}], changed
    assert not [name for name in changed if name.startswith(("prepare_lm", "train_lm", "prepare_vision"))], changed


def _watchers(lock: dict, section: str) -> set[str]:
    """The stages of dvc.lock that watch `section` of params.yaml (or a key inside it)."""
    return {name for name, stage in lock.items()
            if any(k == section or k.startswith(section + ".") for k in stage.get("params", {}).get("params.yaml", {}))}


def _dependents(lock: dict, section: str) -> set[str]:
    """The watchers of `section` and every stage that reads (a path under) one of their
    outputs, transitively: what DVC may rerun when it changes."""
    def reads(stage, outs):
        return any(d["path"] == o or d["path"].startswith(o.rstrip("/") + "/") or o.startswith(d["path"] + "/")
                   for d in stage.get("deps", []) for o in outs)

    found = _watchers(lock, section)
    grew = True
    while grew:
        outs = [o["path"] for name in found for o in lock[name].get("outs", [])]
        more = {name for name, stage in lock.items() if name not in found and reads(stage, outs)}
        found |= more
        grew = bool(more)
    return found


def _stages(out: str, prefix: str) -> list[str]:
    return [line.split(prefix, 1)[1].split("'", 1)[0] for line in out.splitlines() if prefix in line]
