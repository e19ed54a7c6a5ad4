"""Differential attention (Ye et al. 2024, "Differential Transformer", eqs. 1-3): each head
splits its query and key into halves and subtracts one softmax map from the other,

    A = softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)),   d = head dim / 2,
    lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init,
    head = (1 - lambda_init) RMSNorm(A V),

with lq1, lk1, lq2, lk2 learned vectors of dimension d shared by the layer's heads (the paper's
reparametrisation; drawn from N(0, 0.1^2) as there) and lambda_init a constant option (the paper
sets it per layer, 0.8 - 0.6 exp(-0.3 (l - 1)); a module here does not know its depth). The
values keep the full head width. Heads here are the paper's heads: its head of width 2d is one
of ours. The weights of a row sum to 1 - lambda and can be negative: `normalised = False`.

Fast path: the two maps are two fused softmax calls (flash attention; the window and the
causal mask unchanged; q and k zero-padded to V's width, counted as padding FLOPs),
subtracted after their products with V. The reference normalises the
two explicit kernels, subtracts them and sums against V.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from . import reference
from .base import KernelAttention, MixingFlops, sdpa_flops
from .fused import attend
from .options import DifferentialOptions
from .positions import Rope
from .registry import AttentionConfigError, register


@register("differential", DifferentialOptions)
class DifferentialAttention(KernelAttention):
    normalised = False

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        rope = options.position == "rope"
        if self.d_head % (4 if rope else 2):
            raise AttentionConfigError(
                f"attention 'differential' splits each head's q and k in two halves{' and rotates each' if rope else ''}: "
                f"the head dim {self.d_head} must be a multiple of {4 if rope else 2}")
        half = self.d_head // 2
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.rope = Rope(half, options.rope_base) if rope else None
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(0.1 * torch.randn(half)) for _ in range(4))
        self.head_norm = nn.RMSNorm(self.d_head, eps=1e-5)

    def lam(self) -> torch.Tensor:
        """lambda, a scalar (float32 at least: it multiplies a whole map)."""
        work = torch.promote_types(self.lambda_q1.dtype, torch.float32)
        dot = lambda a, b: (a.to(work) * b.to(work)).sum()  # noqa: E731
        return (dot(self.lambda_q1, self.lambda_k1).exp() - dot(self.lambda_q2, self.lambda_k2).exp()
                + self.options.lambda_init)

    def prepare(self, x):
        q, k, v = self.split_qkv(x)
        q1, q2 = q.chunk(2, dim=-1)
        k1, k2 = k.chunk(2, dim=-1)
        if self.rope is not None:
            q1, q2, k1, k2 = (self.rope(t) for t in (q1, q2, k1, k2))
        return SimpleNamespace(q1=q1, q2=q2, k1=k1, k2=k2, v=v, n=x.shape[1], lam=self.lam())

    def mixing_flops(self, n, keys):
        one = sdpa_flops(n, keys, self.n_head, self.d_head // 2, self.d_head, width=self.d_head)
        return MixingFlops(*(2 * f for f in (one.forward, one.backward, one.padding_forward, one.padding_backward)))

    def fast(self, p):
        scale = 1.0 / math.sqrt(self.d_head // 2)
        # zero channels bring q and k to v's width (the CPU flash kernel wants one head size);
        # they add nothing to a dot product
        pad = lambda t: F.pad(t, (0, self.d_head - t.shape[-1]))  # noqa: E731
        a1 = attend(pad(p.q1), pad(p.k1), p.v, causal=self.causal, window=self.window, scale=scale)
        a2 = attend(pad(p.q2), pad(p.k2), p.v, causal=self.causal, window=self.window, scale=scale)
        return a1 - p.lam.to(a2.dtype) * a2

    def kernel(self, p, allowed):
        maps = []
        for q, k in ((p.q1, p.k1), (p.q2, p.k2)):
            w = reference.exp_kernel(q @ k.transpose(-1, -2) / math.sqrt(self.d_head // 2), allowed)
            w = w.masked_fill(~allowed, 0.0)
            maps.append(w / w.sum(-1, keepdim=True))
        return maps[0] - p.lam.to(maps[1].dtype) * maps[1]

    def finish_heads(self, heads):
        # the norm in its weight's dtype (float32 under autocast), as nanochat's norms run
        return self.head_norm(heads.to(self.head_norm.weight.dtype)).to(heads.dtype) * (1.0 - self.options.lambda_init)
