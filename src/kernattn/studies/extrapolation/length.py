"""Scoring one trained model at lengths beyond its training context (no files: the stage is
kernattn.studies.extrapolation.extrapolate).

The same validation text at every length: the first windows x max(factors) x context targets
of the validation split, cut into non-overlapping windows of `length` tokens (the window's
inputs are the `length` tokens before its targets), so every length predicts exactly the same
tokens and only the context each prediction sees changes. Two means per length: over every
target (what a user of the longer context gets) and over the targets at positions >= the
training context (the predictions that see more than training ever showed: where
extrapolation succeeds or fails; none at 1x).

Which variants are defined beyond their training context is read from the model itself:
`defined_limit` (a free lag table holds max_len lags: not defined beyond), `behaviour` (what
each position scheme does at lags it never saw, in words for the table).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...attention import KernelAttention
from ...attention.positions import FreeLagBias


class ShortText(ValueError):
    """The validation split holds less text than the sweep needs (one line naming the key)."""


def text_targets(n_tokens: int, factors, context: int, windows: int) -> int:
    """Targets scored at every length: `windows` windows of the longest length."""
    need = windows * max(factors) * context
    if n_tokens < need + 1:
        raise ShortText(f"the validation split has {n_tokens} tokens, fewer than the {need + 1} that "
                         f"studies.extrapolation.windows={windows} windows of {max(factors)} x {context} need; "
                         f"lower studies.extrapolation.windows")
    return need


@torch.no_grad()
def window_losses(model_fn, tokens: torch.Tensor, length: int, context: int, n_targets: int,
                  batch: int) -> dict:
    """Per-target cross-entropy over the non-overlapping windows of `length` that predict
    tokens[1 : n_targets + 1]; `model_fn` maps int64 ids [B, length] to logits [B, length, V].
    `batch` windows of the training `context` per forward pass (fewer longer ones). Returns
    {loss, loss_beyond (None when length <= context), windows, targets, nats [n_targets],
    ids [n_targets]} with the means in float64."""
    if n_targets % length:
        raise ValueError(f"{n_targets} targets do not split into windows of {length}")
    n_windows = n_targets // length
    per_pass = max(1, batch * context // length)
    offsets = torch.arange(length + 1)
    nats, ids = [], []
    for first in range(0, n_windows, per_pass):
        starts = torch.arange(first, min(first + per_pass, n_windows)) * length
        chunk = tokens[starts[:, None] + offsets].long()
        logits = model_fn(chunk[:, :-1])
        y = chunk[:, 1:].to(logits.device)
        nats.append(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1),
                                    reduction="none").view(len(starts), length).double().cpu())
        ids.append(chunk[:, 1:])
    grid = torch.cat(nats)  # [windows, length]
    beyond = grid[:, context:] if length > context else None
    return {"loss": float(grid.mean()), "loss_beyond": None if beyond is None else float(beyond.mean()),
            "windows": n_windows, "targets": n_targets, "nats": grid.reshape(-1), "ids": torch.cat(ids).reshape(-1)}


def defined_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence every attention of `model` is defined on: a free lag table's
    max_len (causal: lags 0..max_len-1, so sequences of at most max_len); None: no limit."""
    limits = [m.max_len for m in model.modules() if isinstance(m, FreeLagBias)]
    return min(limits) if limits else None


def _scheme_words(module: KernelAttention, context: int) -> str:
    scheme = module.position_scheme()
    opts = module.options
    if scheme is None:
        return "no position signal (the causal mask only): defined at every length"
    if scheme in ("rope", "learned_rope"):
        return f"{scheme}: rotation angles computed at every position (beyond {context} never seen in training)"
    if scheme == "alibi":
        return "alibi: a fixed slope per head, defined at every lag"
    if scheme == "t5":
        return (f"t5: defined at every lag; lags >= {opts.t5_max_distance} share the last bucket "
                f"(T5's design, not a clamp of ours)")
    if scheme == "lag_table":
        untrained = (f"; the entries for lags {context}..{opts.max_len - 1} were never trained (their zero init)"
                     if opts.max_len > context else "")
        return (f"lag_table: one learned bias per lag up to max_len={opts.max_len}: "
                f"not defined beyond {opts.max_len}{untrained}")
    if scheme.startswith("kernel bank"):
        extra = ", plus rope angles at every position" if scheme.endswith("rope") else ""
        return f"{scheme}: the bank G(lag) is a closed form, defined at every lag{extra}"
    return f"{scheme}: defined at every length"


def behaviour(model: torch.nn.Module, context: int) -> str:
    """What the model's attention does beyond `context`, in words (each distinct scheme once)."""
    words = [_scheme_words(m, context) for m in model.modules() if isinstance(m, KernelAttention)]
    return "; ".join(dict.fromkeys(words))
