"""Issue 17, section 3: mean-ablation beside zero-ablation, and removing weak heads then
fine-tuning, on a tiny char GPT with constructed heads whose costs are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernattn.studies.prune import heads as prune
from kernattn.tracks.char.analysis import heads
from tests.test_analysis import SMALL, V, _keep_torch_threads, gpa  # noqa: F401 (an autouse fixture)


def batches(n: int = 3, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (n, 4, SMALL.context + 1), generator=g)
    return [(b[:, :-1], b[:, 1:]) for b in ids]


def evaluator(model, data):
    def evaluate():
        with torch.no_grad():
            return float(np.mean([float(model.loss(x, y)) for x, y in data]))
    return evaluate


def value_rows(attn, head):
    d = attn.d_model
    return slice(2 * d + head * attn.d_head, 2 * d + (head + 1) * attn.d_head)  # W_V of [W_Q; W_K; W_V]


def test_a_zero_head_costs_nothing_under_both_ablations():
    model = gpa()
    attn = model.blocks[1].attn
    with torch.no_grad():
        attn.proj_in.weight[value_rows(attn, 0)] = 0
    data = batches()
    evaluate = evaluator(model, data)
    means = heads.head_means(model, evaluate)
    assert [m.shape for m in means] == [(SMALL.n_head, attn.d_head)] * SMALL.n_layer
    assert torch.count_nonzero(means[1][0]) == 0
    for m in (None, means):
        _, costs = heads.ablation_costs(model, evaluate, means=m)
        assert costs[1, 0] == 0.0 and np.all(np.abs(np.delete(costs.ravel(), 2)) > 1e-7)


def test_a_constant_head_costs_nothing_under_mean_ablation_only():
    """W_V rows 0 and a value bias c: the head outputs c at every position (the weights sum
    to 1), so its mean is c and replacing it by its mean changes nothing; zeroing it does."""
    model = gpa(bias=True)
    attn = model.blocks[0].attn
    c = torch.linspace(-1, 1, attn.d_head)
    with torch.no_grad():
        attn.proj_in.weight[value_rows(attn, 1)] = 0
        attn.proj_in.bias[value_rows(attn, 1)] = c
    evaluate = evaluator(model, batches())
    means = heads.head_means(model, evaluate)
    torch.testing.assert_close(means[0][1], c, rtol=0, atol=1e-6)
    _, mean_costs = heads.ablation_costs(model, evaluate, means=means)
    _, zero_costs = heads.ablation_costs(model, evaluate)
    assert abs(mean_costs[0, 1]) < 1e-6 and abs(zero_costs[0, 1]) > 1e-4
    with pytest.raises(ValueError, match="no forward pass"):
        heads.head_means(model, lambda: None)


def test_heads_to_remove_flagged_or_the_k_weakest():
    s = np.array([[0.5, 0.01], [0.02, 3.0]])
    assert prune.heads_to_remove(s, threshold=0.1) == [(0, 1), (1, 0)]
    assert prune.heads_to_remove(s, threshold=0.001, k=1) == [(0, 1)]
    assert prune.heads_to_remove(s, threshold=0.001, k=3) == [(0, 1), (1, 0), (0, 0)]


def test_head_cost_is_the_hand_count():
    model = gpa()
    d, dh, m, n = SMALL.d_model, SMALL.d_model // SMALL.n_head, 4, SMALL.context
    # W_Q, W_K, W_V rows (3 dh x d), W_O columns (d x dh), the bank's 4 parameters per kernel
    params = 3 * dh * d + d * dh + 4 * m
    flops = 2 * (3 * dh * d + d * dh) + 2 * 2 * dh * (n + 1) / 2
    assert prune.head_cost(model.blocks[0].attn, n) == {"params": params, "flops_per_token": flops}
    biased = gpa(bias=True)
    assert prune.head_cost(biased.blocks[0].attn, n)["params"] == params + 3 * dh
    total = 2 * (model.num_params() - V * d) + SMALL.n_layer * SMALL.n_head * 2 * 2 * dh * (n + 1) / 2
    assert prune.model_flops_per_token(model) == total


def test_removal_record_of_hand_numbers():
    """The record of one removal: the costs are the differences of the four losses, the savings
    the head's counts (the fine-tuning itself runs on the engine: tests/test_studies_stages.py)."""
    model = gpa()
    losses = {"loss_before": 2.0, "loss_after_removal": 2.25, "loss_after_fine_tune": 2.125,
              "loss_control_fine_tune": 2.0625}
    out = prune.removal_record(model, [(1, 0)], losses, steps=7)
    assert out["removed"] == [{"layer": 2, "head": 1}] and out["fine_tune_steps"] == 7
    assert out["cost_after_removal"] == 0.25 and out["cost_after_fine_tune"] == 0.0625
    cost = prune.head_cost(model.blocks[1].attn, SMALL.context)
    assert out["params_saved"] == cost["params"] and out["flops_saved_per_token"] == cost["flops_per_token"]
    assert out["params_saved_fraction"] == cost["params"] / model.num_params()
    assert out["flops_saved_fraction"] == cost["flops_per_token"] / prune.model_flops_per_token(model)
    two = prune.removal_record(model, [(0, 1), (1, 0)], losses, steps=7)
    assert two["params_saved"] == 2 * cost["params"]  # every layer's heads have the same shapes
