"""nanochat checkpoints cross over (micro scale, through the CLI): export-lm writes a trained
run in nanochat c7ba252's layout, import-lm reads it back into another run that eval-lm scores
exactly as the original; runs that do not compute nanochat's function are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernattn.cli import main
from tests.test_lm_stages import write_params

pytestmark = pytest.mark.xdist_group("lm_stages")
NANO = {"name": "nano", "variant": "base"}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """Micro's base row with nanochat's short window (null), a second base row, trained base-s0."""
    folder = tmp_path_factory.mktemp("lm_crossover")
    rows = [{"name": "base", "variant": "base"}, NANO, {"name": "gka", "variant": "gka"}]
    params = write_params(folder, rows=rows, short_window=None)
    assert main(["prepare-lm", "--params", str(params)]) == 0
    assert main(["train-lm", "--params", str(params), "--run", "base-s0"]) == 0
    return folder


def test_export_import_round_trip_scores_the_same(ws, capsys):
    params, out = str(ws / "params.yaml"), ws / "nanochat"
    assert main(["export-lm", "--params", params, "--run", "base-s0", "--out", str(out)]) == 0
    state = torch.load(out / "model_000004.pt", weights_only=True)
    meta = json.loads((out / "meta_000004.json").read_text())
    assert meta["model_config"] == {"sequence_len": 32, "vocab_size": 400, "n_layer": 1, "n_head": 2, "n_kv_head": 2,
                                    "n_embd": 64, "window_pattern": "SSSL"}
    assert state["transformer.wte.weight"].shape == (448, 64) and state["lm_head.weight"].shape == (448, 64)
    assert {"transformer.h.0.attn.c_q.weight", "transformer.h.0.attn.ve_gate.weight", "value_embeds.0.weight",
            "x0_lambdas"} <= set(state)
    assert main(["import-lm", "--params", params, "--nanochat", str(out), "--run", "nano-s0"]) == 0
    theirs = torch.load(ws / "lm/runs/nano-s0/model.pt", weights_only=True)
    ours = torch.load(ws / "lm/runs/base-s0/model.pt", weights_only=True)
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in ours)
    trained = json.loads((ws / "lm/runs/base-s0/config.json").read_text())["optimizer"]
    assert trained["kind"] == "muon_adamw" and trained["batch_lr_scale"] == (4 * 32 / 2**19) ** 0.5
    final = json.loads((ws / "lm/runs/nano-s0/final.json").read_text())
    assert final["status"] == "IMPORTED" and final["steps"] == 4 and final["train_tokens"] == 4 * 4 * 32
    for run in ("base-s0", "nano-s0"):
        assert main(["eval-lm", "--params", params, "--run", run]) == 0
    scores = [json.loads((ws / f"lm/eval/{r}.json").read_text()) for r in ("base-s0", "nano-s0")]
    assert scores[0]["val_bpb"] == scores[1]["val_bpb"] and scores[0]["core"]["core"] == scores[1]["core"]["core"]
    # a second import into a finished run needs --replace
    capsys.readouterr()
    assert main(["import-lm", "--params", params, "--nanochat", str(out), "--run", "nano-s0"]) == 2
    assert "pass --replace" in capsys.readouterr().err


def test_import_refuses_another_function_or_shape(ws, tmp_path, capsys):
    params, out = str(ws / "params.yaml"), ws / "nanochat"
    if not out.exists():
        assert main(["export-lm", "--params", params, "--run", "base-s0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["import-lm", "--params", params, "--nanochat", str(out), "--run", "gka-s0"]) == 2
    assert "is not nanochat's attention" in capsys.readouterr().err
    wider = write_params(tmp_path, rows=[NANO], short_window=None, data_dir=str(ws / "lm/data"),
                         out_dir=str(tmp_path / "runs"), depth=2)
    assert main(["import-lm", "--params", str(wider), "--nanochat", str(out), "--run", "nano-s0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.count(str(out / "meta_000004.json")) == 1
    assert "model_config.n_layer=1, but the run's lm.depth gives 2" in err
    assert main(["import-lm", "--params", params, "--nanochat", str(tmp_path), "--run", "nano-s0"]) == 2
    assert "no model_<step>.pt" in capsys.readouterr().err
