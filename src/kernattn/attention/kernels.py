"""Nadaraya-Watson attention with a pluggable kernel (kr-blog, "Swapping the kernel").

K(q, k) on projected queries and keys (d = head dim):
    exp_dot   exp(q.k / sqrt(d))                 (= softmax attention)
    gaussian  exp(-||q - k||^2 / (2 d))
    yat       (q.k)^2 / (||q - k||^2 + eps)
    linear    q.k                                 (signed: rows can have negative weights and a
                                                   normaliser that crosses zero)
Fast paths: exp_dot through SDPA; gaussian through SDPA with the augmented q/k of the GKA
identity; linear by associativity (see linear.py); yat has no factorisation, so its fast
path is the explicit kernel evaluated a block of queries at a time and recomputed in
backward (O(block N) memory).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import reference
from .base import KernelAttention, MixingFlops, sdpa_flops
from .fused import attend
from .gka import padded_width
from .linear import feature_attention, feature_attention_flops
from .options import KERNELS, NWOptions
from .registry import register


def sqdist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact squared distances [..., Na, Nb] (differences, not the expansion)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").pow(2)


def kernel_matrix(name: str, q: torch.Tensor, k: torch.Tensor, yat_eps: float = 1e-3) -> torch.Tensor:
    """The explicit kernel K[..., i, j] = K(q_i, k_j) of kr-blog."""
    d = q.shape[-1]
    if name == "exp_dot":
        return torch.exp(q @ k.transpose(-1, -2) / math.sqrt(d))
    if name == "gaussian":
        return torch.exp(-sqdist(q, k) / (2.0 * d))
    if name == "yat":
        return (q @ k.transpose(-1, -2)) ** 2 / (sqdist(q, k) + yat_eps)
    if name == "linear":
        return q @ k.transpose(-1, -2)
    raise ValueError(f"unknown kernel {name!r}; valid: {', '.join(KERNELS)}")


@register("nw", NWOptions)
class NWAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)

    def mixing_flops(self, n, keys):
        name, d, h = self.options.kernel, self.d_head, self.n_head
        if name == "exp_dot":
            return sdpa_flops(n, keys, h, d, d)
        if name == "gaussian":
            return sdpa_flops(n, keys, h, d, d, width=padded_width(d))
        if name == "linear":
            return feature_attention_flops(n, d, d, h, self.causal)
        # yat: q k^T and W v against every key (the window only masks); backward recomputes
        # q k^T only (checkpointing stops once the tensors backward needs are rebuilt).
        fwd = 2.0 * n * n * h * (d + d)
        return MixingFlops(fwd, 2 * fwd + fwd / 2)
    def prepare(self, x):
        q, k, v = self.split_qkv(x)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def fast(self, p):
        name, d = self.options.kernel, self.d_head
        if name == "exp_dot":
            return attend(p.q, p.k, p.v, causal=self.causal, window=self.window)
        if name == "gaussian":
            k = p.k - p.k[:, :, :1].detach()  # translation invariance, as in gka.py
            q = p.q - p.k[:, :, :1].detach()
            q_aug = torch.cat((q / d, torch.ones_like(q[..., :1])), dim=-1)
            k_aug = torch.cat((k, -0.5 * k.pow(2).sum(-1, keepdim=True) / d), dim=-1)
            width = padded_width(d)
            pad = lambda t: F.pad(t, (0, width - t.shape[-1]))  # noqa: E731
            out = attend(pad(q_aug), pad(k_aug), pad(p.v), causal=self.causal, window=self.window, scale=1.0)
            return out[..., :d]
        if name == "linear":
            return feature_attention(p.q, p.k, p.v, self.causal)
        return self._blocked(p)

    def _blocked(self, p):
        """Explicit kernel a block of queries at a time, each block recomputed in backward
        (activation checkpointing), so live memory is O(block x N), not O(N^2)."""
        allowed = self.allowed(p.n, p.q.device)
        outs = []
        for s in range(0, p.n, self.options.block):
            e = min(s + self.options.block, p.n)
            outs.append(checkpoint(self._block, p.q[..., s:e, :], p.k, p.v, allowed[s:e], use_reentrant=False))
        return torch.cat(outs, dim=-2)

    def _block(self, q, k, v, allowed):
        return reference.nadaraya_watson(kernel_matrix(self.options.kernel, q, k, self.options.yat_eps), v, allowed)[0]

    def float64_tolerance(self):
        # the signed linear kernel divides by a sum that can approach zero: relative to its outputs
        return (1e-7, 1e-8) if self.options.kernel == "linear" else super().float64_tolerance()

    def precision_bounds(self):
        # the signed linear kernel's denominator, a sum of both signs, comes near 0 for some
        # queries: bfloat16's 8-bit mantissa is amplified there (0.24 relative RMS at the
        # conformance size, d_head 8, N 64). A stated weakness of the kernel, not round-off.
        return (1e-4, 0.5) if self.options.kernel == "linear" else super().precision_bounds()

    def kernel(self, p, allowed):
        if self.options.kernel == "exp_dot":
            logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
            return reference.exp_kernel(logits, allowed)
        return kernel_matrix(self.options.kernel, p.q, p.k, self.options.yat_eps)
