"""Beside GKA rows that start at sigma = 1 (issue 25): sigma at the end read from a checkpoint or
final.json, the mean diagonal weight where a track measured it, and "paper" = sigma 1 labelled
an inference."""

from __future__ import annotations

import math

import torch

from kernattn.config import load_params
from kernattn.report import gka_state
from kernattn.tracks.vision import report as vision_report

from .test_report import PARAMS


def test_sigma_read_from_a_checkpoint(tmp_path):
    state = {"model": {"blocks.0.attn.inner.log_sigma": torch.tensor([0.0, math.log(2.0)]),
                       "blocks.1.attn.inner.log_sigma": torch.tensor([math.log(0.5), 0.0]),
                       "blocks.0.attn.proj.weight": torch.zeros(2, 2)}, "step": 3}
    torch.save(state, tmp_path / "ckpt.pt")
    sigma = gka_state.checkpoint_sigma(tmp_path / "ckpt.pt")
    assert [round(x, 6) for x in sigma] == [1.0, 2.0, 0.5, 1.0]
    assert gka_state.checkpoint_sigma(tmp_path / "missing.pt") is None
    torch.save({"model": {"w": torch.zeros(1)}}, tmp_path / "softmax.pt")
    assert gka_state.checkpoint_sigma(tmp_path / "softmax.pt") is None
    text = gka_state.sigma_text(sigma, 0.93, "ckpt.pt of 1 of 1 runs")
    assert text.startswith("sigma at the end 0.5–2 (mean 1.13, 4 heads); mean diagonal weight 0.930")
    assert "is an inference: gka-paper publishes no initial bandwidth" in text
    assert "not measured" in gka_state.sigma_text(sigma, None, "x")
    assert "not read (no checkpoint)" in gka_state.sigma_text(None, None, "x")


def test_which_rows_start_at_one():
    assert gka_state.starts_at_one("gka", {"init_sigma": "paper"})
    assert gka_state.starts_at_one("gka", {"init_sigma": 1.0})
    assert not gka_state.starts_at_one("gka", {"init_sigma": "sqrt_d"})
    assert not gka_state.starts_at_one("gka", {})  # the variant's default is sqrt_d
    assert not gka_state.starts_at_one("softmax", {"init_sigma": "paper"})


def test_vision_gka_row_shows_sigma_and_diagonal_weight():
    vp = load_params(PARAMS, "tiny").vision
    row = next(r for r in vp.rows if r.name == "gka")
    finals = {f"gka-s{s}": {"sigma": [[0.98, 1.02], [1.1, 1.12]]} for s in (0, 1)}
    section = {"runs": [{"run_id": "gka-s0", "layers": [{"mean_diagonal": 0.9}, {"mean_diagonal": 0.96}]}]}
    text = vision_report._gka_state(row, finals, section, [0, 1])
    assert text.startswith("gka: sigma at the end 0.98–1.12 (mean 1.06, 8 heads); mean diagonal weight 0.930")
    assert "gka-s0's analysis" in text and "inference" in text
    deit = next(r for r in vp.rows if r.name == "deit")
    assert vision_report._gka_state(deit, finals, section, [0, 1]) == ""
