"""The projected RBF control for GKA: the Gaussian kernel of GKA on projected queries and keys,

    K_ij = exp(-||W_Q x_i - W_K x_j||^2 / (2 sigma_h^2)),   sigma_h = exp(log_sigma_h),

masked, row-normalised and applied to W_V x (GKA, gka.py, is the same kernel with no W_Q, W_K
or W_V). It separates what the Gaussian kernel does from what dropping the projections does.
The bandwidth starts as GKA's does (`init_sigma`: a number or paper/sqrt_d_half/sqrt_d; GKA's
median rule is not offered: it measures features that here move with W_Q and W_K).

Fast path: GKA's identity with q and k apart. Row normalisation cancels exp(-||q_i||^2 / 2 s^2),
so the weights are softmax_j(q_i . k_j / s^2 - ||k_j||^2 / (2 s^2)): SDPA on q' = [q / s^2, 1],
k' = [k, -||k||^2 / (2 s^2)] at scale 1, zero-padded to a multiple of 8 channels (gka.py says
why), after shifting q and k by the first key (distances do not change; detached, its true
derivative being zero) against float32 cancellation. The reference takes exact differences.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from . import reference
from .base import KernelAttention, sdpa_flops
from .gka import gaussian_attend, padded_width
from .kernels import sqdist
from .options import RBFOptions, initial_log_sigma
from .positions import Rope
from .registry import register


@register("rbf", RBFOptions)
class RBFAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.rope = Rope(self.d_head, options.rope_base) if options.rope else None
        self.log_sigma = nn.Parameter(torch.full((n_head,), initial_log_sigma(options.init_sigma, self.d_head)))

    def prepare(self, x):
        q, k, v = self.projected_qkv(x)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def mixing_flops(self, n, keys):
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head, width=padded_width(self.d_head))

    def fast(self, p):
        return gaussian_attend(p.q, p.k, p.v, self.log_sigma, causal=self.causal, window=self.window)

    def kernel(self, p, allowed):
        s2 = torch.exp(2 * self.log_sigma).to(p.q.dtype)[None, :, None, None]
        return reference.exp_kernel(-sqdist(p.q, p.k) / (2 * s2), allowed)
