"""Relative-position machinery: RoPE (static or learned) and per-head lag-bias tables.

A lag bias depends only on lag = i - j. Every such bias (ALiBi, T5 buckets, a free lag
table, the GPA kernel banks) is computed as a table [H, 2n - 1] indexed by lag + n - 1, once
per forward pass; the fused path reads it (see fused.py) and the reference path evaluates
the same formula directly on the dense [n, n] lag grid.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def lag_index(n: int, device=None) -> torch.Tensor:
    """Lags -(n-1)..(n-1) as a float vector: entry t is lag t - (n - 1)."""
    return torch.arange(-(n - 1), n, device=device)


# ----------------------------------------------------------------------------- RoPE
class Rope(nn.Module):
    """Rotary embedding on the last dim, half-split convention, nanochat c7ba252's direction.

    Each pair (x1, x2) = (x[i], x[i + d/2]) turns by -theta = -pos x inv_freq[i]:
    (x1 cos + x2 sin, -x1 sin + x2 cos), as nanochat's apply_rotary_emb (GPT-NeoX turns by
    +theta; the two differ by a sign flip of the second half of W_Q and W_K per head, so only
    this one loads nanochat's weights). inv_freq = 1 / base^(2i/d), computed as nanochat does.
    Static: inv_freq is a buffer. Learned (gpa-short's "learned RoPE"): the same initial
    frequencies are a parameter, shared by the heads of a layer. `table_dtype` (None: the
    input's dtype) stores the cos/sin tables in that dtype before they multiply x: nanochat
    keeps them in bfloat16 (the LM sets it, lm.rope_bf16), which changes float32 results.
    """

    def __init__(self, d_head: int, base: float = 10000.0, learned: bool = False):
        super().__init__()
        if d_head % 2:
            raise ValueError(f"RoPE needs an even head dim, got {d_head}")
        inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))
        if learned:
            self.inv_freq = nn.Parameter(inv_freq)
        else:
            self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.table_dtype: torch.dtype | None = None

    def tables(self, n: int, offset: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [n, d/2] for positions offset..offset+n-1, in the dtype they multiply x."""
        # Angles in at least float32: position x frequency in bf16 would be off by whole radians.
        work = torch.promote_types(self.inv_freq.dtype, torch.float32)
        pos = torch.arange(offset, offset + n, device=device, dtype=work)
        angle = pos[:, None] * self.inv_freq.to(work)[None, :]
        cos, sin = angle.cos(), angle.sin()
        if self.table_dtype is not None:  # rounded to the stored dtype first (nanochat: bf16)
            cos, sin = cos.to(self.table_dtype), sin.to(self.table_dtype)
        return cos.to(dtype), sin.to(dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: [..., N, d] rotated by position offset..offset+N-1 (offset: cached decoding)."""
        cos, sin = self.tables(x.shape[-2], offset, x.device, x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


def normalise_qk(q: torch.Tensor, k: torch.Tensor, qk_norm: bool, gain: float):
    """nanochat's QK norm: a parameter-free RMS norm of each head's q and k (after RoPE),
    then both times `gain` (none at nanochat c7ba252, 1.2 from a825e63: the logits' scale is
    gain^2 / sqrt(d))."""
    if qk_norm:
        q, k = F.rms_norm(q, (q.shape[-1],)), F.rms_norm(k, (k.shape[-1],))
    if gain != 1.0:
        q, k = q * gain, k * gain
    return q, k


# ----------------------------------------------------------------------------- lag biases
class LagBias(nn.Module):
    """A per-head additive bias b_h(lag). Subclasses define `bias(lag)` for a lag tensor."""

    def bias(self, lag: torch.Tensor) -> torch.Tensor:
        """lag: long/float tensor of any shape -> [H, *lag.shape]."""
        raise NotImplementedError

    def table(self, n: int, device) -> torch.Tensor:
        """[H, 2n - 1]: the bias at every lag -(n-1)..n-1 (fast path)."""
        return self.bias(lag_index(n, device))

    def dense(self, lag: torch.Tensor) -> torch.Tensor:
        """[H, n, n] on the explicit lag grid (reference path)."""
        return self.bias(lag)


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The geometric slopes of ALiBi (Press et al. 2022), with its rule for non powers of 2."""

    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_head).is_integer():
        slopes = power_of_two(n_head)
    else:
        closest = 2 ** math.floor(math.log2(n_head))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_head - closest]
    return torch.tensor(slopes)


class AlibiBias(LagBias):
    """b_h(lag) = -m_h |lag|: fixed slopes, no parameters."""

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, lag):
        return -self.slopes.view(-1, *([1] * lag.dim())) * lag.abs().to(self.slopes.dtype)


def t5_bucket(lag: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's relative-position buckets (Raffel et al. 2020), written for lag = i - j.

    Half the buckets are exact small distances, the rest log-spaced up to max_distance.
    Bidirectional: keys after the query (lag < 0) get their own half of the buckets.
    """
    lag = lag.long()
    bucket = torch.zeros_like(lag)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (lag < 0).long() * num_buckets
        dist = lag.abs()
    else:
        dist = lag.clamp(min=0)
    exact = num_buckets // 2
    log_ratio = torch.log(dist.float().clamp(min=1) / exact) / math.log(max_distance / exact)
    large = (exact + (log_ratio * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(dist < exact, dist, large)


class T5Bias(LagBias):
    """A learned scalar per head per T5 bucket (zero-initialised)."""

    def __init__(self, n_head: int, causal: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.bidirectional = not causal
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.weight = nn.Parameter(torch.zeros(n_head, num_buckets))

    def bias(self, lag):
        idx = t5_bucket(lag, self.bidirectional, self.num_buckets, self.max_distance)
        return self.weight[:, idx]


class FreeLagBias(LagBias):
    """One learned bias per head per lag (the GPA reviewers' baseline), zero-initialised.

    Causal attention only sees lags 0..max_len-1, so it holds max_len entries per head;
    bidirectional attention holds 2 max_len - 1.
    """

    def __init__(self, n_head: int, causal: bool, max_len: int):
        super().__init__()
        self.causal, self.max_len = causal, max_len
        self.weight = nn.Parameter(torch.zeros(n_head, max_len if causal else 2 * max_len - 1))

    def bias(self, lag):
        if int(lag.abs().max()) >= self.max_len:
            raise ValueError(
                f"lag_table holds lags below max_len={self.max_len}; the sequence needs "
                f"{int(lag.abs().max()) + 1}: raise the option max_len"
            )
        # Causal: negative lags are masked anyway; clamp them onto a valid entry.
        idx = lag.clamp(min=0) if self.causal else lag + self.max_len - 1
        return self.weight[:, idx.long()]


class KerpleBias(LagBias):
    """KERPLE (Chi et al. 2022, eqs. for the log and power kernels): a conditionally
    positive-definite kernel of the distance |lag|, shifted into a logit bias, per head:
        log    b_h(lag) = -r1 log(1 + r2 |lag|)        r1, r2 > 0
        power  b_h(lag) = -r1 |lag|^r2                 r1 > 0, 0 < r2 <= 2
    The constraints hold under any gradient step by construction: r1 = exp(log_r1), and r2 =
    exp(raw) (log) or 2 sigmoid(raw) (power; the open end r2 = 2 is only approached). Both start
    at r1 = r2 = 1 (the paper draws them at random; a fixed start keeps seeds comparable)."""

    def __init__(self, n_head: int, form: str):
        super().__init__()
        if form not in ("log", "power"):
            raise ValueError(f"KERPLE form must be log or power, got {form!r}")
        self.power = form == "power"
        self.log_r1 = nn.Parameter(torch.zeros(n_head))
        self.r2_raw = nn.Parameter(torch.zeros(n_head))

    def bias(self, lag):
        work = torch.promote_types(self.log_r1.dtype, torch.float32)  # a bf16 bias would lose lag steps
        dist = lag.abs().to(work)
        shape = (-1, *([1] * lag.dim()))
        r1 = self.log_r1.to(work).exp().view(shape)
        if self.power:
            r2 = 2 * torch.sigmoid(self.r2_raw.to(work)).view(shape)
            # 0^r2 taken apart: pow's derivative in r2 at 0 would be 0 * log 0 = nan
            grown = torch.where(dist > 0, dist.clamp(min=1).pow(r2), torch.zeros((), dtype=work, device=dist.device))
            return -r1 * grown
        return -r1 * torch.log1p(self.r2_raw.to(work).exp().view(shape) * dist)
