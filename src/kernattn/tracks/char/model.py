"""A character-level GPT (gpa-short/gpa-long) with the attention variant as a plug-in.

Architecture (gpa-short sec. 2.3, gpa-long sec. 3: "four blocks, each containing four attention
heads and a feedforward layer ... a layer norm and the usual embedding and unembedding layers"):

    x = Dropout(Embedding(idx))                              # token embedding only
    for each of n_layer blocks (pre-norm):
        x = x + Dropout(Attention(LayerNorm(x)))             # registry variant, causal
        x = x + Dropout(W_2 GELU(W_1 LayerNorm(x)))          # MLP, hidden = mlp_ratio * d
    logits = Unembedding(LayerNorm(x))                        # untied, no bias

Decisions:
- No learned absolute position embedding: every position signal comes from the attention
  variant (RoPE rotates q/k, ALiBi/T5/lag_table/GPA add a lag bias). `softmax` with
  position "none" and `gka` (without its rope option) therefore see no positions except
  through the causal mask; for GKA that is the paper's design (gka-paper) and is kept.
- Untied embedding and unembedding: the seeds name them as two layers ("embedding and
  unembedding layers"); the unembedding is a bias-free Linear(d, vocab).
- Biases: LayerNorms and the MLP Linears have biases (GPT-2); the attention projections
  follow the variant's `bias` option (default False) and W_O has none.
- Dropout (model.dropout) after the embedding and on both residual branches; the registry's
  attention modules have no internal (attention-weight) dropout.
- Init (GPT-2): every Linear and Embedding weight ~ N(0, 0.02), Linear biases 0, LayerNorm
  (1, 0); the residual output projections (the attention's `proj_out` and the MLP's `proj`)
  ~ N(0, 0.02 / sqrt(2 n_layer)). Parameters owned by an attention variant that are not
  Linear weights (GPA kernel banks, GKA log_sigma, T5 / lag-table biases, learned RoPE
  frequencies) keep the variant's own initialisation (gpa-long's bank init, zeros, ...).

Parameter count at paper scale (vocab 93, 4 blocks x 4 heads, d 512, ctx 256, mlp_ratio 4),
static RoPE: 12,697,600 in all, 12,602,368 without the embedding and unembedding
(per block 4 d^2 attention + 8 d^2 + 5 d MLP + 4 d LayerNorm = 3,150,336; x 4 blocks;
+ 2 d final LayerNorm; 2 x 93 x 512 = 95,232 for the two vocabulary layers). gpa-long says
"a GPT model consisting of 13.8m weights" without giving the layer shapes; the ~1.1M (about
9%) gap is close to one extra d x d matrix per block (4 d^2 = 1,048,576) and cannot be
pinned down from the text (a learned position table would add only ctx x d = 131,072,
biases on every projection about 20k, tying would remove 47,616). Its "4,096 extra
parameters" for GPA (M = 64) is exactly ours: 4 M per head x 4 heads x 4 blocks
(`extra_params()`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ... import attention

INIT_STD = 0.02


def count_params(module: nn.Module) -> int:
    """Number of scalar parameters (each shared tensor counted once)."""
    return sum(p.numel() for p in module.parameters())


class MLP(nn.Module):
    def __init__(self, d_model: int, mlp_ratio: int, dropout: float):
        super().__init__()
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.proj = nn.Linear(mlp_ratio * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-norm transformer block: LN -> attention -> residual; LN -> MLP -> residual."""

    def __init__(self, d_model: int, n_head: int, mlp_ratio: int, dropout: float,
                 variant: str, options: dict[str, Any], impl: str = "fast"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = attention.build(variant, d_model=d_model, n_head=n_head, causal=True,
                                    impl=impl, **options)
        self.attn_drop = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, mlp_ratio, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_drop(self.attn(self.ln_1(x)))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Char-level GPT. `model_params` is a config.ModelParams (or anything with its fields)."""

    def __init__(self, vocab_size: int, model_params, variant: str, options: dict[str, Any] | None = None,
                 impl: str = "fast"):
        super().__init__()
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        m = model_params
        self.vocab_size = vocab_size
        self.context = m.context
        self.n_layer, self.n_head, self.d_model, self.mlp_ratio = m.n_layer, m.n_head, m.d_model, m.mlp_ratio
        self.variant, self.options = variant, dict(options or {})
        self.tok_emb = nn.Embedding(vocab_size, m.d_model)
        self.drop = nn.Dropout(m.dropout)
        self.blocks = nn.ModuleList(
            Block(m.d_model, m.n_head, m.mlp_ratio, m.dropout, variant, self.options, impl)
            for _ in range(m.n_layer)
        )
        self.ln_f = nn.LayerNorm(m.d_model)
        self.lm_head = nn.Linear(m.d_model, vocab_size, bias=False)
        self.reset_parameters()

    # --------------------------------------------------------------------- init
    def reset_parameters(self) -> None:
        """GPT-2 init of Linear/Embedding/LayerNorm; variant-owned parameters are left alone."""
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                nn.init.normal_(mod.weight, mean=0.0, std=INIT_STD)
                if mod.bias is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, nn.Embedding):
                nn.init.normal_(mod.weight, mean=0.0, std=INIT_STD)
            elif isinstance(mod, nn.LayerNorm):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
        residual_std = INIT_STD / math.sqrt(2 * self.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj_out.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=residual_std)

    # --------------------------------------------------------------------- forward
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, N] (N <= context) token ids -> logits [B, N, vocab_size]."""
        if idx.dim() != 2:
            raise ValueError(f"expected idx of shape [B, N], got {tuple(idx.shape)}")
        if idx.shape[1] > self.context:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds the model context {self.context}")
        x = self.drop(self.tok_emb(idx))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats per character) of next-token predictions, in float32."""
        logits = self(idx)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))

    # --------------------------------------------------------------------- counts
    def num_params(self, non_embedding: bool = False) -> int:
        """All parameters; `non_embedding=True` leaves out the embedding and unembedding."""
        n = count_params(self)
        if non_embedding:
            n -= self.tok_emb.weight.numel() + self.lm_head.weight.numel()
        return n

    def extra_params(self) -> int:
        """Parameters of this model minus those of the same model with plain softmax attention
        and no position scheme (the attention's positional / kernel parameters; negative for
        GKA, which has no W_Q, W_K, W_V)."""
        with torch.device("meta"):
            base = attention.build("softmax", d_model=self.d_model, n_head=self.n_head, causal=True,
                                   position="none")
        ours = sum(count_params(b.attn) for b in self.blocks)
        return ours - self.n_layer * count_params(base)

    def variant_parameters(self) -> list[nn.Parameter]:
        """The attention variants' own parameters (GPA banks, GKA log sigma, T5 / lag tables,
        learned RoPE frequencies): those of each block's attention outside its nn.Linear and
        norm layers (attention.owned_parameters)."""
        return list(attention.owned_parameters(self).values())

    def param_groups(self, weight_decay: float, variant_lr_scale: float = 1.0) -> list[dict[str, Any]]:
        """AdamW groups: weight decay on the weights of nn.Linear layers only (attention
        projections, MLP, unembedding); none on biases, LayerNorms, the token embedding and
        every variant-owned parameter (variant_parameters), which would otherwise be pulled
        towards 0 = a different kernel. Each group's `lr_scale` multiplies the schedule's lr
        (the variant-owned group: `variant_lr_scale`, train.variant_lr_scale)."""
        decay_ids = {id(m.weight) for m in self.modules() if isinstance(m, nn.Linear)}
        variant = self.variant_parameters()
        variant_ids = {id(p) for p in variant}
        decay, no_decay = [], []
        for p in self.parameters():
            if p.requires_grad and id(p) not in variant_ids:
                (decay if id(p) in decay_ids else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": weight_decay, "lr_scale": 1.0},
            {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
        ]
        return groups + ([{"params": variant, "weight_decay": 0.0, "lr_scale": variant_lr_scale}] if variant else [])
