"""The frame every variant shares: [B, N, d_model] -> heads -> mix tokens -> merge -> W_O.

A variant implements three methods on the output of its own `prepare(x)`:
- `fast(p)`: the head outputs [B, H, N, dv] through a fused kernel (nothing N x N kept for
  backward where the variant allows it);
- `kernel(p, allowed)`: the explicit kernel matrix [B, H, N, N] of Nadaraya-Watson regression;
- `p.v`: the values being regressed.
`impl="reference"` runs `reference.nadaraya_watson` on the same parameters, and
`attention_weights(x)` returns the normalised kernel the forward pass used.
"""

from __future__ import annotations

import torch
from torch import nn

from . import reference
from .registry import IMPLS, AttentionConfigError


class KernelAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, causal: bool, window: int | None, impl: str, options):
        super().__init__()
        if n_head < 1 or d_model % n_head:
            raise AttentionConfigError(
                f"d_model={d_model} must be a positive multiple of n_head={n_head}"
            )
        if impl not in IMPLS:
            raise AttentionConfigError(f"impl must be one of {', '.join(IMPLS)}; got {impl!r}")
        if window is not None and window < 1:
            raise AttentionConfigError(f"window must be None or >= 1; got {window!r}")
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_model // n_head
        self.causal, self.window, self.impl, self.options = causal, window, impl, options
        self.proj_out = nn.Linear(d_model, d_model, bias=False)

    # --- helpers for subclasses -------------------------------------------------------
    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_head, -1).transpose(1, 2)

    @staticmethod
    def merge_heads(t: torch.Tensor) -> torch.Tensor:
        b, h, n, d = t.shape
        return t.transpose(1, 2).reshape(b, n, h * d)

    def allowed(self, n: int, device) -> torch.Tensor:
        return reference.allowed_mask(n, self.causal, self.window, device)

    # --- the interface ----------------------------------------------------------------
    def prepare(self, x: torch.Tensor):
        raise NotImplementedError

    def fast(self, p) -> torch.Tensor:
        raise NotImplementedError

    def kernel(self, p, allowed: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape [B, N, {self.d_model}], got {tuple(x.shape)}")
        p = self.prepare(x)
        if self.impl == "fast":
            heads = self.fast(p)
        else:
            allowed = self.allowed(x.shape[1], x.device)
            heads, _ = reference.nadaraya_watson(self.kernel(p, allowed), p.v, allowed)
        return self.proj_out(self.merge_heads(heads))

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """[B, H, N, N]: the row-normalised kernel, from the same parameters as forward."""
        p = self.prepare(x)
        allowed = self.allowed(x.shape[1], x.device)
        masked = self.kernel(p, allowed).masked_fill(~allowed, 0.0)
        return masked / masked.sum(-1, keepdim=True)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_head={self.n_head}, causal={self.causal}, "
            f"window={self.window}, impl={self.impl!r}, options={self.options}"
        )
