"""A GPT in the nanochat style with a depth knob, and its two attentions (seed 003 section 5).

Shape from one number: model_dim = aspect_ratio x depth, heads of head_dim (64 x 20 = 1280,
10 heads of 128 at depth 20). Blocks are pre-norm with parameter-free RMS norms, per-layer
residual scalars (x <- a_l x + b_l x0, x0 the embedded input), and a ReLU^2 MLP (4x); the
unembedding is untied and its logits are soft-capped (softcap x tanh(z / softcap)).

Attention per layer, causal, with the sliding-window pattern (e.g. "SSSL" tiled over the
layers, the last layer always L; S keeps `short_window` keys, L all of them):
- base: nanochat's: bias-free W_Q, W_K, W_V, W_O; RoPE on q and k, then a parameter-free RMS
  norm of each head (times QK_GAIN); value embeddings (a vocab x kv_dim table) added to v on
  alternating layers through a per-head sigmoid gate read from the first VE_GATE_CHANNELS
  channels of the block input.
- gka: the registry's `gka` (projection-free Gaussian kernel with a per-head bandwidth) with
  its LM options rope + qk_norm: no W_Q, W_K, W_V, so no value embeddings either (there is
  no v to add them to, and the paper's 378M count has none).
Both run the same fused masked kernel (kernattn.attention.fused.attend): FlexAttention with a
block mask on CUDA, SDPA per query block with the window's key range on CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .. import attention
from ..attention.fused import attend
from ..attention.positions import Rope

QK_GAIN = 1.2  # nanochat scales q and k by 1.2 after their RMS norm (notes/anchors.md)
VE_GATE_CHANNELS = 32
VARIANTS = ("base", "gka")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    depth: int
    aspect_ratio: int = 64
    head_dim: int = 128
    context: int = 2048
    window_pattern: str = "SSSL"
    short_window: int | None = None
    value_embeds: bool = True
    rope_base: float = 100000.0
    softcap: float = 15.0
    variant: str = "base"

    @property
    def dim(self) -> int:
        return self.aspect_ratio * self.depth

    @property
    def n_head(self) -> int:
        return max(1, self.dim // self.head_dim)

    @property
    def uses_value_embeds(self) -> bool:
        return self.value_embeds and self.variant == "base"

    @classmethod
    def from_params(cls, lm, vocab_size: int, variant: str) -> "GPTConfig":
        return cls(vocab_size=vocab_size, depth=lm.depth, aspect_ratio=lm.aspect_ratio, head_dim=lm.head_dim,
                   context=lm.context, window_pattern=lm.window_pattern, short_window=lm.short_window,
                   value_embeds=lm.value_embeds, rope_base=lm.rope_base, softcap=lm.softcap, variant=variant)


def layer_windows(pattern: str, depth: int, context: int, short: int | None) -> list[int | None]:
    """Per layer: the number of keys a query may see (itself included), None for all.

    The pattern is tiled over the layers and the last layer is always L. S defaults to half
    the context: with it the attention term of nanochat's FLOPs/token reproduces seed 003's
    Table 8 (3.0042e9 and 2.4143e9 at depth 20, context 2048)."""
    short = max(1, context // 2) if short is None else short
    chars = [pattern.upper()[i % len(pattern)] for i in range(depth)]
    chars[-1] = "L"
    return [None if c == "L" or short >= context else short for c in chars]


def has_value_embed(layer: int, depth: int) -> bool:
    """Alternating layers, the last one included (nanochat)."""
    return layer % 2 == (depth - 1) % 2


def norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],))


class BaseAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int, window: int | None):
        super().__init__()
        self.n_head, self.head_dim, self.window = cfg.n_head, cfg.dim // cfg.n_head, window
        d = cfg.dim
        self.c_q, self.c_k, self.c_v = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.c_proj = nn.Linear(d, d, bias=False)
        self.ve_gate = (nn.Linear(VE_GATE_CHANNELS, self.n_head, bias=False)
                        if cfg.uses_value_embeds and has_value_embed(layer, cfg.depth) else None)
        self.rope = Rope(self.head_dim, cfg.rope_base)

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_head, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.heads(self.c_q(x)), self.heads(self.c_k(x)), self.heads(self.c_v(x))
        if ve is not None and self.ve_gate is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))  # [B, N, H]
            v = v + gate.transpose(1, 2).unsqueeze(-1) * self.heads(ve)
        q, k = norm(self.rope(q)) * QK_GAIN, norm(self.rope(k)) * QK_GAIN
        y = attend(q, k, v, causal=True, window=self.window)
        b, h, n, dh = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(b, n, h * dh))


class GKAAttention(nn.Module):
    """The registry's gka (rope + qk_norm), ignoring value embeddings (it has no v)."""

    def __init__(self, cfg: GPTConfig, window: int | None):
        super().__init__()
        self.inner = attention.build("gka", d_model=cfg.dim, n_head=cfg.n_head, causal=True, window=window,
                                     rope=True, qk_norm=True, rope_base=cfg.rope_base)
        self.c_proj = self.inner.proj_out  # the one learned matrix: initialised like base's c_proj

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner(x)


class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.c_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int, window: int | None):
        super().__init__()
        self.attn = BaseAttention(cfg, layer, window) if cfg.variant == "base" else GKAAttention(cfg, window)
        self.mlp = MLP(cfg.dim)

    def forward(self, x, ve=None):
        x = x + self.attn(norm(x), ve)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.variant not in VARIANTS:
            raise ValueError(f"unknown LM variant {cfg.variant!r}; valid: {', '.join(VARIANTS)}")
        self.cfg = cfg
        self.windows = layer_windows(cfg.window_pattern, cfg.depth, cfg.context, cfg.short_window)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, i, w) for i, w in enumerate(self.windows))
        self.value_embeds = nn.ModuleDict(
            {str(i): nn.Embedding(cfg.vocab_size, cfg.dim)
             for i in range(cfg.depth) if cfg.uses_value_embeds and has_value_embed(i, cfg.depth)})
        self.resid_lambdas = nn.Parameter(torch.ones(cfg.depth))
        self.x0_lambdas = nn.Parameter(torch.zeros(cfg.depth))
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if not any(p.is_meta for p in self.parameters()):
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nanochat-like: unit-normal embeddings, uniform input matrices of std d^-1/2, zero
        output projections (each block starts as the identity), a tiny unembedding."""
        d = self.cfg.dim
        bound = math.sqrt(3.0 / d)
        for emb in (self.wte, *self.value_embeds.values()):
            nn.init.normal_(emb.weight, std=1.0)
        for block in self.blocks:
            for name, lin in block.named_modules():
                if isinstance(lin, nn.Linear):
                    if name.endswith("c_proj") or name.endswith("proj_out"):
                        nn.init.zeros_(lin.weight)
                    elif name.endswith("ve_gate"):
                        nn.init.zeros_(lin.weight)
                    else:
                        nn.init.uniform_(lin.weight, -bound, bound)
        nn.init.normal_(self.lm_head.weight, std=0.001)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, N] -> logits [B, N, vocab] (float32, soft-capped)."""
        if idx.shape[1] > self.cfg.context:
            raise ValueError(f"sequence of {idx.shape[1]} tokens exceeds the context {self.cfg.context}")
        x = x0 = norm(self.wte(idx))
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve)
        logits = self.lm_head(norm(x)).float()
        c = self.cfg.softcap
        return c * torch.tanh(logits / c)

    # ------------------------------------------------------------------ counts
    def param_counts(self) -> dict[str, int]:
        """Parameters by group; `total` is their sum, `scaling` nanochat's (matrices + lm_head)."""
        def count(mods):
            return sum(p.numel() for m in mods for p in m.parameters())

        attn = count(b.attn for b in self.blocks)
        out = {
            "wte": self.wte.weight.numel(),
            "value_embeds": count(self.value_embeds.values()),
            "attention": attn,
            "mlp": count(b.mlp for b in self.blocks),
            "lm_head": self.lm_head.weight.numel(),
            "scalars": self.resid_lambdas.numel() + self.x0_lambdas.numel(),
        }
        out["total"] = sum(out.values())
        out["scaling"] = out["attention"] + out["mlp"] + out["lm_head"]
        assert out["total"] == sum(p.numel() for p in self.parameters())
        return out


def build_model(cfg: GPTConfig, device: str | torch.device = "cpu") -> GPT:
    with torch.device(device):
        return GPT(cfg)
