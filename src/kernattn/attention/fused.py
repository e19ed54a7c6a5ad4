"""Fused attention calls shared by every softmax-shaped variant.

`attend(q, k, v, ...)` computes softmax(q k^T * scale + bias(lag)) v under a causal and/or
sliding-window mask, where bias is an optional per-head lag table [H, 2n - 1] (index
lag + n - 1, lag = i - j). It picks, per call:

- no bias, no window: `scaled_dot_product_attention(is_causal=...)` (flash on CPU and CUDA);
- CUDA with a bias or a window: FlexAttention, `score_mod` reading the table and a block mask
  that skips the blocks the causal/window mask removes (compiled once per process);
- otherwise (CPU): SDPA with the bias gathered into an [H, n, n] float mask, -inf where masked.
  SDPA's flash kernel takes a float mask that needs no gradient; a learnable table sends SDPA
  to its math backend, whose O(B H n^2) memory is the price of the bias gradient on CPU
  (FlexAttention has no backward on CPU).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .reference import allowed_mask

BACKENDS = ("auto", "sdpa", "flex")


def gather_lag_table(table: torch.Tensor, n: int) -> torch.Tensor:
    """[H, 2n - 1] lag table -> dense [H, n, n] bias with bias[h, i, j] = table[h, i - j + n - 1]."""
    idx = torch.arange(n, device=table.device)
    return table[:, idx[:, None] - idx[None, :] + n - 1]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    window: int | None = None,
    scale: float | None = None,
    bias_table: torch.Tensor | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """q, k: [B, H, n, d]; v: [B, H, n, dv] -> [B, H, n, dv]."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    n = q.shape[-2]
    if bias_table is None and window is None and backend != "flex":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    use_flex = backend == "flex" or (backend == "auto" and q.is_cuda)
    if use_flex:
        return _flex(q, k, v, causal, window, scale, bias_table)
    mask = torch.zeros((), dtype=q.dtype, device=q.device)
    if bias_table is not None:
        mask = gather_lag_table(bias_table.to(q.dtype), n)
    if causal or window is not None:
        keep = allowed_mask(n, causal, window, q.device)
        mask = torch.where(keep, mask, torch.tensor(float("-inf"), dtype=q.dtype, device=q.device))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ----------------------------------------------------------------------------- FlexAttention
@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=64)
def _block_mask(n: int, causal: bool, window: int | None, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q_idx, kv_idx):
        ok = q_idx >= 0  # all-True of the right shape
        if causal:
            ok = ok & (q_idx >= kv_idx)
        if window is not None:
            ok = ok & ((q_idx - kv_idx).abs() < window)
        return ok

    return create_block_mask(mask_mod, None, None, n, n, device=device)


def _flex(q, k, v, causal, window, scale, bias_table):
    from torch.nn.attention.flex_attention import flex_attention

    n = q.shape[-2]
    block_mask = _block_mask(n, causal, window, str(q.device)) if (causal or window is not None) else None
    score_mod = None
    if bias_table is not None:
        table = bias_table.to(q.dtype)
        offset = n - 1

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx - kv_idx + offset]

    # Compiled on CUDA (eager flex materialises the scores); eager elsewhere, where it serves
    # to check the score_mod/block-mask logic against the reference (forward only on CPU).
    fn = _compiled_flex() if q.is_cuda else flex_attention
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
