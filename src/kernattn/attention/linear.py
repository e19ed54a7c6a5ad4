"""Attention through feature maps: y_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j).

Used by FAVOR+ (positive random features, Choromanski et al. 2021) and by the signed linear
kernel of seed 002 (phi = identity). By associativity the cost is O(N m dv) instead of
O(N^2): bidirectional as phi(Q) (phi(K)^T V); causal in chunks, a running state
sum_j phi(k_j) v_j^T carried across chunks and an exact masked product inside each chunk.
A ones column appended to V gives numerator and denominator in one pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from torch import nn

from .base import KernelAttention
from .registry import positive, register


def feature_attention(phi_q, phi_k, v, causal: bool, window: int | None = None, chunk: int = 64):
    """phi_q, phi_k: [B, H, N, m]; v: [B, H, N, dv] -> [B, H, N, dv] (normalised)."""
    if window is not None:
        raise NotImplementedError("feature-map attention has no sliding window; use window=None")
    v1 = torch.cat((v, torch.ones_like(v[..., :1])), dim=-1)
    if not causal:
        out = phi_q @ (phi_k.transpose(-1, -2) @ v1)
    else:
        n = v.shape[-2]
        tri = torch.ones(chunk, chunk, dtype=torch.bool, device=v.device).tril()
        state = phi_q.new_zeros(*phi_q.shape[:-2], phi_q.shape[-1], v1.shape[-1])
        outs = []
        for s in range(0, n, chunk):
            q, k, w = phi_q[..., s : s + chunk, :], phi_k[..., s : s + chunk, :], v1[..., s : s + chunk, :]
            c = q.shape[-2]
            local = (q @ k.transpose(-1, -2)).masked_fill(~tri[:c, :c], 0.0)
            outs.append(q @ state + local @ w)
            state = state + k.transpose(-1, -2) @ w
        out = torch.cat(outs, dim=-2)
    return out[..., :-1] / out[..., -1:]


def positive_random_features(x: torch.Tensor, w: torch.Tensor, stabiliser=None) -> torch.Tensor:
    """FAVOR+ map phi(x)_i = exp(w_i . x - ||x||^2 / 2) / sqrt(m), so E[phi(q).phi(k)] = exp(q.k).

    x: [..., N, d]; w: [..., m, d]. `stabiliser` (broadcastable to [..., N, m]) is subtracted
    in the exponent: a per-query or a global constant that cancels under normalisation.
    """
    proj = x @ w.transpose(-1, -2) - 0.5 * x.pow(2).sum(-1, keepdim=True)
    if stabiliser is not None:
        proj = proj - stabiliser
    return torch.exp(proj) / math.sqrt(w.shape[-2])


@dataclass(frozen=True)
class FavorOptions:
    n_features: int = positive(256, "number of positive random features m")
    feature_seed: int = 0
    bias: bool = False
    chunk: int = field(default=64, metadata={"check": lambda v: None if v > 0 else "must be > 0"})


@register("favor", FavorOptions, "FAVOR+ linear attention with m positive random features (approximates softmax)")
class FavorAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        if window is not None:
            from .registry import AttentionConfigError

            raise AttentionConfigError("favor has no sliding-window form; use window=None")
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        gen = torch.Generator().manual_seed(options.feature_seed)
        self.register_buffer("features", torch.randn(n_head, options.n_features, self.d_head, generator=gen))

    def redraw_features(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.features.copy_(torch.randn(self.features.shape, generator=gen))

    def prepare(self, x):
        q, k, v = (self.split_heads(t) for t in self.proj_in(x).chunk(3, dim=-1))
        # q.k / sqrt(d) = (q d^-1/4) . (k d^-1/4)
        scale = self.d_head ** -0.25
        w = self.features.to(q.dtype)[None]
        q, k = q * scale, k * scale
        # Stabilisers: the per-query row max for q, one max per (batch, head) for k; both
        # are constants of the normalised row and cancel.
        wq = (q @ w.transpose(-1, -2) - 0.5 * q.pow(2).sum(-1, keepdim=True)).amax(-1, keepdim=True)
        wk = (k @ w.transpose(-1, -2) - 0.5 * k.pow(2).sum(-1, keepdim=True)).amax((-1, -2), keepdim=True)
        phi_q = positive_random_features(q, w, wq.detach())
        phi_k = positive_random_features(k, w, wk.detach())
        return SimpleNamespace(phi_q=phi_q, phi_k=phi_k, v=v, n=x.shape[1])

    def fast(self, p):
        return feature_attention(p.phi_q, p.phi_k, p.v, self.causal, chunk=self.options.chunk)

    def kernel(self, p, allowed):
        return p.phi_q @ p.phi_k.transpose(-1, -2)
