"""Attention through feature maps: y_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j).

Used by FAVOR+ (positive random features, Choromanski et al. 2021) and by the signed linear
kernel of kr-blog (phi = identity). By associativity the cost is O(N m dv) instead of
O(N^2): bidirectional as phi(Q) (phi(K)^T V); causal in chunks, a running state
sum_j phi(k_j) v_j^T carried across chunks and an exact masked product inside each chunk;
causal with a sliding window (the LM's short layers) from per-chunk states summed over the
chunks a query chunk sees whole, plus an exact masked product over the window's ragged edge.
A ones column appended to V gives numerator and denominator in one pass.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from .base import KernelAttention, MixingFlops
from .options import FavorOptions
from .registry import register


def feature_attention(phi_q, phi_k, v, causal: bool, window: int | None = None, chunk: int = 64):
    """phi_q, phi_k: [B, H, N, m]; v: [B, H, N, dv] -> [B, H, N, dv] (normalised).

    `window` (causal only): query i sees keys i - window < j <= i (see `_windowed`)."""
    v1 = torch.cat((v, torch.ones_like(v[..., :1])), dim=-1)
    if window is not None:
        if not causal:
            raise NotImplementedError("feature-map attention has a causal sliding window only")
        out = _windowed(phi_q, phi_k, v1, window, chunk)
    elif not causal:
        out = phi_q @ (phi_k.transpose(-1, -2) @ v1)
    else:
        n = v.shape[-2]
        tri = torch.ones(chunk, chunk, dtype=torch.bool, device=v.device).tril()
        state = None  # sum_j phi(k_j) v1_j^T over the chunks before this one
        outs = []
        for s in range(0, n, chunk):
            q, k, w = phi_q[..., s : s + chunk, :], phi_k[..., s : s + chunk, :], v1[..., s : s + chunk, :]
            c = q.shape[-2]
            local = (q @ k.transpose(-1, -2)).masked_fill(~tri[:c, :c], 0.0) @ w
            outs.append(local if state is None else q @ state + local)
            if s + chunk < n:  # the last chunk's keys are seen by no later query
                kw = k.transpose(-1, -2) @ w
                state = kw if state is None else state + kw
        out = torch.cat(outs, dim=-2)
    return out[..., :-1] / out[..., -1:]


def window_plan(n: int, window: int, chunk: int):
    """Per query chunk [s, e): keys [lo, b) and [s, e) exactly (a masked product), keys
    [b, s) through the states of the whole chunks they form. Keys in [b, s) are seen by every
    query of the chunk; lo = s - window + 1 is the oldest key any of them sees."""
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        lo = max(0, s - window + 1)
        first_full = max(0, -(-(e - window) // chunk))  # first chunk index all queries see whole
        b = min(s, max(lo, first_full * chunk))
        yield s, e, lo, b


def _needed_states(n: int, window: int, chunk: int) -> list[int]:
    """The chunks whose state some later query chunk reads (no state is built in vain)."""
    return sorted({t for s, _, _, b in window_plan(n, window, chunk) for t in range(b // chunk, s // chunk)})


def _windowed(phi_q, phi_k, v1, window, chunk):
    """Causal sliding-window linear attention in O(N (chunk + window / chunk) m dv): chunk
    states phi(K_t)^T V_t, summed (never differenced: no cancellation) over the whole chunks
    a query chunk sees entirely, plus an exact masked product over the rest of its keys."""
    n = v1.shape[-2]
    pos = torch.arange(n, device=v1.device)
    states = {t: phi_k[..., t * chunk : (t + 1) * chunk, :].transpose(-1, -2) @ v1[..., t * chunk : (t + 1) * chunk, :]
              for t in _needed_states(n, window, chunk)}
    outs = []
    for s, e, lo, b in window_plan(n, window, chunk):
        keys = torch.cat((pos[lo:b], pos[s:e]))
        k, w = torch.cat((phi_k[..., lo:b, :], phi_k[..., s:e, :]), -2), torch.cat((v1[..., lo:b, :], v1[..., s:e, :]), -2)
        lag = pos[s:e, None] - keys[None, :]
        q = phi_q[..., s:e, :]
        out = (q @ k.transpose(-1, -2)).masked_fill(~((lag >= 0) & (lag < window)), 0.0) @ w
        if b < s:
            out = out + q @ torch.stack([states[t] for t in range(b // chunk, s // chunk)]).sum(0)
        outs.append(out)
    return torch.cat(outs, dim=-2)


def feature_attention_flops(n: int, m: int, dv: int, heads: int, causal: bool,
                            window: int | None = None, chunk: int = 64) -> MixingFlops:
    """Matmul FLOPs of `feature_attention` (dv + 1 value columns: the normaliser rides along);
    every operand needs a gradient, so backward is twice forward."""
    w = dv + 1
    if window is not None:
        fwd = sum(2 * min(chunk, n - t * chunk) * m * w for t in _needed_states(n, window, chunk))
        for s, e, lo, b in window_plan(n, window, chunk):
            keys = (b - lo) + (e - s)
            fwd += 2 * (e - s) * keys * (m + w) + (2 * (e - s) * m * w if b < s else 0)
    elif not causal:
        fwd = 4 * n * m * w
    else:
        sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
        # local products; q @ state for every chunk but the first; state updates but the last
        fwd = sum(2 * c * c * (m + w) for c in sizes) + sum(2 * c * m * w for c in sizes[1:] + sizes[:-1])
    return MixingFlops(float(heads * fwd), float(2 * heads * fwd))


def positive_random_features(x: torch.Tensor, w: torch.Tensor, stabiliser=None) -> torch.Tensor:
    """FAVOR+ map phi(x)_i = exp(w_i . x - ||x||^2 / 2) / sqrt(m), so E[phi(q).phi(k)] = exp(q.k).

    x: [..., N, d]; w: [..., m, d]. `stabiliser` (broadcastable to [..., N, m]) is subtracted
    in the exponent: a per-query or a global constant that cancels under normalisation.
    """
    proj = feature_logits(x, w)
    if stabiliser is not None:
        proj = proj - stabiliser
    return torch.exp(proj) / math.sqrt(w.shape[-2])


def feature_logits(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """w_i . x - ||x||^2 / 2: the exponent of the FAVOR+ features, [..., N, m]."""
    return x @ w.transpose(-1, -2) - 0.5 * x.pow(2).sum(-1, keepdim=True)


@register("favor", FavorOptions)
class FavorAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        gen = torch.Generator().manual_seed(options.feature_seed)
        self.register_buffer("features", torch.randn(n_head, options.n_features, self.d_head, generator=gen))

    def redraw_features(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.features.copy_(torch.randn(self.features.shape, generator=gen))

    def prepare(self, x):
        q, k, v = self.split_qkv(x)
        # q.k / sqrt(d) = (q d^-1/4) . (k d^-1/4)
        scale = self.d_head ** -0.25
        w = self.features.to(q.dtype)[None]
        lq, lk = feature_logits(q * scale, w), feature_logits(k * scale, w)
        # Stabilisers: the per-query row max for q, one max per (batch, head) for k; both
        # are constants of the normalised row and cancel.
        root_m = math.sqrt(w.shape[-2])
        phi_q = torch.exp(lq - lq.amax(-1, keepdim=True).detach()) / root_m
        phi_k = torch.exp(lk - lk.amax((-1, -2), keepdim=True).detach()) / root_m
        return SimpleNamespace(phi_q=phi_q, phi_k=phi_k, v=v, n=x.shape[1])

    def fast(self, p):
        return feature_attention(p.phi_q, p.phi_k, p.v, self.causal, self.window, chunk=self.options.chunk)

    def kernel(self, p, allowed):
        return p.phi_q @ p.phi_k.transpose(-1, -2)

    def mixing_flops(self, n, keys):
        m, d, h = self.options.n_features, self.d_head, self.n_head
        mix = feature_attention_flops(n, m, d, h, self.causal, self.window, self.options.chunk)
        # q w^T and k w^T; backward only towards q and k (the features are a fixed buffer)
        feats = 2 * (2.0 * n * m * d * h)
        return MixingFlops(mix.forward + feats, mix.backward + feats)
