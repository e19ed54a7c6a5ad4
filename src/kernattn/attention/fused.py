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
    if q.device.type == "cpu" and _CPU_FLASH is not None and backend == "auto":
        return _ChunkedLagAttention.apply(q, k, v, bias_table, causal, window, scale)
    return _dense_mask_sdpa(q, k, v, causal, window, scale, bias_table)


def _dense_mask_sdpa(q, k, v, causal, window, scale, bias_table):
    """Plain SDPA with the whole [H, n, n] float mask (any device; math backend if the table needs grad)."""
    n = q.shape[-2]
    mask = gather_lag_table(bias_table.to(q.dtype), n) if bias_table is not None else None
    if causal or window is not None:
        keep = allowed_mask(n, causal, window, q.device)
        mask = torch.zeros(n, n, dtype=q.dtype, device=q.device) if mask is None else mask
        mask = mask.masked_fill(~keep, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ----------------------------------------------------------------------------- CPU: chunked flash
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_CPU_FLASH_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
QUERY_BLOCK = 256


def _blocks(n: int, causal: bool, window: int | None, block: int):
    """Query blocks [i0, i1) with the key range [k0, k1) that the mask leaves them."""
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        k0 = 0 if window is None else max(0, i0 - window + 1)
        k1 = i1 if causal else (n if window is None else min(n, i1 + window - 1))
        yield i0, i1, k0, k1


def _block_mask_values(table, n, i0, i1, k0, k1, causal, window, dtype, device):
    """[1, H, i1-i0, k1-k0]: bias from the lag table, -inf where the mask forbids."""
    qi = torch.arange(i0, i1, device=device)[:, None]
    kj = torch.arange(k0, k1, device=device)[None, :]
    lag = qi - kj
    bias = table.to(dtype)[:, lag + n - 1] if table is not None else torch.zeros(1, *lag.shape, dtype=dtype, device=lag.device)
    keep = torch.ones_like(lag, dtype=torch.bool)
    if causal:
        keep &= lag >= 0
    if window is not None:
        keep &= lag.abs() < window
    return bias.masked_fill(~keep, float("-inf"))[None], lag + n - 1


class _ChunkedLagAttention(torch.autograd.Function):
    """softmax(q k^T * scale + table[lag]) v on CPU, one query block at a time.

    Forward: SDPA's CPU flash kernel per block, over only the keys the causal/window mask
    leaves that block (the dense-mask call cannot skip masked blocks). Backward: per block,
    dS = P * (dP - rowsum(dO * O)) gives dq, dk, dv and, summed over the batch and scattered
    by lag, the table's gradient: memory O(B H block n), never O(B H n^2).
    """

    @staticmethod
    def forward(ctx, q, k, v, table, causal, window, scale):
        n = q.shape[-2]
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        out = torch.empty_like(q[..., :1]).expand(*q.shape[:-1], v.shape[-1]).contiguous()
        lse = q.new_empty(q.shape[:-1])
        for i0, i1, k0, k1 in _blocks(n, causal, window, QUERY_BLOCK):
            mask, _ = _block_mask_values(table, n, i0, i1, k0, k1, causal, window, q.dtype, q.device)
            o, l = _CPU_FLASH(q[..., i0:i1, :], k[..., k0:k1, :], v[..., k0:k1, :], 0.0, False,
                              attn_mask=mask, scale=scale)
            out[..., i0:i1, :] = o
            lse[..., i0:i1] = l
        ctx.save_for_backward(q, k, v, table, out, lse)
        ctx.args = (causal, window, scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, table, out, lse = ctx.saved_tensors
        causal, window, scale = ctx.args
        n = q.shape[-2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dtable = torch.zeros_like(table) if table is not None and ctx.needs_input_grad[3] else None
        delta = (dout * out).sum(-1, keepdim=True)
        for i0, i1, k0, k1 in _blocks(n, causal, window, QUERY_BLOCK):
            mask, lag_idx = _block_mask_values(table, n, i0, i1, k0, k1, causal, window, q.dtype, q.device)
            qb, kb, vb, dob = q[..., i0:i1, :], k[..., k0:k1, :], v[..., k0:k1, :], dout[..., i0:i1, :]
            p = torch.exp((qb @ kb.transpose(-1, -2)) * scale + mask - lse[..., i0:i1, None])
            ds = p * (dob @ vb.transpose(-1, -2) - delta[..., i0:i1, :])
            dv[..., k0:k1, :] += p.transpose(-1, -2) @ dob
            dq[..., i0:i1, :] = (ds @ kb) * scale
            dk[..., k0:k1, :] += (ds.transpose(-1, -2) @ qb) * scale
            if dtable is not None:
                dtable.index_add_(1, lag_idx.reshape(-1), ds.sum(0).reshape(table.shape[0], -1))
        return dq, dk, dv, dtable, None, None, None


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
