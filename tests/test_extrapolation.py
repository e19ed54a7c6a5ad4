"""Length extrapolation (kernattn.studies.extrapolation.length / extrapolate / report): the same
targets at every length, hand-computed losses, which variants are defined beyond their
training context (from the model, never a clamp), the 1x number against the track's own
validation loss, and the stages end to end on the micro DAG."""

from __future__ import annotations

import contextlib
import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from kernattn.studies.extrapolation.length import (
    ShortText,
    behaviour,
    defined_limit,
    text_targets,
    window_losses,
)

MICRO = SimpleNamespace(n_layer=1, n_head=2, d_model=16, context=8, mlp_ratio=2, dropout=0.0)


def gpt(options: dict, variant: str = "softmax", context: int = 8):
    from kernattn.tracks.char.model import GPT

    torch.manual_seed(0)
    return GPT(5, SimpleNamespace(**{**vars(MICRO), "context": context}), variant, options).eval()


def test_every_length_scores_the_same_targets_hand_checked():
    """A model whose logit for class 0 is the position in its window (0-based) and 0 for the
    other class: a target 0 at position p costs log(1 + e^-p) nats."""
    def by_position(x):
        logits = torch.zeros(*x.shape, 2)
        logits[..., 0] = torch.arange(x.shape[1], dtype=torch.float32)
        return logits

    tokens = torch.zeros(17, dtype=torch.long)
    cost = [math.log1p(math.exp(-p)) for p in range(16)]
    two = window_losses(by_position, tokens, 2, 2, 16, batch=3)
    assert two["loss"] == pytest.approx((cost[0] + cost[1]) / 2, abs=1e-6) and two["loss_beyond"] is None
    eight = window_losses(by_position, tokens, 8, 2, 16, batch=3)
    assert eight["windows"] == 2 and eight["loss"] == pytest.approx(sum(cost[:8]) / 8, abs=1e-6)
    assert eight["loss_beyond"] == pytest.approx(sum(cost[2:8]) / 6, abs=1e-6)  # positions >= the context 2
    # a constant model: ln V at every length, and the targets are tokens[1:17] every time
    ids = torch.arange(17) % 3
    for length in (2, 4, 8, 16):
        r = window_losses(lambda x: torch.zeros(*x.shape, 3), ids, length, 2, 16, batch=2)
        assert r["loss"] == pytest.approx(math.log(3), abs=1e-6) and r["targets"] == 16
        assert torch.equal(r["ids"], ids[1:17])


def test_too_little_validation_text_names_the_key():
    assert text_targets(8 * 4 * 2 + 1, (1, 2, 4), 4, 4) == 64
    with pytest.raises(ShortText, match="lower studies.extrapolation.windows"):
        text_targets(64, (1, 2, 4), 4, 4)


@pytest.mark.parametrize("variant, options, words", [
    ("softmax", {"position": "rope"}, "rope: rotation angles computed at every position (beyond 8 never seen"),
    ("softmax", {"position": "learned_rope"}, "learned_rope: rotation angles"),
    ("softmax", {"position": "alibi"}, "alibi: a fixed slope per head, defined at every lag"),
    ("softmax", {"position": "t5", "t5_max_distance": 16}, "lags >= 16 share the last bucket"),
    ("softmax", {"position": "none"}, "no position signal (the causal mask only)"),
    ("gpa", {"n_kernels": 2}, "kernel bank (add): the bank G(lag) is a closed form, defined at every lag"),
    ("gpa", {"n_kernels": 2, "rope": True}, "plus rope angles at every position"),
    ("gka", {}, "no position signal"),
])
def test_variants_defined_at_every_length_say_what_they_do(variant, options, words):
    model = gpt(options, variant)
    assert defined_limit(model) is None
    assert words in behaviour(model, 8)


def test_a_lag_table_is_not_defined_beyond_max_len_never_clamped():
    """max_len 16 at context 8: 2x is defined (entries 8..15 untrained), 4x and 8x are lines
    saying so; the library itself refuses a longer sequence rather than clamping it."""
    from kernattn.studies.extrapolation.extrapolate import Loaded, sweep

    model = gpt({"position": "lag_table", "max_len": 16})
    assert defined_limit(model) == 16
    words = behaviour(model, 8)
    assert "not defined beyond 16" in words and "lags 8..15 were never trained" in words
    longer = gpt({"position": "lag_table", "max_len": 16}, context=32)
    with pytest.raises(ValueError, match="raise the option max_len"):
        longer(torch.zeros(1, 32, dtype=torch.long))
    tokens = torch.randint(0, 5, (8 * 8 * 2 + 1,), generator=torch.Generator().manual_seed(0))
    state = model.state_dict()

    def model_at(n):
        m = gpt({"position": "lag_table", "max_len": 16}, context=n)
        m.load_state_dict(state)
        return m

    run = Loaded("char", SimpleNamespace(run_id="lag_table-s0", row="lag_table", seed=0, variant="softmax", label="x"),
                 {"val_loss": 1.0}, 8, tokens, 1.0, model_at, 16, words, contextlib.nullcontext, torch.device("cpu"))
    lines = sweep(run, (1, 2, 4, 8), windows=2, batch=4)
    assert [ln["defined"] for ln in lines] == [True, True, False, False]
    assert [ln.get("note") for ln in lines[2:]] == ["not defined beyond 16"] * 2 and "loss" not in lines[2]
    with torch.no_grad():  # 1x by hand: the trained model on 16 windows of 8
        x = tokens[:128].view(16, 8)
        y = tokens[1:129].view(16, 8)
        direct = torch.nn.functional.cross_entropy(model(x).reshape(-1, 5), y.reshape(-1)).item()
    assert lines[0]["loss"] == pytest.approx(direct, abs=1e-6) and lines[0]["targets"] == lines[1]["targets"] == 128


def test_the_1x_number_is_the_tracks_validation_loss_when_both_see_the_same_window():
    """A validation split of context + 1 tokens: the track's fixed windows (VAL_SEED) can only
    start at 0, so they are the one window of the 1x sweep, and the two losses are equal."""
    from kernattn.tracks.char.data import evaluate, validation_starts

    model = gpt({"position": "rope"})
    val = torch.randint(0, 5, (9,), generator=torch.Generator().manual_seed(1))
    starts = validation_starts(val.numel(), 8, 2, 3)
    assert not starts.any()
    protocol = evaluate(model, model, val, starts, 8, contextlib.nullcontext)
    with torch.no_grad():
        ours = window_losses(model, val, 8, 8, text_targets(val.numel(), (1,), 8, 1), batch=1)
    assert ours["loss"] == pytest.approx(protocol, abs=1e-6)


def test_the_report_part_reads_a_constructed_table(tmp_path):
    from kernattn.studies.extrapolation.report import flat_table, track_context

    lines = [{"track": "char", "run_id": f"{row}-s{s}", "row": row, "seed": s, "variant": "softmax", "label": row,
              "train_context": 8, "factor": f, "length": 8 * f, "defined": ok, "loss": (1.0 + s + f) if ok else None,
              "loss_beyond": (2.0 + s) if ok and f > 1 else None, "bpb": None, "windows": 1, "targets": 64,
              "note": "" if ok else "not defined beyond 16", "behaviour": "b", "val_loss_train": 1.5,
              "val_loss_protocol": 1.5 + 1e-7 * s if f == 1 else None}
             for row in ("rope", "lag_table") for s in (0, 1) for f in (1, 2, 4)
             for ok in [row == "rope" or f <= 2]]
    part = track_context(pd.DataFrame(lines))
    assert part["factors"] == [1, 2, 4] and part["check"] == pytest.approx(1e-7)
    rope, table = part["rows"]
    assert rope["seeds"] == [0, 1] and rope["cells"][2]["loss"]["mean"] == pytest.approx(5.5)  # (5 + 6) / 2
    assert rope["cells"][1]["beyond"]["mean"] == pytest.approx(2.5) and rope["cells"][1]["beyond"]["lo"] < 2.5
    assert not table["cells"][2]["defined"] and table["cells"][2]["note"] == "not defined beyond 16"
    flat = flat_table(part)
    assert len(flat) == 6 and pd.isna(flat.loc[5, "loss_mean"]) and flat.loc[2, "loss_mean"] == pytest.approx(5.5)


def test_the_stages_read_every_run_and_feed_the_report():
    from kernattn.config import load_params
    from kernattn.dag.stages import stage_table

    from .workspace import REPO

    table = stage_table(load_params(REPO / "params.yaml", "tiny"))
    char, lm = table["extrapolate_char"], table["extrapolate_lm"]
    assert sum(f.endswith("/final.json") for f in char.inputs(None)) == 19  # every tiny char run (7 rows x 2 seeds + 5 x 1)
    assert sum(f.endswith("/final.json") for f in lm.inputs(None)) == 9  # tiny LM rows: the paper's pair and gka_tokens x 2 seeds + 3 x 1
    assert char.outputs(None) == ["results/tiny/extrapolation/char.csv"]
    assert {*char.outputs(None), *lm.outputs(None)} <= set(table["report"].inputs(None))
    assert "studies" in char.params and "studies" in lm.params and "lm" in lm.params


@pytest.mark.e2e
def test_extrapolation_stages_end_to_end_at_micro(micro_dag):
    """The main DAG scores every char and LM run at 1x..8x: the 1x re-scoring equals each
    training run's final.json, every length predicts the same targets, the report shows both
    tracks."""
    assert micro_dag.returncode == 0, micro_dag.output[-3000:]
    ws = micro_dag.ws  # read only
    for track, runs, folder in (("char", {"rope-s0", "gpa_dp_m8-s0"}, "runs"),
                                ("lm", {"base-s0", "gka_tokens-s0", "gka_flops-s0"}, "lm/runs")):
        table = pd.read_csv(ws / f"results/micro/extrapolation/{track}.csv")
        assert set(table["run_id"]) == runs and sorted(set(table["factor"])) == [1, 2, 4, 8]
        assert table["defined"].all() and table.groupby("run_id")["targets"].nunique().eq(1).all()
        for _, line in table[table["factor"] == 1].iterrows():
            final = json.loads((ws / f"results/micro/{folder}/{line['run_id']}/final.json").read_text())
            # training's own evaluation windows (the char track's last sample; its val_loss is the whole split)
            assert line["val_loss_protocol"] == pytest.approx(final.get("val_loss_sample", final["val_loss"]), abs=1e-6)
        assert (table["bpb"].notna().all() if track == "lm" else table["bpb"].isna().all())
    page = (ws / "report/index.html").read_text()
    assert 'id="extrapolation-char-table"' in page and 'id="extrapolation-lm-table"' in page
