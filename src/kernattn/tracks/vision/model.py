"""DeiT-style ViTs from timm with the registry's attention in every block.

timm's VisionTransformer takes an `attn_layer` callable; `RegistryAttention` adapts a
registry module (bidirectional) to the interface timm's Block calls, so the ViT itself (patch
embedding, class token, position embedding, blocks, drop path, head, init) is timm's own.

`ViTSpec.variant` is a vision row's variant: one of the paper's names (config.vision.VARIANTS:
deit = softmax, vlt = valueless, gka) or any registry variant, with `ViTSpec.attention_options`
(the row's options) over the vision defaults (config.vision.VISION_DEFAULTS: no 1-D position
scheme, DeiT's qkv biases where the variant has a `bias` option). Every variant that is defined on a set of tokens runs: softmax (DeiT), VLT,
GKA, the NW kernels exp_dot / gaussian / yat / linear, FAVOR+. A variant that applies a
position scheme along the token order (GPA's kernel banks, ALiBi, T5 buckets, the free lag
table, RoPE, learned RoPE, GKA's rope) stops with one line: on a patch grid i - j would be a
raster offset (a patch and the one below it 1 row x grid apart, the class token at lag 0 to
the first patch), not a spatial lag, and the ViT's positions are timm's learned 2-D embedding.

DeiT's attention has biases on the qkv and output projections: the registry's softmax takes
`bias=True` for the former, and W_O is swapped for a biased Linear here (the registry's is
bias-free), which is what makes the parameter counts match timm's deit_*_patch16_224 exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ... import attention
from ...attention.registry import freeze_options
from ...config import resolve_attention
from ...config.vision import VARIANTS, VISION_DEFAULTS, check_position_free

# The paper's model sizes (gka-paper Table 2): name -> (embed_dim, depth, heads).
SIZES = {"Ti": (192, 12, 3), "S": (384, 12, 6), "B": (768, 12, 12)}


class RegistryAttention(nn.Module):
    """A registry attention module behind timm's Attention signature. timm wants a class
    (it checks `issubclass`), so `attention_layer(variant, options)` makes one per variant."""

    variant: str = "softmax"
    options: dict = {}

    def __init__(self, dim: int, num_heads: int = 8, proj_bias: bool = True, **_timm_args):
        super().__init__()
        self.inner = attention.build(self.variant, d_model=dim, n_head=num_heads, causal=False, **self.options)
        self.inner.proj_out = nn.Linear(dim, dim, bias=proj_bias)

    def forward(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        if attn_mask is not None or is_causal:
            raise ValueError("RegistryAttention is bidirectional: no attn_mask / is_causal")
        return self.inner(x)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """[B, H, N, N] weights of this block for its (normalised) input x."""
        return self.inner.attention_weights(x)


@dataclass(frozen=True)
class ViTSpec:
    variant: str = "deit"       # a key of params.VARIANTS or a registry variant
    img_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 192
    depth: int = 12
    n_head: int = 3
    mlp_ratio: float = 4.0
    drop_path: float = 0.0
    attention_options: tuple = ()  # the row's options as sorted (key, value) pairs (freeze_options)

    @property
    def attention(self) -> tuple[str, dict]:
        """(registry name, options) after aliases and the vision defaults, then the row's."""
        name, options = resolve_attention(self.variant, {}, VARIANTS, VISION_DEFAULTS)
        return name, options | dict(self.attention_options)


def spec_from_params(vp, variant: str, in_chans: int, num_classes: int, options: dict | None = None) -> ViTSpec:
    return ViTSpec(variant, vp.img_size, vp.patch_size, in_chans, num_classes, vp.embed_dim, vp.depth,
                   vp.n_head, vp.mlp_ratio, vp.drop_path,
                   freeze_options(options))


def paper_spec(variant: str, size: str, options: dict | None = None) -> ViTSpec:
    dim, depth, heads = SIZES[size]
    return ViTSpec(variant, embed_dim=dim, depth=depth, n_head=heads, attention_options=freeze_options(options))


def build_vit(spec: ViTSpec) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    name, options = spec.attention
    layer = type(f"Registry_{name}", (RegistryAttention,), {"variant": name, "options": options})
    model = VisionTransformer(
        img_size=spec.img_size, patch_size=spec.patch_size, in_chans=spec.in_chans,
        num_classes=spec.num_classes, embed_dim=spec.embed_dim, depth=spec.depth, num_heads=spec.n_head,
        mlp_ratio=spec.mlp_ratio, qkv_bias=True, proj_bias=True, drop_path_rate=spec.drop_path,
        class_token=True, global_pool="token", attn_layer=layer,
    )
    check_position_free(spec.variant, name, options, attention_modules(model)[0].inner)
    return model


def attention_modules(model: nn.Module) -> list[RegistryAttention]:
    """The RegistryAttention of each block, in depth order."""
    return [blk.attn for blk in model.blocks]
