"""The frame every variant shares: [B, N, d_model] -> heads -> mix tokens -> merge -> W_O.

A variant implements three methods on the output of its own `prepare(x)`:
- `fast(p)`: the head outputs [B, H, N, dv] through a fused kernel (nothing N x N kept for
  backward where the variant allows it);
- `kernel(p, allowed)`: the explicit kernel matrix [B, H, N, N] of Nadaraya-Watson regression;
- `p.v`: the values being regressed.
`impl="reference"` runs the Nadaraya-Watson regression written out (reference.py) on the same
parameters, and `attention_weights(x)` returns the normalised kernel the forward pass used. A variant whose
weights are not normalised (`normalised = False`: a sigmoid attention, say) returns its
weights from `kernel` and the reference sums them against the values as they are.

The contract a variant implements, built-in or plugin (kernattn check-variant proves it):
`prepare`, `fast`, `kernel`, `mixing_flops`, `has_value_projection`, `normalised`; its own
parameters are those outside its nn.Linear and norm layers (`owned_parameters`);
`float64_tolerance()` is how close fast and reference must agree in float64, and
`precision_bounds()` how close float32 and bfloat16 stay to float64.

What a model needs to know about a variant without running it lives here too:
`has_value_projection` (a W_V whose output can take the LM's value embeddings),
`position_scheme()` (the 1-D positional form it applies, if any; its options decide it, as
they decide whether it has a sliding-window form and a bidirectional one: options.allows_window
and options.allows_bidirectional, options.py) and
`mixing_flops(n, keys)` (the matmul FLOPs of mixing tokens, which FLOPs/token adds to 6 x the
linear weights).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch
from torch import nn

from . import reference
from .registry import IMPLS, AttentionConfigError


@dataclass(frozen=True)
class MixingFlops:
    """Matmul FLOPs (2 per multiply-accumulate) of mixing one sequence, all heads.

    `padding_*` are the FLOPs spent on zero channels that a fused kernel needs (GKA's head
    width padded to a multiple of 8): run, but not part of the algorithm's count."""

    forward: float
    backward: float
    padding_forward: float = 0.0
    padding_backward: float = 0.0


def full_precision(device: torch.device):
    """A block that runs without autocast (position terms kept in float32 at least). The meta
    device (the cost plan's FLOP count builds models there) has no autocast to turn off."""
    if device.type == "meta":
        return contextlib.nullcontext()
    return torch.autocast(device.type, enabled=False)


def sdpa_flops(n: int, keys: int, heads: int, d_qk: int, d_v: int, width: int | None = None) -> MixingFlops:
    """softmax(q k^T) v on n queries of `keys` keys each: q k^T and P v forward, four matmuls
    backward (dq, dk, dP, dv). `width`: the padded head width the kernel actually runs at."""
    fwd = 2.0 * n * keys * heads * (d_qk + d_v)
    pad = 0.0 if width is None else 2.0 * n * keys * heads * ((width - d_qk) + (width - d_v))
    return MixingFlops(fwd, 2 * fwd, pad, 2 * pad)


class KernelAttention(nn.Module):
    registry_name = "?"          # set by registry.register
    has_value_projection = True  # a W_V: the LM adds its value embeddings to that output
    normalised = True            # each query's weights sum to 1 (Nadaraya-Watson); False: used as they are

    def __init__(self, d_model: int, n_head: int, causal: bool, window: int | None, impl: str, options):
        super().__init__()
        if window is not None and not options.allows_window(causal):
            raise AttentionConfigError(
                f"attention {self.registry_name!r} with options {_short(options)} has no "
                f"{'causal' if causal else 'bidirectional'} sliding-window form; use window=None"
            )
        if not causal and not options.allows_bidirectional():
            raise AttentionConfigError(
                f"attention {self.registry_name!r} is causal only (no bidirectional form, so no ViT): use causal=True "
                f"or another variant")
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

    def split_qkv(self, x: torch.Tensor):
        """q, k, v [B, H, N, d] of a variant with one fused W_Q W_K W_V (`proj_in`)."""
        return tuple(self.split_heads(t) for t in self.proj_in(x).chunk(3, dim=-1))

    def projected_qkv(self, x: torch.Tensor):
        """split_qkv, with q and k rotated by the variant's `rope` where it has one."""
        q, k, v = self.split_qkv(x)
        rope = getattr(self, "rope", None)
        if rope is not None:
            q, k = rope(q), rope(k)
        return q, k, v

    def allowed(self, n: int, device) -> torch.Tensor:
        return reference.allowed_mask(n, self.causal, self.window, device)

    # --- the interface ----------------------------------------------------------------
    def prepare(self, x: torch.Tensor):
        raise NotImplementedError

    def fast(self, p) -> torch.Tensor:
        raise NotImplementedError

    def kernel(self, p, allowed: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def position_scheme(self) -> str | None:
        """The relative-position form the variant applies along the 1-D token order (None:
        none; it sees tokens as a set plus whatever the model adds): its options decide it
        (options.py), so params are checked without building the module."""
        return self.options.position_scheme()

    def mixing_flops(self, n: int, keys: int) -> MixingFlops:
        """FLOPs of mixing n queries that see `keys` keys each (window or context; nanochat's
        convention: causal masking does not halve it)."""
        raise NotImplementedError(f"attention {self.registry_name!r} does not state its FLOPs")

    def forward(self, x: torch.Tensor, v_add: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, N, d_model] -> [B, N, d_model]. `v_add` [B, H, N, dv] is added to the values
        (the LM's gated value embeddings); only for variants with a value projection."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape [B, N, {self.d_model}], got {tuple(x.shape)}")
        p = self.prepare(x)
        if v_add is not None:
            if not self.has_value_projection:
                raise AttentionConfigError(f"attention {self.registry_name!r} has no value projection to add to")
            p.v = p.v + v_add
        if self.impl == "fast":
            heads = self.fast(p)
        else:
            heads = self._weights(p, self.allowed(x.shape[1], x.device)) @ p.v
        return self.proj_out(self.merge_heads(self.finish_heads(heads)))

    def finish_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """What a variant does to its head outputs before they merge, on both paths (differential
        attention's per-head norm); none by default."""
        return heads

    def _weights(self, p, allowed: torch.Tensor) -> torch.Tensor:
        masked = self.kernel(p, allowed).masked_fill(~allowed, 0.0)
        return masked / masked.sum(-1, keepdim=True) if self.normalised else masked

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """[B, H, N, N]: the weights forward used (row-normalised where `normalised`), from the
        same parameters."""
        p = self.prepare(x)
        return self._weights(p, self.allowed(x.shape[1], x.device))

    def float64_tolerance(self) -> tuple[float, float]:
        """(rtol, atol) within which fast and reference agree in float64: round-off."""
        return 1e-9, 1e-10

    def precision_bounds(self) -> tuple[float, float]:
        """The relative RMS error of the outputs, against float64, that float32 and bfloat16
        autocast stay within (kernattn check-variant's `precision`)."""
        return 1e-4, 5e-2

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_head={self.n_head}, causal={self.causal}, "
            f"window={self.window}, impl={self.impl!r}, options={self.options}"
        )


def _short(options) -> str:
    """Options that differ from their defaults, as `k=v` (for one-line messages)."""
    changed = [f"{f.name}={getattr(options, f.name)!r}" for f in fields(options)
               if getattr(options, f.name) != f.default]
    return "{" + ", ".join(changed) + "}"


def owned_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The attention variants' own trainable parameters in `model` by name (GPA banks, GKA's
    log sigma, T5 / lag tables, learned RoPE frequencies): those of every KernelAttention
    module outside its nn.Linear and norm layers (which every variant has alike)."""
    shared = {id(p) for m in model.modules() if isinstance(m, KernelAttention)
              for sub in m.modules() if isinstance(sub, (nn.Linear, nn.LayerNorm, nn.RMSNorm))
              for p in sub.parameters(recurse=False)}
    attn = {id(p) for m in model.modules() if isinstance(m, KernelAttention) for p in m.parameters()}
    return {name: p for name, p in model.named_parameters()
            if id(p) in attn and id(p) not in shared and p.requires_grad}
