"""The Forgetting Transformer, FoX (Lin et al. 2025, eqs. 4-6): softmax attention whose logits
carry the forget gates of the tokens in between. Per head, a scalar gate per token

    f_t = sigmoid(w_f . x_t + b_f),     logit_ij = q_i . k_j / sqrt(d) + sum_{l = j+1..i} log f_l,

so a key fades by every gate after it (the attention of a gated linear recurrence, kept
softmax). With c_t = sum_{l <= t} log f_l the bias is c_i - c_j, and c_i, the same for every key
of query i, cancels in the normalisation. Causal only. The paper's "Pro" block (output gate,
QK-norm, a short convolution on keys) is not part of this variant.

Fast path: the bias -c_j is one more channel of the keys, against a channel of ones on the
queries: SDPA on q' = [q / sqrt(d), 1], k' = [k, -c] at scale 1 (zero-padded to a multiple of 8
channels as GKA's is), so flash attention runs it, window included. |c| grows with the position,
so under bf16 autocast the call runs in float32 (bf16 would round c_j by whole units at long
range). The reference adds the explicit sum over l to the logits.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from . import reference
from .base import KernelAttention, full_precision, sdpa_flops
from .fused import attend
from .gka import _pad_last, padded_width
from .options import FoxOptions
from .positions import Rope
from .registry import register


@register("fox", FoxOptions)
class ForgettingAttention(KernelAttention):
    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.forget = nn.Linear(d_model, n_head, bias=True)  # w_f, b_f of every head
        self.rope = Rope(self.d_head, options.rope_base) if options.rope else None

    def prepare(self, x):
        q, k, v = self.projected_qkv(x)
        with full_precision(x.device):  # gates summed over the sequence: float32 at least
            gate_in = self.forget(x.to(self.forget.weight.dtype))
        log_f = F.logsigmoid(gate_in).transpose(1, 2)  # [B, H, N]
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1], log_f=log_f)

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """[B, H, N]: each head's forget gate f_t (for analysis)."""
        return self.prepare(x).log_f.exp()

    def mixing_flops(self, n, keys):
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head, width=padded_width(self.d_head))

    def fast(self, p):
        c = p.log_f.cumsum(-1)[..., None]
        wide = torch.promote_types(p.q.dtype, torch.float32)
        q, k, v = p.q.to(wide), p.k.to(wide), p.v.to(wide)
        q_aug = torch.cat((q / math.sqrt(self.d_head), torch.ones_like(q[..., :1])), dim=-1)
        k_aug = torch.cat((k, -c.to(wide)), dim=-1)
        width = padded_width(self.d_head)
        out = attend(_pad_last(q_aug, width), _pad_last(k_aug, width), _pad_last(v, width),
                     causal=self.causal, window=self.window, scale=1.0)
        return out[..., : self.d_head].to(p.q.dtype)

    def kernel(self, p, allowed):
        n = p.n
        i, j, l = (torch.arange(n, device=p.q.device).view(s) for s in ((n, 1, 1), (1, n, 1), (1, 1, n)))
        between = ((l > j) & (l <= i)).to(p.log_f.dtype)  # [i, j, l]: j < l <= i
        decay = torch.einsum("bhl,ijl->bhij", p.log_f, between)
        logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
        return reference.exp_kernel(logits + decay.to(logits.dtype), allowed)
