"""The budget sweep and the recipe arm of issue 37 at micro scale: the wsd schedule by hand; a
cooldown branched from a long run's kept checkpoint is the run of its budget, bit for bit; a
row's own variant_lr_scale."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kernattn import cli
from kernattn.config import load_params
from kernattn.errors import ParamsError
from kernattn.tracks.char.track import lr_at
from tests.test_train import corpus, make_params, read_metrics  # noqa: F401  (corpus: a fixture)

WSD = {"schedule": "wsd", "cooldown_fraction": 0.5, "max_steps": 8, "warmup_steps": 2, "eval_every": 2,
       "checkpoint_every": 4, "lr": 1e-2, "min_lr_ratio": 0.1}


def test_wsd_schedule_by_hand(tmp_path, corpus):  # noqa: F811
    tp = load_params(make_params(tmp_path, corpus, train=WSD)).train
    # warm-up 2 steps, held at 1e-2 to step 4 (cooldown 0.5 of 8), then linear to 1e-3 at step 8
    assert [round(lr_at(s, tp), 6) for s in range(8)] == [0.005, 0.01, 0.01, 0.01, 0.00775, 0.0055, 0.00325, 0.001]
    # a budget of 4: its cooldown from step 2, reaching the floor at its last step
    assert [round(lr_at(s, tp, 4), 6) for s in range(4)] == [0.005, 0.01, 0.0055, 0.001]


def test_budgets_are_checked(tmp_path, corpus):  # noqa: F811
    with pytest.raises(ParamsError, match="train.budgets needs train.schedule: wsd"):
        load_params(make_params(tmp_path / "a", corpus, train={"schedule": "cosine", "budgets": [4]}))
    with pytest.raises(ParamsError, match="each budget must be below train.max_steps=8"):
        load_params(make_params(tmp_path / "b", corpus, train={**WSD, "budgets": [8]}))
    with pytest.raises(ParamsError, match=r"after the warm-up's 2 steps"):
        load_params(make_params(tmp_path / "c", corpus, train={**WSD, "budgets": [2]}))


def _state(run_dir):
    return torch.load(run_dir / "ckpt.pt", weights_only=True)["model"]


def test_a_cooldown_branch_is_the_run_of_its_budget(tmp_path, corpus):  # noqa: F811
    long = make_params(tmp_path / "long", corpus, train={**WSD, "budgets": [4]})
    assert cli.main(["train", "--params", str(long), "--run", "gpa_dp_m8-s0", "--no-progress"]) == 0
    trunk = tmp_path / "long" / "runs" / "gpa_dp_m8-s0"
    assert (trunk / "keep-2.pt").is_file()          # the budget of 4 cools down from step 2
    assert cli.main(["cooldown", "--params", str(long), "--run", "gpa_dp_m8-s0-b4", "--no-progress"]) == 0
    branch = tmp_path / "long" / "runs" / "budgets" / "gpa_dp_m8-s0-b4"

    short = make_params(tmp_path / "short", corpus, train={**WSD, "max_steps": 4, "budgets": []})
    assert cli.main(["train", "--params", str(short), "--run", "gpa_dp_m8-s0", "--no-progress"]) == 0
    alone = tmp_path / "short" / "runs" / "gpa_dp_m8-s0"

    a, b = _state(branch), _state(alone)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fa, fb = (json.loads((d / "final.json").read_text()) for d in (branch, alone))
    assert fa["val_loss"] == fb["val_loss"] and fa["fingerprint"] == fb["fingerprint"]
    assert (fa["run_id"], fa["budget"], fa["steps"]) == ("gpa_dp_m8-s0-b4", 4, 4)
    # its record starts with the long run's lines up to the branch point, then its own cooldown
    lines, trunk_lines = read_metrics(branch), read_metrics(trunk)
    assert lines[:4] == trunk_lines[:4] and [r["step"] for r in lines if r["split"] == "val"] == [0, 2, 4]
    assert [r["loss"] for r in lines] == [r["loss"] for r in read_metrics(alone)]
    # the engine's record of every step's rate (lr.npy): the trunk's schedule, and the branch's
    # the trunk's up to the branch point then its own cooldown, as a run of that budget
    tp = load_params(long).train
    assert np.load(trunk / "lr.npy").tolist() == [lr_at(s, tp) for s in range(8)]
    assert np.load(branch / "lr.npy").tolist() == np.load(alone / "lr.npy").tolist() == [lr_at(s, tp, 4) for s in range(4)]
    # rerun: already finished; a branch not in train.budgets is one line
    assert cli.main(["cooldown", "--params", str(long), "--run", "gpa_dp_m8-s0-b4", "--no-progress"]) == 0
    assert cli.main(["cooldown", "--params", str(long), "--run", "gpa_dp_m8-s0-b6", "--no-progress"]) == 2


def test_a_branch_without_its_kept_checkpoint_says_what_to_run(tmp_path, corpus, capsys):  # noqa: F811
    params = make_params(tmp_path, corpus, train={**WSD, "budgets": [4]})
    assert cli.main(["cooldown", "--params", str(params), "--run", "rope-s0-b4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "keep-2.pt: no checkpoint kept at step 2" in err and "kernattn train --run rope-s0" in err


def test_a_rows_own_variant_lr_scale(tmp_path, corpus):  # noqa: F811
    """matrix.rows[].variant_lr_scale replaces train.variant_lr_scale for that row only."""
    import yaml

    params = make_params(tmp_path, corpus, train={"max_steps": 1, "warmup_steps": 1, "eval_every": 1,
                                                  "checkpoint_every": 1, "variant_lr_scale": 10.0, "budgets": []})
    doc = yaml.safe_load(params.read_text())
    rows = doc["matrix"]["rows"]
    twin = {**next(r for r in rows if r["name"] == "gpa_dp_m8"), "name": "gpa_dp_m8_lr1", "variant_lr_scale": 1.0}
    twin.pop("paper")  # a document's model is trained by one row
    rows.append(twin)
    doc["scales"]["micro"]["matrix"]["only"] = ["gpa_dp_m8", "gpa_dp_m8_lr1"]
    params.write_text(yaml.safe_dump(doc))
    for run in ("gpa_dp_m8-s0", "gpa_dp_m8_lr1-s0"):
        assert cli.main(["train", "--params", str(params), "--run", run, "--no-progress"]) == 0
    fast, slow = (_state(tmp_path / "runs" / r) for r in ("gpa_dp_m8-s0", "gpa_dp_m8_lr1-s0"))
    import math
    for name in (k for k in fast if k.endswith("bank.log_length")):
        torch.testing.assert_close(fast[name].double() - math.log(150.0), 10 * (slow[name].double() - math.log(150.0)),
                                   rtol=1e-3, atol=1e-7)
    final = json.loads((tmp_path / "runs" / "gpa_dp_m8_lr1-s0" / "final.json").read_text())
    assert final["variant_lr_scale"] == 1.0
    # the LM's rows take no such key
    doc["lm"]["rows"][0]["variant_lr_scale"] = 1.0
    params.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError, match="variant_lr_scale is a char row's setting"):
        load_params(params)
