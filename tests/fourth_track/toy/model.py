"""The toy model: token embedding, one registry attention layer (the row's variant), a linear
read-out. Causal, so a position sees only the tokens before it, the lagged one included."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ... import attention


class Toy(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_head: int, variant: str, options: dict[str, Any]):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.attn = attention.build(variant, d_model=d_model, n_head=n_head, causal=True, **options)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        return self.head(x + self.attn(x))
