"""The explicit, slow truth: Nadaraya-Watson regression written out.

kernel matrix K[b, h, i, j] -> mask (K = 0 where j is not allowed for i) -> normalise rows
-> weighted sum of the values. Every fast path in this package is tested against these
few lines, in float64, forward and backward.
"""

from __future__ import annotations

import torch


def allowed_mask(n: int, causal: bool, window: int | None, device=None) -> torch.Tensor:
    """Boolean [n, n]: True where query i may look at key j.

    causal: j <= i.  window W: |i - j| < W (with causal: i - W < j <= i, as gka-paper eq. 7).
    The diagonal is always allowed, so no row is ever empty.
    """
    lag = lag_grid(n, device)
    ok = torch.ones(n, n, dtype=torch.bool, device=device)
    if causal:
        ok &= lag >= 0
    if window is not None:
        ok &= lag.abs() < window
    return ok


def lag_grid(n: int, device=None) -> torch.Tensor:
    """Long [n, n] with lag[i, j] = i - j (query position minus key position)."""
    pos = torch.arange(n, device=device)
    return pos[:, None] - pos[None, :]


def exp_kernel(log_kernel: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """K = exp(log_kernel), scaled per row by exp(-max over allowed entries).

    The per-row factor cancels in the normalisation; it only keeps exp() finite.
    """
    row_max = log_kernel.masked_fill(~allowed, float("-inf")).amax(-1, keepdim=True)
    return torch.exp(log_kernel - row_max.detach())


def nadaraya_watson(kernel: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor):
    """Eq. (1) of gpa-short/gpa-long: y_i = sum_j K_ij y_j / sum_j K_ij over allowed j.

    kernel: [B, H, N, N] (any sign: the signed linear kernel is not a convex mixture);
    values: [B, H, N, dv]; allowed: [N, N]. Returns (outputs [B, H, N, dv], weights).
    """
    masked = kernel.masked_fill(~allowed, 0.0)
    weights = masked / masked.sum(-1, keepdim=True)
    return weights @ values, weights
