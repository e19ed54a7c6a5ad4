"""Fused attention calls shared by every softmax-shaped variant.

`attend(q, k, v, ...)` computes softmax(q k^T * scale + bias(lag)) v under a causal and/or
sliding-window mask, where bias is an optional per-head lag table [H, 2n - 1] (index
lag + n - 1, lag = i - j). It picks, per call:

- no bias, no window: `scaled_dot_product_attention(is_causal=...)` (flash on CPU and CUDA);
- CUDA with a bias or a window: FlexAttention, `score_mod` reading the table and a block mask
  that skips the blocks the causal/window mask removes (compiled once per shape);
- CPU with a bias or a window: `_ChunkedLagAttention`, SDPA's CPU flash kernel one query
  block at a time over the keys the mask leaves that block, the bias a zero-copy Toeplitz
  view of the table, and a blocked backward that also yields the table's gradient
  (FlexAttention has no backward on CPU, and SDPA with a float mask that needs grad falls
  back to its math backend: O(B H n^2) memory, about 5x the time at n = 2048);
- `backend="sdpa"`: SDPA with the dense [H, n, n] float mask, the plain form (any device).

A lag table is never rounded to bf16/fp16: FlexAttention's score_mod adds it in float32
(`lag_score_mod`), and the SDPA paths, which take the bias in q's dtype, run in float32 when
q is bf16/fp16 and there is a table (a GPA bank of size ~64 would lose its lag-to-lag steps).
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
    if use_flex and backend == "auto" and q.dtype == torch.bfloat16 and n % 128 and torch.is_grad_enabled():
        # FlexAttention's bf16 backward with a block mask and a score_mod gave NaNs when n is
        # not a multiple of 128 (pytorch issue 153799): take the dense-mask path instead.
        use_flex = False
    if use_flex:
        return _flex(q, k, v, causal, window, scale, bias_table)
    if bias_table is not None and q.dtype in (torch.bfloat16, torch.float16):
        # The SDPA paths take the bias in q's dtype, and a bf16 lag table loses a GPA bank's
        # lag-to-lag differences (see lag_score_mod): run these fallbacks in float32.
        out = attend(q.float(), k.float(), v.float(), causal=causal, window=window, scale=scale,
                     bias_table=bias_table.float(), backend=backend)
        return out.to(q.dtype)
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
# Queries per block. Small blocks keep a block's [B, H, block, keys] temporaries in L2 and let
# the causal mask skip more keys (block i reads keys < its end): at the small char shape
# (B 32, H 4, n 128, d 16) a training step of the GPA rows took 83 ms at 32 against 114 ms at
# 128 (best of 12, one process, 2026-11-27; RoPE's flash path 77 ms); at n = 1024-2048 the two
# time the same (per-block overhead stays small next to the block's matmuls).
QUERY_BLOCK = 32


def _blocks(n: int, causal: bool, window: int | None, block: int):
    """Query blocks [i0, i1) with the key range [k0, k1) that the mask leaves them."""
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        k0 = 0 if window is None else max(0, i0 - window + 1)
        k1 = i1 if causal else (n if window is None else min(n, i1 + window - 1))
        yield i0, i1, k0, k1


def _flipped_lag_source(table, n, causal, window, dtype, device):
    """u [H, 2n - 1] with u[:, m] = bias at lag (n - 1 - m), -inf at lags the mask forbids.

    A lag bias is a Toeplitz matrix. With the queries of a block taken in reverse order
    (row a <-> query i1 - 1 - a), the block's bias is u[:, n - i1 + k0 + a + j]: a strided
    view of u with unit strides on both axes, so no [H, n, n] index or gather is ever built.
    """
    lag = torch.arange(n - 1, -n, -1, device=device)  # lag of u's column m
    u = table.to(dtype).flip(-1) if table is not None else torch.zeros(1, 2 * n - 1, dtype=dtype, device=device)
    forbid = torch.zeros_like(lag, dtype=torch.bool)
    if causal:
        forbid |= lag < 0
    if window is not None:
        forbid |= lag.abs() >= window
    return u.masked_fill(forbid, float("-inf")).contiguous()


def _block_bias(u, n, i0, i1, k0, k1):
    """[1, H, i1 - i0, k1 - k0] view: bias of the block's queries (reversed) against keys k0..k1."""
    return u.as_strided((1, u.shape[0], i1 - i0, k1 - k0), (0, u.stride(0), 1, 1),
                        u.storage_offset() + n - i1 + k0)


def _anti_diagonal_sums(x):
    """x [H, R, C] -> [H, R + C - 1]: entry c sums x[:, a, j] over a + j = c (pad-and-skew view)."""
    h, r, c = x.shape
    width = c + r
    skew = torch.nn.functional.pad(x, (0, r)).reshape(h, r * width)[:, : r * (width - 1)]
    return skew.reshape(h, r, width - 1).sum(1)


class _ChunkedLagAttention(torch.autograd.Function):
    """softmax(q k^T * scale + table[lag]) v on CPU, one query block at a time.

    Forward: SDPA's CPU flash kernel per block over only the keys the causal/window mask
    leaves that block (a dense-mask call cannot skip masked blocks), with the block's bias a
    zero-copy view of the lag table (see `_flipped_lag_source`). Backward: per block, dS =
    P * (dP - rowsum(dO * O)) gives dq, dk, dv and, summed over the batch and along the
    block's diagonals, the table's gradient; memory O(B H block n), never O(B H n^2).
    Queries, outputs and their gradients are handled in reversed order throughout.
    """

    @staticmethod
    def forward(ctx, q, k, v, table, causal, window, scale):
        n = q.shape[-2]
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        u = _flipped_lag_source(table, n, causal, window, q.dtype, q.device)
        q_rev = q.flip(-2)
        out_rev = q.new_empty(*q.shape[:-1], v.shape[-1])
        # The kernel's logsumexp is at least float32 (float32 for bf16 inputs, float64 for float64).
        lse_rev = q.new_empty(q.shape[:-1], dtype=torch.promote_types(q.dtype, torch.float32))
        for i0, i1, k0, k1 in _blocks(n, causal, window, QUERY_BLOCK):
            r0, r1 = n - i1, n - i0
            o, l = _CPU_FLASH(q_rev[..., r0:r1, :], k[..., k0:k1, :], v[..., k0:k1, :], 0.0, False,
                              attn_mask=_block_bias(u, n, i0, i1, k0, k1), scale=scale)
            out_rev[..., r0:r1, :] = o
            lse_rev[..., r0:r1] = l
        ctx.save_for_backward(q_rev, k, v, table, u, out_rev, lse_rev)
        ctx.args = (causal, window, scale)
        return out_rev.flip(-2)

    @staticmethod
    def backward(ctx, dout):
        q_rev, k, v, table, u, out_rev, lse_rev = ctx.saved_tensors
        causal, window, scale = ctx.args
        n = q_rev.shape[-2]
        dout_rev = dout.flip(-2).contiguous()
        dq_rev, dk, dv = torch.zeros_like(q_rev), torch.zeros_like(k), torch.zeros_like(v)
        want_table = table is not None and ctx.needs_input_grad[3]
        du = torch.zeros_like(u) if want_table else None
        if want_table:
            delta = (dout_rev * out_rev).sum(-1, keepdim=True)
            qs_aug = torch.cat((q_rev * scale, -lse_rev[..., None].to(q_rev.dtype)), dim=-1)
            k_aug = torch.cat((k, torch.ones_like(k[..., :1])), dim=-1)
            do_aug = torch.cat((dout_rev, -delta), dim=-1)
            v_aug = torch.cat((v, torch.ones_like(v[..., :1])), dim=-1)
        for i0, i1, k0, k1 in _blocks(n, causal, window, QUERY_BLOCK):
            r0, r1 = n - i1, n - i0
            qb, kb, vb, dob = q_rev[..., r0:r1, :], k[..., k0:k1, :], v[..., k0:k1, :], dout_rev[..., r0:r1, :]
            bias = _block_bias(u, n, i0, i1, k0, k1)
            if not want_table:
                # No table gradient: SDPA's own flash backward for the block.
                dqb, dkb, dvb = _CPU_FLASH_BWD(dob, qb, kb, vb, out_rev[..., r0:r1, :], lse_rev[..., r0:r1],
                                               0.0, False, attn_mask=bias, scale=scale)
                dq_rev[..., r0:r1, :] = dqb
                dk[..., k0:k1, :] += dkb
                dv[..., k0:k1, :] += dvb
                continue
            # P = exp(S + bias - lse) and dS = P * (dP - delta), with -lse and -delta folded
            # into the matmuls as one extra column: two elementwise passes fewer per block.
            p = torch.matmul(qs_aug[..., r0:r1, :], k_aug[..., k0:k1, :].transpose(-1, -2))
            p = p.add_(bias).exp_()
            dv[..., k0:k1, :] += p.transpose(-1, -2) @ dob
            ds = torch.matmul(do_aug[..., r0:r1, :], v_aug[..., k0:k1, :].transpose(-1, -2)).mul_(p)
            dq_rev[..., r0:r1, :] = (ds @ kb).mul_(scale)
            dk[..., k0:k1, :] += (ds.transpose(-1, -2) @ qb).mul_(scale)
            base = n - i1 + k0
            du[:, base : base + (i1 - i0) + (k1 - k0) - 1] += _anti_diagonal_sums(ds.sum(0))
        dtable = du.flip(-1).to(table.dtype) if want_table else None
        return dq_rev.flip(-2), dk, dv, dtable, None, None, None


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


def lag_score_mod(bias_table: torch.Tensor, n: int, q_dtype: torch.dtype = torch.float32):
    """FlexAttention score_mod adding table[h, lag + n - 1] to the score, in at least float32.

    The table stays float32 even under bf16 autocast or bf16 inputs: a GPA bank reaches
    magnitudes of ~64 (M = 64, add), where bf16 steps are 0.25-0.5 logits, about the size of
    the lag-to-lag differences the bank encodes. The score is promoted too, so the sum is
    formed in float32 (the fused CUDA kernel keeps scores in float32 anyway); float64 inputs
    (the CPU equivalence tests) stay float64."""
    work = torch.promote_types(torch.promote_types(bias_table.dtype, q_dtype), torch.float32)
    table = bias_table.to(work)
    offset = n - 1

    def score_mod(score, b, h, q_idx, kv_idx):
        return score.to(work) + table[h, q_idx - kv_idx + offset]

    return score_mod


def _flex(q, k, v, causal, window, scale, bias_table):
    from torch.nn.attention.flex_attention import flex_attention

    n = q.shape[-2]
    block_mask = _block_mask(n, causal, window, str(q.device)) if (causal or window is not None) else None
    score_mod = None
    if bias_table is not None:
        score_mod = lag_score_mod(bias_table, n, q.dtype)

    # Compiled on CUDA (eager flex materialises the scores); eager elsewhere, where it serves
    # to check the score_mod/block-mask logic against the reference (forward only on CPU).
    fn = _compiled_flex() if q.is_cuda else flex_attention
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
