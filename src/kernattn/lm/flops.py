"""Training compute of the LM track: FLOPs per token, steps per matched mode, totals.

FLOPs per token follow nanochat's estimate: 6 x (parameters that take part in matrix
multiplies: everything but the token and value embeddings, which are lookups, and the
residual scalars) for forward + backward, plus the attention scores and their weighted sum,
12 x heads x head_dim x (keys a query sees) per layer, the keys being the window length or the
context. The GKA attention has the same score/sum cost (its q', k' only add one channel).

Matched modes (the comparison the paper did not make):
- tokens: every variant trains the baseline's number of steps, so the same tokens;
- flops: a variant trains round(base_steps x base_flops_per_token / its flops_per_token)
  steps, so its total training FLOPs equal the baseline's (up to one step).
"""

from __future__ import annotations

from .model import GPT


def flops_per_token(model: GPT) -> dict[str, float]:
    counts = model.param_counts()
    dense = 6 * (counts["total"] - counts["wte"] - counts["value_embeds"] - counts["scalars"])
    cfg = model.cfg
    head_dim = cfg.dim // cfg.n_head
    attn = sum(12 * cfg.n_head * head_dim * (w if w is not None else cfg.context) for w in model.windows)
    return {"dense": float(dense), "attention": float(attn), "total": float(dense + attn)}


def tokens_per_step(lm) -> int:
    return lm.batch_size * lm.grad_accum * lm.context


def base_steps(lm, base_model: GPT) -> int:
    """lm.steps, or nanochat's rule: param_data_ratio x scaling parameters, in whole steps."""
    if lm.steps is not None:
        return lm.steps
    return max(1, int(lm.param_data_ratio * base_model.param_counts()["scaling"]) // tokens_per_step(lm))


def matched_steps(base: int, base_fpt: float, variant_fpt: float, mode: str) -> int:
    if mode == "tokens":
        return base
    if mode == "flops":
        return max(1, round(base * base_fpt / variant_fpt))
    raise ValueError(f"unknown matched mode {mode!r}; valid: tokens, flops")
