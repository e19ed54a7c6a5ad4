"""`dvc exp run -S key=value` on the micro DAG's outputs adopted by DVC reruns exactly the
stages that read that key, and `dvc status` names a changed data key's stage without rerunning.

A workspace of its own (tests/test_dvc.py's `adopted` fixture, again for this module) and an
xdist group of its own, so that it runs on another worker than tests/test_dvc.py, whose `dvc
repro` test rebuilds deleted outputs in that module's workspace meanwhile: the two were one
worker's work in turn, the longest chain of the end-to-end job after the micro DAG."""

from __future__ import annotations

import json

import pytest
import yaml

from .test_dvc import _dependents, _stages, _watchers, adopted  # noqa: F401 (adopted: this module's fixture)
from .test_pipeline import run
from .workspace import BIN

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("dvc_exp")]  # one worker: the module's workspace


def test_dvc_exp_run_with_one_changed_param_reruns_only_its_dependents(adopted):
    ws = adopted
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
