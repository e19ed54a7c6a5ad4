"""gka-paper section 7 for one trained vision run, from ONE forward pass with hooks.

    kernattn analyze-vision [--params P] [--scale S] --run gka-s0

Forward hooks on every block's attention module (models.RegistryAttention) record the
normalised tokens it received and its output; the weights [H, N, N] are recomputed in the hook
from that very input by the module's own `attention_weights` (the same parameters and kernel
as its forward: section 7.8's recipe), so W @ V through W_O gives back the recorded output
(tests check it). From those weights, for validation image `vision.viz_image`:

  sigma.png          GKA: learned sigma as a heads x layers heatmap (YlOrRd) and per-head lines over depth
  rollout.png        attention rollout, discard ratios 0, 0.5, 0.9, overlaid on the image
  cls_layer<l>.png   per-head CLS-to-patch maps of layer l (inferno, alpha 0.6, bicubic upsampling)
  patch_to_patch.png head-averaged maps of the four canonical query patches, raw and overlaid, per layer
  evolution.png      per layer: head-averaged matrix, CLS map, CLS overlay (section 7.6)
  diag_masked.png    every layer x head matrix with the diagonal set to zero (subsampled to viz_max_tokens)
  summary.json       sigma, rollout maps, per layer: mean diagonal weight, the class token's weight on
                     itself, CLS-attention entropy per head

Written into vision.analysis_dir/<run>/ atomically. Uses the run's trained (non-EMA) weights.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ...figures import new_figure
from ...errors import UsageError
from ...io import atomic_dir
from . import data as vdata
from ...config import params_from_args
from .model import attention_modules, build_vit, spec_from_params
from .rollout import cls_map, rollout
from . import stages
from .stages import find_vision_run
from ...engine import CKPT, FINAL
from .track import sigma_table

DISCARD_RATIOS = (0.0, 0.5, 0.9)


# ----------------------------------------------------------------------------- hooks
@torch.no_grad()
def capture(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[dict]]:
    """One forward pass of `x`; per block {"input", "output", "weights" [B, H, N, N]}."""
    records: list[dict] = []
    handles = []

    def hook(module, args, output):
        (inp,) = args
        records.append({"input": inp.detach(), "output": output.detach(),
                        "weights": module.attention_weights(inp).detach()})

    for m in attention_modules(model):
        handles.append(m.register_forward_hook(hook))
    try:
        logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, records


def replay(module, inp: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The module's output rebuilt from recorded weights: W_O(concat_h W_h V_h)."""
    inner = module.inner
    v = inner.prepare(inp).v
    return inner.proj_out(inner.merge_heads(weights.to(v.dtype) @ v))


# ----------------------------------------------------------------------------- maps
def canonical_queries(grid: int) -> list[tuple[int, int]]:
    """(row, col) of the four query patches of section 7.5: UL, centre, LR, UR."""
    p = grid
    return [(p // 4, p // 4), (p // 2, p // 2), (3 * p // 4, 3 * p // 4), (p // 4, 3 * p // 4)]


def upsample(m: torch.Tensor, size: int) -> np.ndarray:
    up = F.interpolate(m[None, None].double(), size=(size, size), mode="bicubic", align_corners=False)[0, 0]
    return up.clamp_min(0).numpy()


def display_image(x: torch.Tensor, dataset: str) -> np.ndarray:
    """A normalised [C, H, W] input back to [H, W] or [H, W, 3] in [0, 1] for plotting."""
    mean, std = vdata.STATS[dataset]
    img = x.double() * torch.tensor(std, dtype=torch.float64)[:, None, None] + torch.tensor(mean, dtype=torch.float64)[:, None, None]
    img = img.clamp(0, 1).numpy()
    return img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0)


def _show(ax, img, overlay=None, title=""):
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None)
    if overlay is not None:
        ax.imshow(overlay, cmap="inferno", alpha=0.6)
    ax.set_title(title, fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])


def entropy(p: torch.Tensor) -> float:
    p = p.double() / p.sum()
    return float(-(p * torch.log(p.clamp_min(1e-300))).sum())


# ----------------------------------------------------------------------------- figures
def fig_sigma(sigma: list[list[float]], out: Path, title: str) -> None:
    s = np.asarray(sigma)  # [L, H]
    fig = new_figure(8, 3.2)
    ax1, ax2 = fig.subplots(1, 2)
    im = ax1.imshow(s.T, cmap="YlOrRd", aspect="auto")
    ax1.set_xlabel("layer")
    ax1.set_ylabel("head")
    ax1.set_xticks(range(s.shape[0]), [str(i + 1) for i in range(s.shape[0])])
    ax1.set_yticks(range(s.shape[1]), [str(i + 1) for i in range(s.shape[1])])
    for (li, hi), v in np.ndenumerate(s):
        ax1.text(li, hi, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax1, label="sigma")
    for h in range(s.shape[1]):
        ax2.plot(range(1, s.shape[0] + 1), s[:, h], marker="o", label=f"head {h + 1}")
    ax2.set_xlabel("layer")
    ax2.set_ylabel("sigma")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.savefig(out, dpi=110)


def figures(out: Path, img: np.ndarray, weights: list[torch.Tensor], grid: int, size: int, title: str,
            max_tokens: int) -> dict:
    """All section 7 figures except sigma; returns the numbers for summary.json."""
    summary = {"rollout": _fig_rollout(out, img, weights, grid, size, title),
               "layers": _fig_cls_layers(out, img, weights, grid, size, title)}
    _fig_patch_to_patch(out, img, weights, grid, size, title)
    _fig_evolution(out, img, weights, grid, size, title)
    _fig_diag_masked(out, weights, title, max_tokens)
    return summary


def _fig_rollout(out: Path, img: np.ndarray, weights: list[torch.Tensor], grid: int, size: int, title: str) -> dict:
    """rollout.png: the attention rollout at each of DISCARD_RATIOS; its CLS maps by ratio."""
    maps = {}
    fig = new_figure(2.2 * (1 + len(DISCARD_RATIOS)), 2.6)
    axes = fig.subplots(1, 1 + len(DISCARD_RATIOS))
    _show(axes[0], img, title="input")
    for ax, ratio in zip(axes[1:], DISCARD_RATIOS):
        m = cls_map(rollout(weights, ratio), grid)
        maps[str(ratio)] = m.tolist()
        _show(ax, img, upsample(m / m.max(), size), f"rollout, discard {ratio}")
    fig.suptitle(f"{title}: attention rollout", fontsize=9)
    fig.savefig(out / "rollout.png", dpi=110)
    return maps


def _fig_cls_layers(out: Path, img: np.ndarray, weights: list[torch.Tensor], grid: int, size: int,
                    title: str) -> list[dict]:
    """cls_layer<l>.png: per-head CLS maps, one figure per layer; each layer's numbers."""
    layers = []
    H = weights[0].shape[0]
    for li, w in enumerate(weights):
        fig = new_figure(2.0 * H, 2.3)
        axes = np.atleast_1d(fig.subplots(1, H))
        for h in range(H):
            m = w[h, 0, 1:].reshape(grid, grid)
            _show(axes[h], img, upsample(m / m.max(), size), f"layer {li + 1} head {h + 1}")
        fig.suptitle(f"{title}: CLS-to-patch attention, layer {li + 1}", fontsize=9)
        fig.savefig(out / f"cls_layer{li + 1}.png", dpi=110)
        cls = w[:, 0, 1:]
        layers.append({
            "layer": li + 1,
            "mean_diagonal": float(torch.diagonal(w, dim1=-2, dim2=-1).mean()),
            "cls_self": float(w[:, 0, 0].mean()),  # how much the class token keeps to itself
            "cls_entropy_per_head": [entropy(cls[h]) for h in range(H)],
            "max_entropy": math.log(grid * grid),
        })
    return layers


def _fig_patch_to_patch(out: Path, img: np.ndarray, weights: list[torch.Tensor], grid: int, size: int,
                        title: str) -> None:
    """patch_to_patch.png: the head-mean attention of the four canonical queries, every layer."""
    from matplotlib.patches import Rectangle

    L, queries = len(weights), canonical_queries(grid)
    fig = new_figure(1.6 * 2 * len(queries), 1.8 * L)
    axes = np.asarray(fig.subplots(L, 2 * len(queries))).reshape(L, -1)
    scale = size / grid
    for li, w in enumerate(weights):
        for qi, (r, c) in enumerate(queries):
            q = 1 + r * grid + c
            m = w[:, q, 1:].mean(0).reshape(grid, grid)
            ax = axes[li, 2 * qi]
            ax.imshow(m.numpy(), cmap="inferno")
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="cyan", lw=1.2))
            ax.set_title(f"L{li + 1} q=({r},{c})", fontsize=6)
            ax.set_xticks([])
            ax.set_yticks([])
            ax = axes[li, 2 * qi + 1]
            _show(ax, img, upsample(m / m.max(), size), "overlay")
            ax.add_patch(Rectangle((c * scale - 0.5, r * scale - 0.5), scale, scale, fill=False, ec="cyan", lw=1.2))
    fig.suptitle(f"{title}: patch-to-patch attention (head mean)", fontsize=9)
    fig.savefig(out / "patch_to_patch.png", dpi=110)


def _fig_evolution(out: Path, img: np.ndarray, weights: list[torch.Tensor], grid: int, size: int,
                   title: str) -> None:
    """evolution.png: per layer, the head-mean attention, its CLS map and the map over the image."""
    L = len(weights)
    fig = new_figure(6.6, 2.1 * L)
    axes = np.asarray(fig.subplots(L, 3)).reshape(L, 3)
    for li, w in enumerate(weights):
        a = w.mean(0)
        axes[li, 0].imshow(a.numpy(), cmap="viridis")
        axes[li, 0].set_title(f"layer {li + 1}: attention (head mean)", fontsize=7)
        m = a[0, 1:].reshape(grid, grid)
        axes[li, 1].imshow(m.numpy(), cmap="inferno")
        axes[li, 1].set_title("CLS map", fontsize=7)
        _show(axes[li, 2], img, upsample(m / m.max(), size), "CLS overlay")
        for ax in axes[li, :2]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"{title}: layer-wise evolution", fontsize=9)
    fig.savefig(out / "evolution.png", dpi=110)


def _fig_diag_masked(out: Path, weights: list[torch.Tensor], title: str, max_tokens: int) -> None:
    """diag_masked.png: every layer x head's attention with the diagonal zeroed, on at most
    max_tokens evenly spaced tokens."""
    L, H = len(weights), weights[0].shape[0]
    n = weights[0].shape[-1]
    keep = torch.linspace(0, n - 1, min(n, max_tokens)).round().long().unique()
    fig = new_figure(2.2 * H, 2.1 * L)
    axes = np.asarray(fig.subplots(L, H)).reshape(L, H)
    for li, w in enumerate(weights):
        for h in range(H):
            a = w[h].clone()
            a.fill_diagonal_(0.0)
            axes[li, h].imshow(a[keep][:, keep].numpy(), cmap="viridis")
            axes[li, h].set_title(f"layer {li + 1} head {h + 1}", fontsize=7)
            axes[li, h].set_xticks([])
            axes[li, h].set_yticks([])
    fig.suptitle(f"{title}: attention with the diagonal masked ({len(keep)} of {n} tokens)", fontsize=9)
    fig.savefig(out / "diag_masked.png", dpi=110)


# ----------------------------------------------------------------------------- stage
def load_trained(params, run_id: str, meta: dict):
    vp, run = params.vision, find_vision_run(params, run_id)
    run_dir = stages.run_dir(params, run_id)
    if not (run_dir / FINAL).is_file():
        raise UsageError(f"{run_dir / FINAL}: no such file; train the run first (kernattn train-vision --run {run_id})")
    ckpt = torch.load(run_dir / CKPT, map_location="cpu", weights_only=True)
    model = build_vit(spec_from_params(vp, run.variant, meta["in_chans"], meta["num_classes"], run.options))
    model.load_state_dict(ckpt["model"])
    return model.eval(), run.variant


def analyze(params, run_id: str) -> Path:
    vp = params.vision
    meta = vdata.read_meta(vp)
    model, variant = load_trained(params, run_id, meta)
    _, val = vdata.datasets_for(vp, train_transform=False)
    if vp.viz_image >= len(val):
        raise UsageError(f"vision.viz_image={vp.viz_image} but the validation set has {len(val)} images")
    x, label = val[vp.viz_image]
    logits, records = capture(model, x[None])
    weights = [r["weights"][0].float() for r in records]
    grid = vp.img_size // vp.patch_size
    img = display_image(x, meta["dataset"])
    title = f"{variant} ({run_id})"
    out = stages.analysis_dir(params, run_id)
    with atomic_dir(out) as tmp:
        summary = figures(tmp, img, weights, grid, vp.img_size, title, vp.viz_max_tokens)
        sigma = sigma_table(model)
        if sigma is not None:
            fig_sigma(sigma, tmp / "sigma.png", f"{title}: learned bandwidths")
        summary.update({"run_id": run_id, "variant": variant, "image": vp.viz_image, "label": int(label),
                        "label_name": meta["classes"][int(label)], "predicted": int(logits.argmax()),
                        "grid": grid, "sigma": sigma,
                        "figures": sorted(p.name for p in tmp.glob("*.png"))})
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="'<row>-s<seed>', e.g. gka-s0")


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    if params.vision.threads is not None:
        torch.set_num_threads(params.vision.threads)
    out = analyze(params, args.run)
    print(f"kernattn analyze-vision: {args.run}: figures in {out}")
    return 0
