"""A GPT in the nanochat style with a depth knob, and any attention of the registry.

nanochat's GPT at commit c7ba252 (config.lm.NANOCHAT_COMMIT), the same function to float32
rounding (tests/test_nanochat_golden.py); nanochat_io.py maps its checkpoints.
Shape from one number: model_dim = aspect_ratio x depth, heads of head_dim (64 x 20 = 1280,
10 heads of 128 at depth 20). Blocks are pre-norm with parameter-free RMS norms, per-layer
residual scalars (x <- a_l x + b_l x0, x0 the embedded input; a_l, b_l start at
cfg.resid_lambda_init, cfg.x0_lambda_init), and a ReLU^2 MLP (4x); the unembedding is untied
and its logits are soft-capped (softcap x tanh(z / softcap)).

Attention per layer is the registry's variant `cfg.variant` with `cfg.attention_options`,
causal, with the sliding-window pattern (e.g. "SSSL" tiled over the layers, the last layer
always L; S keeps `short_window` keys, by default nanochat's context // 2 + 1, L all of them). Options a row leaves out take the LM's
nanochat defaults (`lm_defaults`): RoPE at cfg.rope_base, parameter-free QK RMS norm times
cfg.qk_gain (1.0 at c7ba252: no gain) wherever the variant has those options. So:
- `softmax` (alias `base`) is nanochat's attention: bias-free W_Q, W_K, W_V, W_O; RoPE on q
  and k, then the QK norm (times qk_gain);
- `gka` is gka-paper's GKA-LM (projection-free Gaussian kernel, rope + qk_norm);
- gpa, alibi / t5 / lag_table (softmax positions), learned RoPE, valueless (VLT), nw and
  favor run with the same windows (lag biases: FlexAttention block masks on CUDA, the blocked
  CPU path here; FAVOR+ its chunked window form). A variant without a window form for some
  layer stops with one line naming lm.window_pattern.
Value embeddings (a vocab x dim table added to v on alternating layers through a per-head
sigmoid gate read from the first VE_GATE_CHANNELS channels of the block input) exist for
variants with a value projection only (not gka, not valueless: there is no v to add them
to, and the paper's 378M GKA count has none); `GPT.value_embed_layers` says which layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ... import attention
from ...attention import registry
from ...attention.positions import Rope
from ...attention.registry import freeze_options
from ...config.lm import ALIASES, layer_windows, lm_defaults
from ...config.rows import resolve_attention

VE_GATE_CHANNELS = 32
VARIANTS = ("base", "gka")  # the two models of gka-paper's Table 8 (the benchmark's LM pair)


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
    rope_base: float = 10000.0
    qk_gain: float = 1.0
    resid_lambda_init: float = 1.0
    x0_lambda_init: float = 0.1
    softcap: float = 15.0
    rope_bf16: bool = True  # RoPE's cos/sin tables stored in bfloat16 (nanochat c7ba252)
    variant: str = "base"  # a registry variant name, or the alias base (= softmax)
    attention_options: tuple[tuple[str, Any], ...] = ()  # the row's options (freeze_options)

    @property
    def dim(self) -> int:
        return self.aspect_ratio * self.depth

    @property
    def n_head(self) -> int:
        return max(1, self.dim // self.head_dim)

    @property
    def attention(self) -> tuple[str, dict[str, Any]]:
        """(registry name, options): the row's options over the LM defaults the variant has
        (AttentionConfigError names the valid variants)."""
        return resolve_attention(self.variant, dict(self.attention_options), ALIASES,
                                 lm_defaults(self.rope_base, self.qk_gain))

    @property
    def uses_value_embeds(self) -> bool:
        return self.value_embeds and registry.variant(self.attention[0]).module.has_value_projection

    @classmethod
    def from_params(cls, lm, vocab_size: int, variant: str, options: dict[str, Any] | None = None) -> "GPTConfig":
        return cls(vocab_size=vocab_size, depth=lm.depth, aspect_ratio=lm.aspect_ratio, head_dim=lm.head_dim,
                   context=lm.context, window_pattern=lm.window_pattern, short_window=lm.short_window,
                   value_embeds=lm.value_embeds, rope_base=lm.rope_base, qk_gain=lm.qk_gain,
                   resid_lambda_init=lm.resid_lambda_init, x0_lambda_init=lm.x0_lambda_init, softcap=lm.softcap,
                   rope_bf16=lm.rope_bf16, variant=variant, attention_options=freeze_options(options))


def has_value_embed(layer: int, depth: int) -> bool:
    """Alternating layers, the last one included (nanochat)."""
    return layer % 2 == (depth - 1) % 2


def norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],))


class Attention(nn.Module):
    """The registry's module (`inner`) plus this layer's value-embedding gate, if any."""

    def __init__(self, cfg: GPTConfig, layer: int, window: int | None):
        super().__init__()
        name, options = cfg.attention
        try:
            self.inner = attention.build(name, d_model=cfg.dim, n_head=cfg.n_head, causal=True, window=window,
                                         **options)
        except attention.AttentionConfigError as e:
            where = (f" (lm.window_pattern={cfg.window_pattern!r} gives layer {layer} a window of {window})"
                     if window is not None and "window" in str(e) else "")
            raise attention.AttentionConfigError(f"LM attention {cfg.variant!r}: {e}{where}") from None
        max_len = getattr(getattr(self.inner, "lag_bias", None), "max_len", None)
        if max_len is not None and max_len < cfg.context:  # else the first full-length batch fails
            raise attention.AttentionConfigError(
                f"LM attention {cfg.variant!r}: option max_len={max_len} is shorter than lm.context={cfg.context}; "
                f"set max_len >= {cfg.context}")
        self.n_head = cfg.n_head
        self.ve_gate = (nn.Linear(VE_GATE_CHANNELS, self.n_head, bias=False)
                        if cfg.uses_value_embeds and has_value_embed(layer, cfg.depth) else None)

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None = None) -> torch.Tensor:
        if ve is None or self.ve_gate is None:
            return self.inner(x)
        gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))  # [B, N, H]
        return self.inner(x, v_add=gate.transpose(1, 2).unsqueeze(-1) * self.inner.split_heads(ve))


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
        self.attn = Attention(cfg, layer, window)
        self.mlp = MLP(cfg.dim)

    def forward(self, x, ve=None):
        x = x + self.attn(norm(x), ve)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.windows = layer_windows(cfg.window_pattern, cfg.depth, cfg.context, cfg.short_window)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, i, w) for i, w in enumerate(self.windows))
        self.value_embeds = nn.ModuleDict(
            {str(i): nn.Embedding(cfg.vocab_size, cfg.dim)
             for i in range(cfg.depth) if cfg.uses_value_embeds and has_value_embed(i, cfg.depth)})
        self.resid_lambdas = nn.Parameter(torch.full((cfg.depth,), cfg.resid_lambda_init))
        self.x0_lambdas = nn.Parameter(torch.full((cfg.depth,), cfg.x0_lambda_init))
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        for m in self.modules():  # every rotary table, whichever variant holds it
            if isinstance(m, Rope):
                m.table_dtype = torch.bfloat16 if cfg.rope_bf16 else None
        if not any(p.is_meta for p in self.parameters()):
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nanochat's init_weights, in its order (so one seed draws the same numbers): a
        unit-normal token embedding, a tiny unembedding (std 0.001), uniform input matrices of
        std d^-1/2 and zero output projections (each block starts as the identity), value
        embeddings uniform like W_V (they are added to v), zero gates, the residual scalars at
        their configured inits."""
        d = self.cfg.dim
        bound = math.sqrt(3.0 / d)  # uniform(-b, b) has std b / sqrt(3) = d^-1/2
        nn.init.normal_(self.wte.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)
        for block in self.blocks:
            for name, lin in block.named_modules():
                if isinstance(lin, nn.Linear):
                    zero = name.endswith(("c_proj", "proj_out", "ve_gate"))  # W_O, the MLP's output, gates
                    nn.init.zeros_(lin.weight) if zero else nn.init.uniform_(lin.weight, -bound, bound)
        for emb in self.value_embeds.values():
            nn.init.uniform_(emb.weight, -bound, bound)
        self.resid_lambdas.fill_(self.cfg.resid_lambda_init)
        self.x0_lambdas.fill_(self.cfg.x0_lambda_init)

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

    @property
    def value_embed_layers(self) -> list[int]:
        """The layers whose values get a value embedding (none for gka / valueless)."""
        return sorted(int(i) for i in self.value_embeds)

    def linear_weights(self) -> dict[str, nn.Parameter]:
        """The weights of every Linear layer (the matrices that multiply activations): the
        parameters to weight-decay. Embeddings, residual scalars and the attention's
        elementwise parameters (kernel banks, lag tables, T5 buckets, bandwidths, learned RoPE
        frequencies, all 2-D or 1-D) are not among them."""
        return {f"{name}.weight": m.weight for name, m in self.named_modules() if isinstance(m, nn.Linear)}

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
