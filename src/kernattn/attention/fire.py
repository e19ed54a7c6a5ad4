"""FIRE, functional interpolation for relative positions (Li et al. 2023, eq. 3 and its
thresholded normaliser): softmax attention plus a learned bias per head,

    b_h(i, j) = f_h( psi(i - j) / psi(max(i, L)) ),   psi(x) = log(c x + 1),   j <= i,

where f: R -> R^H is one small MLP (one hidden ReLU layer, width `hidden`) shared by the layer's
heads, one output each, and c > 0 and L > 0 are learned (stored as logs). The bias depends on
the query's position i as well as the lag, so it is no lag table: the fast path is SDPA with
the dense [H, n, n] bias as its float mask (-inf where the mask forbids; O(n^2) memory, the
math kernel in backward). Causal only: the normaliser is the query's distance from the start.
Positions are counted from 0, so the first query is normalised by psi(L).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from . import reference
from .base import KernelAttention, full_precision, sdpa_flops
from .options import FireOptions
from .registry import register


class FireBias(nn.Module):
    """f_h(psi(i - j) / psi(max(i, L))) on the [n, n] grid, as [H, n, n] in float32 or wider."""

    def __init__(self, n_head: int, opts: FireOptions):
        super().__init__()
        h = opts.hidden
        # nn.Linear's initial ranges for fan-ins 1 and h; written out so f is the variant's own
        # parameters (owned_parameters leaves nn.Linear layers to the shared weights)
        self.w1 = nn.Parameter(torch.empty(h).uniform_(-1.0, 1.0))
        self.b1 = nn.Parameter(torch.empty(h).uniform_(-1.0, 1.0))
        self.w2 = nn.Parameter(torch.empty(h, n_head).uniform_(-1 / math.sqrt(h), 1 / math.sqrt(h)))
        # no output bias: a constant per head adds the same to every logit of a query, which the
        # softmax cancels. Its gradient would be rounding noise, which Adam scales up to full
        # steps (2 ranks then end elsewhere than 1: check-variant's DDP check caught it)
        self.log_c = nn.Parameter(torch.tensor(math.log(opts.init_c)))
        self.log_threshold = nn.Parameter(torch.tensor(math.log(opts.init_threshold)))

    def normalised_lag(self, n: int, device) -> torch.Tensor:
        """[n, n]: psi(i - j) / psi(max(i, L)); lags below 0 (masked anyway) read as 0."""
        work = torch.promote_types(self.log_c.dtype, torch.float32)
        pos = torch.arange(n, device=device, dtype=work)
        c = self.log_c.to(work).exp()
        lag = (pos[:, None] - pos[None, :]).clamp(min=0)
        scale = torch.maximum(pos, self.log_threshold.to(work).exp())
        return torch.log1p(c * lag) / torch.log1p(c * scale)[:, None]

    def forward(self, n: int, device) -> torch.Tensor:
        u = self.normalised_lag(n, device)
        hidden = F.relu(u[..., None] * self.w1.to(u.dtype) + self.b1.to(u.dtype))  # [n, n, hidden]
        # the output layer head by head, elementwise: live memory stays that of `hidden`, and,
        # like a lag table's, f's work is once per batch, not per sequence (mixing_flops)
        w2 = self.w2.to(u.dtype)
        return torch.stack([(hidden * w2[:, h]).sum(-1) for h in range(w2.shape[1])])


@register("fire", FireOptions)
class FireAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.fire = FireBias(n_head, options)

    def prepare(self, x):
        q, k, v = self.projected_qkv(x)
        with full_precision(x.device):  # the bias in float32 at least, as a lag table is
            bias = self.fire(x.shape[1], x.device)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1], bias=bias)

    def mixing_flops(self, n, keys):
        # The dense mask makes SDPA multiply against all n keys. f (about 6 n^2 x hidden x H
        # FLOPs forward + backward) runs once per batch, not per sequence: position work with no
        # per-token share, left out as GPA's bank and the lag tables are.
        return sdpa_flops(n, n, self.n_head, self.d_head, self.d_head)

    def fast(self, p):
        mask = p.bias.masked_fill(~self.allowed(p.n, p.q.device), float("-inf"))
        q, k, v = p.q, p.k, p.v
        if q.dtype in (torch.bfloat16, torch.float16):  # SDPA takes the mask in q's dtype: keep it wide
            q, k, v = q.float(), k.float(), v.float()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype)).to(p.q.dtype)

    def kernel(self, p, allowed):
        logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
        return reference.exp_kernel(logits + p.bias.to(logits.dtype), allowed)
