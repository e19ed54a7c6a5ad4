"""Attention variants of the kernel view of attention, behind one registry.

    from kernattn import attention
    attention.available()                      # ['cope', 'differential', 'favor', 'fire', 'fox', 'gka', ...]
    m = attention.build("gpa", d_model=128, n_head=4, causal=True, combine="mult", n_kernels=8)
    y = m(x)                                   # [B, N, d_model] -> [B, N, d_model]
    w = m.attention_weights(x)                 # [B, n_head, N, N]

`impl="reference"` builds the explicit Nadaraya-Watson path with the same parameters
(a state dict moves between the two).
"""

from __future__ import annotations

from . import plugins  # noqa: F401 (hooks installed packages' entry points into the registry's lookups)
from .registry import (AttentionConfigError, PluginError, available, freeze_options, make_options, option_fields,
                       register, variant, variations)

# The variant modules (torch) load when a variant is built (registry.variant), not with the
# package: validating params needs only the options (options.py), and the Snakefile validates
# them at every parse.


def __getattr__(name: str):
    if name in ("KernelAttention", "owned_parameters"):
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(
    name: str,
    *,
    d_model: int,
    n_head: int,
    causal: bool = True,
    window: int | None = None,
    impl: str = "fast",
    **options,
) -> KernelAttention:
    """Build attention variant `name` with validated `options` (see `describe(name)`)."""
    spec = variant(name)
    return spec.module(d_model, n_head, causal, window, impl, make_options(name, options))


def describe(name: str) -> dict[str, object]:
    """Option name -> default value, for variant `name`."""
    return {k: f.default for k, f in option_fields(name).items()}


__all__ = ["AttentionConfigError", "PluginError", "KernelAttention", "register", "available", "build", "describe", "freeze_options",
           "owned_parameters", "variations"]
