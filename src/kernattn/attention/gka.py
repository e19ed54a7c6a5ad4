"""Gaussian kernel attention (seed 003): projection-free, one learnable bandwidth per head.

Per head h with features f_i (the head slice of x; optionally rotated by RoPE and RMS-normed,
the paper's nanochat flavour), the kernel is K_ij = exp(-||f_i - f_j||^2 / (2 sigma_h^2)) with
sigma_h = exp(log_sigma_h), masked, row-normalised, and applied to the values x_j^(h) (the
raw head slices: there is no W_V). Only W_O and H scalars are learned.

Fast path (shared/notes/attention-math.md): under row normalisation the factor
exp(-||f_i||^2 / 2 s^2) cancels, so the weights are
    softmax_j(f_i . f_j / s^2 - ||f_j||^2 / (2 s^2)),
i.e. SDPA with q' = [f / s^2, 1], k' = [f, -||f||^2 / (2 s^2)] and scale 1: flash attention,
nothing N x N materialised, causal and window masks unchanged. Two float32 details:
- distances are translation invariant, so f is first shifted by the first token's features
  (a constant of the sequence; detached, since the true derivative through it is zero).
  This removes the catastrophic cancellation of a large shared offset in ||f||^2;
- q', k', v are zero-padded to a common head dim that is a multiple of 8, which the CPU
  flash kernel requires (else SDPA falls back to the math path) and CUDA kernels prefer.
The paper's eps in the denominator is left out: the diagonal term exp(0) = 1 is always
allowed, so a row sum is never below 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from .base import KernelAttention, sdpa_flops
from .fused import attend
from .positions import Rope
from .registry import positive, register


@dataclass(frozen=True)
class GKAOptions:
    rope: bool = False      # rotate the per-head features (nanochat flavour)
    qk_norm: bool = False   # parameter-free RMS norm of the per-head features (nanochat flavour)
    init_sigma: float = positive(1.0, "initial bandwidth; sigma = exp(log_sigma)")
    rope_base: float = positive(10000.0)


def padded_width(d_head: int) -> int:
    """Head width of the fused call: d + 1 channels rounded up to a multiple of 8."""
    return 8 * math.ceil((d_head + 1) / 8)


def _pad_last(t: torch.Tensor, size: int) -> torch.Tensor:
    return F.pad(t, (0, size - t.shape[-1])) if t.shape[-1] < size else t


@register("gka", GKAOptions, "projection-free Gaussian kernel attention with a learnable bandwidth per head")
class GKAAttention(KernelAttention):
    window_backend = "auto"
    has_value_projection = False  # the values are x's head slices

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.log_sigma = nn.Parameter(torch.full((n_head,), math.log(options.init_sigma)))
        self.rope = Rope(self.d_head, options.rope_base) if options.rope else None

    def position_scheme(self):
        return "rope" if self.rope is not None else None

    def mixing_flops(self, n, keys):
        # Counted at the head width d (seed 003's Table 8); the fused call runs at the padded width.
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head, width=padded_width(self.d_head))

    @property
    def sigma(self) -> torch.Tensor:
        return self.log_sigma.exp()

    def prepare(self, x):
        v = self.split_heads(x)
        f = v
        if self.rope is not None:
            f = self.rope(f)
        if self.options.qk_norm:
            f = F.rms_norm(f, (self.d_head,))
        return SimpleNamespace(f=f, v=v, n=x.shape[1])

    def fast(self, p):
        f = p.f - p.f[:, :, :1].detach()
        inv_s2 = torch.exp(-2 * self.log_sigma).to(f.dtype)[None, :, None, None]
        ones = torch.ones_like(f[..., :1])
        q = torch.cat((f * inv_s2, ones), dim=-1)
        k = torch.cat((f, -0.5 * f.pow(2).sum(-1, keepdim=True) * inv_s2), dim=-1)
        width = padded_width(self.d_head)
        out = attend(_pad_last(q, width), _pad_last(k, width), _pad_last(p.v, width),
                     causal=self.causal, window=self.window, scale=1.0, backend=self.window_backend)
        return out[..., : self.d_head]

    def kernel(self, p, allowed):
        # Exact differences (no ||a||^2 + ||b||^2 - 2ab expansion): the reference must not
        # share the fast path's cancellation.
        sq = torch.cdist(p.f, p.f, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
        s2 = torch.exp(2 * self.log_sigma).to(sq.dtype)[None, :, None, None]
        return torch.exp(-sq / (2 * s2))
