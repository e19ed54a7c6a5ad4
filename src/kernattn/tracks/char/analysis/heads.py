"""Redundant heads (gpa-long, 3.1 and 4): is a weak kernel bank a head that can go?

gpa-long sees one bank of its fourth layer "effectively zero" and concludes that the head
(and its MLP) could be removed "without any loss of performance". We test the reading on
every GPA run: each head is removed in turn and the change of the validation loss measured.

- Removing a head: its output is zeroed before the output projection W_O (a forward
  pre-hook on `proj_out` zeroes that head's slice of the merged heads), so the rest of the
  model is untouched and the hook leaves nothing behind. Only the head goes, not an MLP.
- Mean-ablation (issue 17): the head's output is replaced by its mean over batch and
  positions, computed on the validation windows (`head_means`), instead of zeros. Zeroing
  also removes the head's constant part, which the next layers may rely on (a bias the
  model could keep for free); mean-ablation removes only what varies with the input, so its
  cost is the information the head carries. A head with a constant output costs nothing
  under mean-ablation; one with a zero output costs nothing under both.
- Cost of removing it: validation loss with the head removed minus without, on the fixed
  validation windows of training (kernattn.tracks.char.data.validation_starts / evaluate).
- The claim, made testable: banks of lower strength (kernattn.tracks.char.analysis.banks.strength) are
  cheaper to remove. Reported per run: Spearman's rank correlation between strength and
  cost over the model's heads (positive supports the claim), the cost rank of the weakest
  bank's head (1 = the cheapest head of the model), and which heads fall below the strength
  threshold (analysis.strength_threshold).

A bank that is zero is not a head that is zero: with G = 0 the head still attends by content
(softmax of q.k), so a zero bank alone does not make a head free to remove; the tests show
both cases.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
from scipy import stats


@contextlib.contextmanager
def replace_head(model, layer: int, head: int, value=None):
    """Within the block, head `head` (0-based) of block `layer` outputs `value` (a [d_head]
    tensor, the same at every position and batch row) or, by default, zeros (before W_O)."""
    attn = model.blocks[layer].attn
    if not 0 <= head < attn.n_head:
        raise ValueError(f"head {head} out of range: layer {layer} has {attn.n_head} heads")

    def set_head(module, args):
        (merged,) = args  # [B, N, H * dv], head h in columns h*dv .. (h+1)*dv - 1 (merge_heads)
        width = merged.shape[-1] // attn.n_head
        merged = merged.clone()
        merged[..., head * width:(head + 1) * width] = 0 if value is None else value.to(merged.dtype)
        return (merged,)

    handle = attn.proj_out.register_forward_pre_hook(set_head)
    try:
        yield
    finally:
        handle.remove()


def ablate_head(model, layer: int, head: int):
    """Within the block, head `head` (0-based) of block `layer` outputs zeros (before W_O)."""
    return replace_head(model, layer, head)


def mean_ablate_head(model, layer: int, head: int, means):
    """Within the block, the head outputs its mean (`means` from head_means) (before W_O)."""
    return replace_head(model, layer, head, means[layer][head])


def head_means(model, run) -> list:
    """Per layer [heads, d_head]: each head's output averaged over batch rows and positions
    of every forward pass `run()` makes (e.g. the validation evaluation), in float64."""
    sums, counts, handles = {}, {}, []

    def hook_for(layer, attn):
        def accumulate(module, args):
            (merged,) = args
            flat = merged.detach().double().reshape(-1, attn.n_head, merged.shape[-1] // attn.n_head)
            sums[layer] = sums.get(layer, 0) + flat.sum(0)
            counts[layer] = counts.get(layer, 0) + flat.shape[0]
        return accumulate

    for layer, block in enumerate(model.blocks):
        handles.append(block.attn.proj_out.register_forward_pre_hook(hook_for(layer, block.attn)))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    if len(sums) != len(model.blocks):
        raise ValueError("run() made no forward pass through every block: no head means")
    return [(sums[layer] / counts[layer]).float() for layer in range(len(model.blocks))]


def ablation_costs(model, evaluate, means=None) -> tuple[float, np.ndarray]:
    """(loss of the whole model, [layers, heads] loss with that head removed minus it).

    `evaluate()` returns the validation loss of `model` as it stands. Heads are zeroed, or
    replaced by their means when `means` (head_means) is given."""
    base = evaluate()
    costs = np.zeros((len(model.blocks), model.blocks[0].attn.n_head))
    for layer in range(costs.shape[0]):
        for head in range(costs.shape[1]):
            value = None if means is None else means[layer][head]
            with replace_head(model, layer, head, value):
                costs[layer, head] = evaluate() - base
    return base, costs


def rank_correlation(strengths, costs) -> tuple[float | None, float | None]:
    """Spearman's rho and its two-sided p-value; None when undefined (< 3 heads or a constant)."""
    x, y = np.ravel(strengths), np.ravel(costs)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None
    res = stats.spearmanr(x, y)
    rho, p = float(res.statistic), float(res.pvalue)
    return (rho if math.isfinite(rho) else None), (p if math.isfinite(p) else None)


def cost_ranks(costs) -> np.ndarray:
    """Rank of each head's removal cost, 1 = cheapest (ties share the lowest rank), same shape."""
    flat = np.ravel(costs)
    return (stats.rankdata(flat, method="min").astype(int)).reshape(np.shape(costs))


def weakest_head_summary(strengths, costs, threshold: float) -> dict:
    """The claim's numbers for one model: rho, the weakest bank's cost rank, the flagged heads."""
    strengths, costs = np.asarray(strengths), np.asarray(costs)
    ranks = cost_ranks(costs)
    rho, p = rank_correlation(strengths, costs)
    weakest = np.unravel_index(int(np.argmin(strengths)), strengths.shape)
    flagged = [tuple(int(i) for i in ix) for ix in zip(*np.nonzero(strengths < threshold))]
    k = len(flagged)
    return {
        "spearman_rho": rho, "spearman_p": p, "n_heads": int(strengths.size),
        "weakest": {"layer": int(weakest[0]) + 1, "head": int(weakest[1]) + 1,
                    "strength": float(strengths[weakest]), "cost": float(costs[weakest]),
                    "cost_rank": int(ranks[weakest])},
        "weakest_is_cheapest": bool(ranks[weakest] == 1),
        "threshold": threshold,
        "flagged": [{"layer": l + 1, "head": h + 1, "strength": float(strengths[l, h]),
                     "cost": float(costs[l, h]), "cost_rank": int(ranks[l, h])} for l, h in flagged],
        # flagged heads among the k cheapest (k = how many are flagged); None when none is flagged
        "flagged_among_cheapest": (sum(int(ranks[l, h]) <= k for l, h in flagged) / k) if k else None,
    }
