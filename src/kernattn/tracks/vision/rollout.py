"""Attention rollout (Abnar & Zuidema 2020; gka-paper section 7.2).

Per layer: average the heads, zero the entries below the `discard_ratio` quantile of that
layer's matrix, add the residual as 0.5 A + 0.5 I (so no row is ever empty), renormalise the
rows; then chain the layers from the input up:
R = A_L ... A_2 A_1. Row 0 of R (the class token) over the patch tokens is the rollout map.
"""

from __future__ import annotations

import torch


def layer_matrix(weights: torch.Tensor, discard_ratio: float = 0.0) -> torch.Tensor:
    """[H, N, N] attention of one layer -> the row-stochastic [N, N] of that layer's rollout step."""
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), got {discard_ratio}")
    a = weights.double().mean(0)
    n = a.shape[-1]
    if discard_ratio > 0:
        a = torch.where(a < torch.quantile(a.flatten(), discard_ratio), 0.0, a)
    a = 0.5 * a + 0.5 * torch.eye(n, dtype=a.dtype, device=a.device)
    return a / a.sum(-1, keepdim=True)


def rollout(layers: list[torch.Tensor], discard_ratio: float = 0.0) -> torch.Tensor:
    """[N, N] rollout R = A_L ... A_1 of per-layer attentions [H, N, N] (input layer first)."""
    r = None
    for w in layers:
        a = layer_matrix(w, discard_ratio)
        r = a if r is None else a @ r
    return r


def cls_map(r: torch.Tensor, grid: int) -> torch.Tensor:
    """The class token's row over the patch tokens, as a [grid, grid] map."""
    return r[0, 1:].reshape(grid, grid)
