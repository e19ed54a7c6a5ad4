"""The CoPE control's newline reading (issue 50, claim rev-cope-newlines): the shares against
hand-computed cases, the pre-registered rule on constructed readings, and analyze-cope on a
real finished run, read by the report from its file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from kernattn.attention.cope import CopeAttention
from kernattn.config import find_run, load_params
from kernattn.report import verdicts
from kernattn.tracks.char.model import GPT
from kernattn.tracks.char.analysis.cope import HeadShare, analyze, head_shares
from kernattn.tracks.char.report_cope import judge, verdict

from . import paths

REPO = Path(__file__).resolve().parents[1]
CLAIM = {"id": "rev-cope-newlines", "paper": "reviewers", "where": "w", "statement": "s", "kind": "cope_newlines",
         "row": "cope", "min_share": 0.5, "min_enrichment": 2.0}


def _model(n_layer=1) -> GPT:
    torch.manual_seed(0)
    m = SimpleNamespace(n_layer=n_layer, n_head=2, d_model=8, context=4, mlp_ratio=4, dropout=0.0)
    return GPT(5, m, "cope", {}).eval()


def test_the_content_blind_share_is_the_share_of_allowed_pairs_whose_key_is_a_newline():
    # causal, N = 4, newlines (id 0) at keys 0 and 2: allowed pairs with such a key are
    # (4 - 0) + (4 - 2) = 6 of the 10 (i >= j)
    x = torch.tensor([[0, 1, 0, 3]])
    shares = head_shares(_model(n_layer=2), x, newline_id=0)
    assert [(h.layer, h.head) for h in shares] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(h.blind == pytest.approx(0.6) for h in shares)


def test_a_head_whose_gates_open_only_on_newlines_has_share_one(monkeypatch):
    x = torch.tensor([[0, 1, 0, 3], [2, 0, 4, 4]])

    def newline_gates(self, h):   # g_ij = 1 where key j is a newline and i may see it, else 0
        allowed = self.allowed(h.shape[1], h.device)
        on = (x == 0)[:, None, None, :] & allowed
        return on.expand(h.shape[0], self.n_head, -1, -1).float()

    monkeypatch.setattr(CopeAttention, "gates", newline_gates)
    (first, second) = head_shares(_model(), x, newline_id=0)
    # blind: row 1 as above (6 of 10), row 2 a newline at key 1 (3 of 10): 9 of 20
    assert first.share == second.share == pytest.approx(1.0)
    assert first.blind == pytest.approx(9 / 20) and first.enrichment == pytest.approx(20 / 9)


def _heads(*shares: float) -> list[dict]:
    return [HeadShare(1, i + 1, s, 0.02).record() for i, s in enumerate(shares)]


def test_the_pre_registered_rule_on_constructed_readings():
    yes, no = _heads(0.1, 0.6), _heads(0.1, 0.3)
    assert verdict({"s0": yes, "s1": yes, "s2": yes}, 0.5) == verdicts.HOLDS
    assert verdict({"s0": no, "s1": no, "s2": no}, 0.5) == verdicts.CONTRADICTED
    assert verdict({"s0": yes, "s1": no, "s2": yes}, 0.5) == verdicts.INCONCLUSIVE
    assert verdict({"s0": yes, "s1": yes}, 0.5) == verdicts.not_judged("2 seeds")
    assert verdict({"s0": _heads(0.5), "s1": _heads(0.5), "s2": _heads(0.5)}, 0.5) == verdicts.HOLDS   # at least


def test_a_finished_run_is_read_from_its_checkpoint_and_a_missing_reading_is_named(tmp_path):
    from kernattn.tracks.char.corpus import prepare
    from kernattn.tracks.char.track import train

    over = {"data": {"mirror": str(paths.DICKENS), "max_chars": 50_000, "out_dir": str(tmp_path / "data")},
            "train": {"out_dir": str(tmp_path / "runs"), "max_steps": 2, "eval_every": 2, "eval_batches": 1,
                      "warmup_steps": 1, "budgets": []},
            "analysis": {"streams": 3, "out_dir": str(tmp_path / "analysis")}, "tracking": {"enabled": False},
            "matrix": {"only": ["cope"], "seeds": [0, 1]}}
    p = load_params(REPO / "params.yaml", "micro", over)
    prepare(p.data)
    assert train(p, find_run(p, "cope-s0"), progress=False) == 0
    written = analyze(p, find_run(p, "cope-s0"))   # kernattn analyze-cope's file, what the report reads
    assert [(h["layer"], h["head"]) for h in written["heads"]] == [(1, 1), (1, 2)] and written["windows"] == 3
    runs = pd.DataFrame({"row": ["cope", "cope"], "run_id": ["cope-s0", "cope-s1"]})
    res = judge(CLAIM, p, runs, "micro")
    assert res.verdict == verdicts.not_judged("1 seed")          # cope-s1 never analysed: not read, named
    assert "cope-s1: no reading in" in res.detail and "kernattn analyze-cope --run cope-s1" in res.detail
    assert "cope-s0" in res.ours
    assert 0.0 <= res.estimate <= 1.0
    assert "of 2 heads" in res.ours   # micro: 1 layer x 2 heads
    assert judge(CLAIM, p, runs.iloc[:0], "micro").verdict == verdicts.NOT_RUN
