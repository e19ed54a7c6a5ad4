"""Sigmoid attention (Ramapuram et al. 2024, "Theory, analysis, and best practices for sigmoid
self-attention"): each weight is a sigmoid of its own logit, nothing is normalised over the keys,

    y_i = sum_j sigmoid(q_i . k_j / sqrt(d) + b_i) v_j,        b_i = -log(n_i),

where n_i is the number of keys query i sees (the paper's b = -log(sequence length): the same for
bidirectional attention without a window, and for causal attention the count each query has,
which keeps a sequence's outputs independent of the padding after it). The bias starts the
weights' sum near 1, as softmax's is. `normalised = False`: the reference sums the kernel
against the values as it is.

Fast path: no fused kernel computes it here (the paper's FlashSigmoid is CUDA code of its own),
so the explicit weights are formed one block of queries at a time and recomputed in backward
(activation checkpointing): O(block x N) live memory. The reference writes the same sigmoid
another way, exp(-log(1 + n_i exp(-s_ij))), so the two paths share no expression.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .base import KernelAttention, MixingFlops
from .options import SigmoidOptions
from .positions import Rope
from .registry import register


def log_keys_seen(allowed: torch.Tensor, dtype) -> torch.Tensor:
    """[n, 1]: log of the number of keys each query may see."""
    return allowed.sum(-1, keepdim=True).to(dtype).log()


@register("sigmoid", SigmoidOptions)
class SigmoidAttention(KernelAttention):
    normalised = False
    block = 256  # queries per block of the fast path (tests shrink it to cross block edges)

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.rope = Rope(self.d_head, options.rope_base) if options.position == "rope" else None

    def prepare(self, x):
        q, k, v = self.projected_qkv(x)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def mixing_flops(self, n, keys):
        # Every block multiplies against all n keys (the mask only zeroes weights); backward
        # recomputes q k^T of each block, then the four matmuls of the two products.
        fwd = 2.0 * n * n * self.n_head * (self.d_head + self.d_head)
        return MixingFlops(fwd, 2 * fwd + fwd / 2)

    def fast(self, p):
        allowed = self.allowed(p.n, p.q.device)
        outs = []
        for s in range(0, p.n, self.block):
            e = min(s + self.block, p.n)
            outs.append(checkpoint(self._block, p.q[..., s:e, :], p.k, p.v, allowed[s:e], use_reentrant=False))
        return torch.cat(outs, dim=-2)

    def _block(self, q, k, v, allowed):
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.d_head) - log_keys_seen(allowed, q.dtype)
        return torch.sigmoid(logits).masked_fill(~allowed, 0.0) @ v

    def kernel(self, p, allowed):
        logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
        # sigmoid(s - log n) = 1 / (1 + n e^-s), its log a logaddexp that never overflows
        return torch.exp(-torch.logaddexp(torch.zeros_like(logits), log_keys_seen(allowed, logits.dtype) - logits))
