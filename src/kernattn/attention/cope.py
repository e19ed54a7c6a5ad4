"""Contextual position encoding, CoPE (Golovneva et al. 2024, eqs. 3-5): positions counted by
gates the content sets, per head,

    g_ij = sigmoid(s_ij),   p_ij = sum_{t = j..i} g_it,   s_ij = q_i . k_j / sqrt(d),
    logit_ij = s_ij + q_i . e[p_ij],

where e[p] interpolates the learned embeddings at the integers around p,
e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p], and p is clamped to
n_positions - 1. The embeddings [d, n_positions] are shared by the layer's heads and start at
zero (plain softmax attention without positions). The paper writes the logits without the
1/sqrt(d) of every variant here: the content term carries it, the gate reads that scaled
logit, and the position term is added unscaled. Causal only (the count runs from the query
back to the key). `gates(x)` returns the gates, to measure which tokens a head counts.

Fast path: a block of queries at a time, recomputed in backward (O(block x N) live memory):
q . e is computed once per integer position and the two neighbours of p interpolated (linear
in e, so the same as interpolating the embeddings), p a reversed cumulative sum. The
reference sums the gates through an explicit triangular matrix and interpolates the
embedding vectors themselves.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import reference
from .base import KernelAttention, MixingFlops
from .options import CopeOptions
from .registry import register


def gate_mass(gates: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """[H]: the share of each head's gate mass on the keys `counted` marks ([B, N] bool: the
    newline tokens, say), over every batch row and query; gates [B, H, N, N] as `gates` gives."""
    on = (gates * counted[:, None, None, :].to(gates.dtype)).sum((0, 2, 3))
    return on / gates.sum((0, 2, 3))


@register("cope", CopeOptions)
class CopeAttention(KernelAttention):
    block = 256  # queries per block of the fast path (tests shrink it to cross block edges)

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.pos_emb = nn.Parameter(torch.zeros(self.d_head, options.n_positions))

    def prepare(self, x):
        q, k, v = self.projected_qkv(x)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def scores_and_gates(self, q, k, allowed):
        """s = q . k / sqrt(d) and the gates sigmoid(s), 0 where a query may not look."""
        s = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
        return s, torch.sigmoid(s).masked_fill(~allowed, 0.0)

    @torch.no_grad()
    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """[B, H, N, N]: g_ij of every head (0 where query i may not see key j)."""
        p = self.prepare(x)
        return self.scores_and_gates(p.q, p.k, self.allowed(p.n, x.device))[1]

    def mixing_flops(self, n, keys):
        # Per block against all n keys: q k^T, q e (n_positions columns) and W v; backward
        # recomputes the first two (checkpointing stops at the weights), then 2 matmuls each.
        qk = 2.0 * n * n * self.n_head * self.d_head
        qe = 2.0 * n * self.options.n_positions * self.n_head * self.d_head
        return MixingFlops(2 * qk + qe, (qk + qe) + 2 * (qk + qe) + 2 * qk)

    def fast(self, p):
        allowed = self.allowed(p.n, p.q.device)
        outs = []
        for s in range(0, p.n, self.block):
            e = min(s + self.block, p.n)
            outs.append(checkpoint(self._block, p.q[..., s:e, :], p.k, p.v, allowed[s:e], self.pos_emb,
                                   use_reentrant=False))
        return torch.cat(outs, dim=-2)

    def _block(self, q, k, v, allowed, pos_emb):
        s, g = self.scores_and_gates(q, k, allowed)
        pos = g.flip(-1).cumsum(-1).flip(-1).clamp(max=self.options.n_positions - 1)
        lo = pos.floor()
        frac = pos - lo
        at = q @ pos_emb.to(q.dtype)  # [B, H, block, n_positions]: q . e[t] at every integer t
        lo_i = lo.long()
        hi_i = (lo_i + 1).clamp(max=self.options.n_positions - 1)
        logits = s + frac * at.gather(-1, hi_i) + (1 - frac) * at.gather(-1, lo_i)
        return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1) @ v

    def kernel(self, p, allowed):
        s, g = self.scores_and_gates(p.q, p.k, allowed)
        n = p.n
        from_j = (torch.arange(n, device=s.device)[:, None] >= torch.arange(n, device=s.device)[None, :])
        pos = (g @ from_j.to(g.dtype)).clamp(max=self.options.n_positions - 1)  # sum over t >= j of g_it
        lo = pos.floor()
        frac = (pos - lo)[..., None]
        emb = self.pos_emb.t().to(s.dtype)  # [n_positions, d]
        top = self.options.n_positions - 1
        vec = (1 - frac) * emb[lo.long()] + frac * emb[(lo.long() + 1).clamp(max=top)]  # [B, H, n, n, d]
        return reference.exp_kernel(s + (p.q[:, :, :, None, :] * vec).sum(-1), allowed)
