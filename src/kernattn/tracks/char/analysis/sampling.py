"""Sampling many characters from a trained model fast on a CPU: batched streams, cached keys.

    streams = sample_streams(model, prompts, n_new, temperature=1.0, generator=g)   # [S, n_new]

S streams are sampled side by side in one batch, each continuing its own prompt. The window
the model sees slides the way it was trained: the model only ever runs on windows of at most
`context` characters whose first character has no history (as in a training window). When a
window is full it restarts from its last context // 2 characters, so every character is
sampled from the model run on the last L characters, context // 2 <= L <= context, exactly
`model(window)[:, -1]`.

Running the whole window for every new character (as nanoGPT's `generate` does) costs a full
forward pass per character: ~3-6 ms per character per CPU core for the tiny model, minutes
for 50,000 characters. For GPA models `CachedWindow` keeps each layer's keys and values and
runs only the new token through the model (the bank is a lag table, so the new query needs
only its lags to the cached keys); restarts re-encode the half window in one pass. It is
tested to give the logits of the full forward pass (tests/test_analysis.py). Other variants
use `RecomputedWindow`: the same schedule by full forward passes (slow, exact by definition).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ....attention.gpa import GPAAttention


class RecomputedWindow:
    """The model run on the whole current window for every new token (any variant)."""

    def __init__(self, model):
        self.model = model
        self.tokens = None

    @property
    def length(self) -> int:
        return 0 if self.tokens is None else self.tokens.shape[1]

    @torch.no_grad()
    def reset(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens = tokens
        return self.model(tokens)[:, -1]

    def push(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.reset(torch.cat((self.tokens, tokens), dim=1))


class CachedWindow:
    """Incremental decoding of a GPA GPT: per layer, the keys and values of the window so far.

    Follows GPT.forward / Block.forward step for step (embedding, pre-norm attention and MLP
    residuals, final norm, unembedding); the attention is softmax(q.k / sqrt(d) + bias(lag))
    with the bank's addend (G or log G, KernelBank.bias) read from a table over lags, as the
    fused path computes it for a whole window."""

    def __init__(self, model):
        if not all(isinstance(b.attn, GPAAttention) for b in model.blocks):
            raise ValueError("CachedWindow needs GPA attention in every block; use RecomputedWindow")
        self.model = model
        lags = torch.arange(model.context, device=model.lm_head.weight.device)
        with torch.no_grad():
            self.tables = [b.attn.bank.bias(lags) for b in model.blocks]  # [H, context] each
        self.keys = self.values = None
        self.length = 0

    def reset(self, tokens: torch.Tensor) -> torch.Tensor:
        self.keys, self.values = [None] * len(self.model.blocks), [None] * len(self.model.blocks)
        self.length = 0
        return self.push(tokens)

    @torch.no_grad()
    def push(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [S, vocab] after `tokens` [S, n], which continue the window."""
        m, start, n = self.model, self.length, tokens.shape[1]
        if start + n > m.context:
            raise ValueError(f"window of {start + n} tokens exceeds the context {m.context}")
        pos = torch.arange(start + n, device=tokens.device)
        lag = pos[start:, None] - pos[None, :]  # [n, start + n]: query position - key position
        x = m.drop(m.tok_emb(tokens))
        for i, block in enumerate(m.blocks):
            attn = block.attn
            p = attn.prepare(block.ln_1(x), offset=start)
            if self.keys[i] is not None:
                p.k, p.v = torch.cat((self.keys[i], p.k), dim=2), torch.cat((self.values[i], p.v), dim=2)
            self.keys[i], self.values[i] = p.k, p.v
            allowed = lag >= 0 if attn.window is None else (lag >= 0) & (lag < attn.window)
            bias = self.tables[i][:, lag.clamp(min=0)].masked_fill(~allowed, float("-inf"))
            heads = F.scaled_dot_product_attention(p.q, p.k, p.v, attn_mask=bias.to(p.q.dtype))
            x = x + block.attn_drop(attn.proj_out(attn.merge_heads(heads)))
            x = x + block.mlp(block.ln_2(x))
        self.length = start + n
        return m.lm_head(m.ln_f(x[:, -1]))


def make_window(model, cached: bool | None = None):
    """CachedWindow for GPA models (unless cached=False), RecomputedWindow otherwise."""
    gpa = all(isinstance(b.attn, GPAAttention) for b in model.blocks)
    if cached is None:
        cached = gpa
    return CachedWindow(model) if cached else RecomputedWindow(model)


@torch.no_grad()
def sample_streams(model, prompts: torch.Tensor, n_new: int, *, temperature: float = 1.0,
                   generator: torch.Generator | None = None, cached: bool | None = None) -> torch.Tensor:
    """[S, n_new] tokens sampled after prompts [S, P] (module docstring for the window schedule).

    temperature > 0 divides the logits; the draws use `generator` (on the model's device),
    so a seeded generator gives the same text again on the same machine."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    was_training = model.training
    model.eval()
    try:
        context, keep = model.context, max(1, model.context // 2)
        window = make_window(model, cached)
        recent = prompts[:, -context:]
        logits = window.reset(recent)
        out = torch.empty(prompts.shape[0], n_new, dtype=torch.long, device=prompts.device)
        for t in range(n_new):
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator)
            out[:, t] = tok[:, 0]
            if t == n_new - 1:
                break
            recent = torch.cat((recent, tok), dim=1)[:, -context:]
            if window.length + 1 > context:  # the window is full: restart it
                recent = recent[:, -keep:]
                logits = window.reset(recent)
            else:
                logits = window.push(tok)
        return out
    finally:
        model.train(was_training)
