"""Tables 2, 3 and 5 of gka-paper: parameters, sigma scalars, forward FLOPs, checkpoint size.

Models are built on the meta device (no memory, no init cost) and run once at batch 1 under
`torch.utils.flop_counter.FlopCounterMode`, which counts 2 FLOPs per multiply-accumulate of
every matmul, convolution and SDPA call (elementwise ops, softmax, exp, norms: not counted).

Units. DeiT-Ti is about 1.26 G multiply-accumulates per 224 px image (the number timm / fvcore
print as "GFLOPs"); the paper's 2.51 G is twice that, so the paper counts FLOPs = 2 x MACs, the
same convention as FlopCounterMode. The checkpoint size is the float32 parameters in MiB
(2^20 bytes): DeiT-Ti's 5,717,416 x 4 bytes = 21.8 MiB against the paper's 21.9 "MB".
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from ...io import atomic_write_json
from .data import SHAPES
from .model import SIZES, ViTSpec, attention_modules, build_vit, paper_spec, spec_from_params
from ...config import params_from_args

OUTPUT = "counts.json"

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
    # FLOPs of zero padding (GKA, nw gaussian): the fast path pads the per-head width d + 1 of
    # its SDPA call to a multiple of 8 (attention/gka.py), so q k^T and W V run at that width.
    pad_flops: int = 0

    def row(self) -> dict:
        d = asdict(self)
        d.update(total_m=self.total / 1e6, attn_m=self.attn / 1e6, mlp_m=self.mlp / 1e6,
                 flops_g=self.flops / 1e9, flops_unpadded_g=(self.flops - self.pad_flops) / 1e9,
                 ckpt_mib=self.ckpt_bytes / MIB)
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
                  forward_flops(model, spec), checkpoint_bytes(model), pad_flops(model, spec))


def pad_flops(model: torch.nn.Module, spec: ViTSpec) -> int:
    """Forward FLOPs spent on zero padding: each block's attention says its own (N = patches + 1)."""
    n = (spec.img_size // spec.patch_size) ** 2 + 1
    return int(sum(m.inner.mixing_flops(n, n).padding_forward for m in attention_modules(model)))


def paper_models() -> list[Counts]:
    """The six models of Tables 2/3 (DeiT and GKA at Ti/S/B) and VLT-Ti (Table 5), 224 px."""
    rows = []
    for size in SIZES:
        for variant, name in (("deit", "DeiT"), ("gka", "GKA")):
            rows.append(count(paper_spec(variant, size), f"{name}-{size}"))
    rows.append(count(paper_spec("vlt", "Ti"), "VLT-Ti"))
    return rows


def configured_models(vp) -> list[Counts]:
    """Each row of vision.rows at the configured size (the pipeline's Table 5), named by the row."""
    in_chans, classes = SHAPES[vp.dataset]
    return [count(spec_from_params(vp, r.variant, in_chans, classes, r.options), r.name) for r in vp.rows]


def run(args: argparse.Namespace) -> int:
    vp = params_from_args(args).vision
    doc = {"paper_models": [c.row() for c in paper_models()],
           "configured": [c.row() for c in configured_models(vp)],
           "configured_shape": {"dataset": vp.dataset, "img_size": vp.img_size, "patch_size": vp.patch_size,
                                "embed_dim": vp.embed_dim, "depth": vp.depth, "n_head": vp.n_head},
           "counter": "torch.utils.flop_counter.FlopCounterMode, batch 1, meta device",
           "torch_version": torch.__version__}
    out = Path(vp.counts_dir) / OUTPUT
    atomic_write_json(out, doc, sort_keys=False)
    for c in doc["paper_models"]:
        print(f"{c['model']:8s} {c['total_m']:7.2f} M params, attn {c['attn_m']:6.2f} M, sigma {c['sigma']:4d}, "
              f"{c['flops_g']:6.2f} GFLOPs, {c['ckpt_mib']:6.1f} MiB")
    print(f"kernattn count-vision: wrote {out}")
    return 0
