"""Training compute of the LM track: FLOPs per token, steps per matched mode, totals.

FLOPs per token follow nanochat's estimate: 6 x (the weights of the Linear layers, the only
parameters that multiply activations: embeddings are lookups, residual scalars, lag-bias
tables, kernel banks and bandwidths act elementwise) for forward + backward, plus what the
attention variant spends mixing tokens (`KernelAttention.mixing_flops`): for softmax-shaped
variants (softmax, valueless, gpa, nw exp_dot) 12 x heads x head_dim x (keys a query sees)
per layer, the keys being those a query sees (a window's w, itself included) or the context (a lag bias is an addition: no
matmul); GKA and nw gaussian the same at the head width d (gka-paper's Table 8), the zero
channels of their padded fused call reported apart as `padding`; nw yat against every key,
recomputed in backward; FAVOR+ its feature maps plus the chunked linear attention; the signed
linear kernel the latter alone. `total` excludes `padding` (the paper's convention).

A row's `compute` (config.rows) sets its steps (lm.train.plan):
- null: lm.steps, or nanochat's rule on the row's own model (base_steps);
- {tokens: N}: the whole steps closest to N training tokens (token_steps);
- {match: tokens, row: R}: R's steps, so the same tokens;
- {match: flops, row: R}: round(R's steps x R's flops_per_token / its flops_per_token)
  steps, so its total training FLOPs equal R's (up to one step).
"""

from __future__ import annotations

from .model import GPT


def flops_per_token(model: GPT) -> dict[str, float]:
    """dense, attention, total (= dense + attention), padding and nanochat FLOPs per token,
    forward + backward, for sequences of the full context.

    attention counts the keys a query sees (a window of w keys, itself included); `nanochat`
    is nanochat's estimate_flops, which counts a window's left size, w - 1 keys (1,024 of the
    1,025 a query sees at 2048): the convention of gka-paper's Table 8."""
    n = model.cfg.context
    dense = 6 * sum(w.numel() for w in model.linear_weights().values())
    attn = pad = nano = 0.0
    for block, window in zip(model.blocks, model.windows):
        keys = window if window is not None else n
        mix = block.attn.inner.mixing_flops(n, keys)
        attn += (mix.forward + mix.backward) / n
        pad += (mix.padding_forward + mix.padding_backward) / n
        left = block.attn.inner.mixing_flops(n, keys - 1) if window is not None else mix
        nano += (left.forward + left.backward) / n
    return {"dense": float(dense), "attention": attn, "total": float(dense + attn), "padding": pad,
            "nanochat": float(dense + nano)}


def tokens_per_step(lm) -> int:
    return lm.batch_size * lm.grad_accum * lm.context


def base_steps(lm, base_model: GPT) -> int:
    """lm.steps, or nanochat's rule: param_data_ratio x the model's scaling parameters, in whole steps."""
    if lm.steps is not None:
        return lm.steps
    return max(1, int(lm.param_data_ratio * base_model.param_counts()["scaling"]) // tokens_per_step(lm))


def token_steps(lm, tokens: int) -> int:
    """The whole steps closest to `tokens` training tokens (at least one)."""
    return max(1, round(tokens / tokens_per_step(lm)))


def matched_steps(base: int, base_fpt: float, variant_fpt: float, mode: str) -> int:
    if mode == "tokens":
        return base
    if mode == "flops":
        return max(1, round(base * base_fpt / variant_fpt))
    raise ValueError(f"unknown matched mode {mode!r}; valid: tokens, flops")
