"""Tables 2, 3 and 5 of seed 003: parameters, sigma scalars, forward FLOPs, checkpoint size.

Models are built on the meta device (no memory, no init cost) and run once at batch 1 under
`torch.utils.flop_counter.FlopCounterMode`, which counts 2 FLOPs per multiply-accumulate of
every matmul, convolution and SDPA call (elementwise ops, softmax, exp, norms: not counted).

Units. DeiT-Ti is about 1.26 G multiply-accumulates per 224 px image (the number timm / fvcore
print as "GFLOPs"); the paper's 2.51 G is twice that, so the paper counts FLOPs = 2 x MACs, the
same convention as FlopCounterMode. The checkpoint size is the float32 parameters in MiB
(2^20 bytes): DeiT-Ti's 5,717,416 x 4 bytes = 21.8 MiB against the paper's 21.9 "MB".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from .models import SIZES, ViTSpec, build_vit, paper_spec

MIB = 2 ** 20


@dataclass(frozen=True)
class Counts:
    model: str
    variant: str
    total: int
    attn: int
    mlp: int
    sigma: int
    flops: int
    ckpt_bytes: int

    def row(self) -> dict:
        d = asdict(self)
        d.update(total_m=self.total / 1e6, attn_m=self.attn / 1e6, mlp_m=self.mlp / 1e6,
                 flops_g=self.flops / 1e9, ckpt_mib=self.ckpt_bytes / MIB)
        return d


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """total; attention (everything under each block's .attn: W_Q/K/V, W_O, biases, log-sigma);
    MLP (each block's .mlp); sigma (the log-sigma scalars)."""
    out = {"total": 0, "attn": 0, "mlp": 0, "sigma": 0}
    for name, p in model.named_parameters():
        n = p.numel()
        out["total"] += n
        parts = name.split(".")
        if parts[0] == "blocks" and parts[2] == "attn":
            out["attn"] += n
        if parts[0] == "blocks" and parts[2] == "mlp":
            out["mlp"] += n
        if parts[-1] == "log_sigma":
            out["sigma"] += n
    return out


def forward_flops(model: torch.nn.Module, spec: ViTSpec, device: str | torch.device = "meta") -> int:
    """FLOPs of one forward pass of one image (FlopCounterMode, 2 per multiply-accumulate)."""
    x = torch.zeros(1, spec.in_chans, spec.img_size, spec.img_size, device=device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x)
    return int(counter.get_total_flops())


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """Bytes of the float32 state dict's tensors (what torch.save writes, less its small header)."""
    return sum(t.numel() * 4 for t in model.state_dict().values())


def count(spec: ViTSpec, label: str = "") -> Counts:
    with torch.device("meta"):
        model = build_vit(spec)
    model.eval()
    pc = parameter_counts(model)
    return Counts(label or spec.variant, spec.variant, pc["total"], pc["attn"], pc["mlp"], pc["sigma"],
                  forward_flops(model, spec), checkpoint_bytes(model))


def paper_models() -> list[Counts]:
    """The six models of Tables 2/3 (DeiT and GKA at Ti/S/B) and VLT-Ti (Table 5), 224 px."""
    rows = []
    for size in SIZES:
        for variant, name in (("deit", "DeiT"), ("gka", "GKA")):
            rows.append(count(paper_spec(variant, size), f"{name}-{size}"))
    rows.append(count(paper_spec("vlt", "Ti"), "VLT-Ti"))
    return rows
