"""Dot-product softmax attention with every position scheme, and the value-less ablation.

Kernel view (gpa-short eq. 2): K_ij = exp(q_i . k_j / sqrt(d) + b(i - j)), where the position
scheme either rotates q and k (RoPE, learned RoPE) or adds a per-head lag bias b (ALiBi,
T5 buckets, a free lag table, KERPLE's log or power kernel: positions.KerpleBias). `qk_norm` + `qk_gain` are nanochat's parameter-free RMS norm of
each head's rotated q and k and the gain applied after it: `softmax` with position rope and
qk_norm is nanochat's attention (qk_gain 1.0 at c7ba252, the LM's default; 1.2 from a825e63).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from . import reference
from .base import KernelAttention, sdpa_flops
from .fused import attend
from .positions import AlibiBias, FreeLagBias, KerpleBias, Rope, T5Bias, normalise_qk
from .options import SoftmaxOptions
from .registry import register


def make_position(opts, n_head: int, d_head: int, causal: bool):
    """-> (rope module or None, lag-bias module or None)."""
    pos = opts.position
    rope = Rope(d_head, opts.rope_base, learned=pos == "learned_rope") if pos in ("rope", "learned_rope") else None
    bias = None
    if pos == "alibi":
        bias = AlibiBias(n_head)
    elif pos == "t5":
        bias = T5Bias(n_head, causal, opts.t5_buckets, opts.t5_max_distance)
    elif pos == "lag_table":
        bias = FreeLagBias(n_head, causal, opts.max_len)
    elif pos in ("kerple_log", "kerple_power"):
        bias = KerpleBias(n_head, pos.removeprefix("kerple_"))
    return rope, bias


@register("softmax", SoftmaxOptions)
class SoftmaxAttention(KernelAttention):
    uses_values = True
    bias_backend = "auto"  # "sdpa" or "flex" to force a path (tests)

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        n_proj = 3 if self.uses_values else 2
        self.proj_in = nn.Linear(d_model, n_proj * d_model, bias=options.bias)
        self.rope, self.lag_bias = make_position(options, n_head, self.d_head, causal)

    def prepare(self, x):
        parts = self.proj_in(x).chunk(3 if self.uses_values else 2, dim=-1)
        q, k = self.split_heads(parts[0]), self.split_heads(parts[1])
        v = self.split_heads(parts[2]) if self.uses_values else self.split_heads(x)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        q, k = normalise_qk(q, k, self.options.qk_norm, self.options.qk_gain)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def mixing_flops(self, n, keys):
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head)

    def fast(self, p):
        table = self.lag_bias.table(p.n, p.q.device) if self.lag_bias is not None else None
        return attend(p.q, p.k, p.v, causal=self.causal, window=self.window,
                      bias_table=table, backend=self.bias_backend)

    def kernel(self, p, allowed):
        logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
        if self.lag_bias is not None:
            logits = logits + self.lag_bias.dense(reference.lag_grid(p.n, p.q.device)).to(logits.dtype)
        return reference.exp_kernel(logits, allowed)


@register("valueless", SoftmaxOptions)
class ValuelessAttention(SoftmaxAttention):
    """Values are the head slices of x itself; W_O stays (gka-paper, Table 5)."""

    uses_values = False
    has_value_projection = False
