"""A cosine-similarity kernel, K_ij = exp(cos(q_i, k_j) / tau_h), with a learned temperature per
head: an attention of your own, as a plugin (name this file in params.yaml `plugins:`).

Its explicit kernel is what the conformance suite (`kernattn check-variant cosine`) holds the
fast path to; the fast path is softmax attention on unit-length q and k at scale 1 / tau, which
PyTorch's fused kernel computes without an N x N matrix.
"""

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from kernattn.attention.base import KernelAttention, sdpa_flops
from kernattn.attention.options import VariantOptions, positive
from kernattn.attention.reference import exp_kernel
from kernattn.attention.registry import register


@dataclass(frozen=True)
class CosineOptions(VariantOptions):
    init_tau: float = positive(0.1, "initial temperature of every head")


@register("cosine", CosineOptions, "softmax over cosine similarities, a learned temperature per head")
class CosineAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=False)
        self.log_tau = nn.Parameter(torch.full((n_head, 1, 1), math.log(options.init_tau)))

    def prepare(self, x):
        q, k, v = (self.split_heads(t) for t in self.proj_in(x).chunk(3, dim=-1))
        return SimpleNamespace(q=F.normalize(q, dim=-1), k=F.normalize(k, dim=-1), v=v, n=x.shape[1])

    def kernel(self, p, allowed):
        return exp_kernel(p.q @ p.k.transpose(-1, -2) / self.log_tau.exp(), allowed)

    def fast(self, p):
        q = p.q / self.log_tau.exp()  # the per-head scale goes into q: SDPA's scale is one number
        mask = None if self.window is None else self.allowed(p.n, q.device)
        return F.scaled_dot_product_attention(q, p.k, p.v, attn_mask=mask, scale=1.0,
                                              is_causal=self.causal and mask is None)

    def mixing_flops(self, n, keys):
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head)
