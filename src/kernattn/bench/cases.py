"""The models `kernattn bench` measures, as bench.models.Case objects, one builder per family.

`size` picks the shapes: "paper" is the papers' (DeiT-Ti/S/B at 224 px, the char GPT of seeds
000/001 at ctx 256, the nanochat LM at depth 12 and sequence 2048); "small" shrinks the same
models so that the stage runs on a CPU in the tiny DAG (and in CI) in well under two minutes.
"""

from __future__ import annotations

import torch

from ..config import Params, Row
from ..tracks.char.cost import DICKENS_VOCAB
from ..tracks.char.model import GPT
from ..tracks.vision.data import SHAPES as VIT_SHAPES
from .models import Case

CHAR_BASELINE = "rope"


def char_gpt_cases(params: Params, rows: tuple[str, ...], size: str) -> list[Case]:
    """The char-level GPT of gpa-short/gpa-long with each requested matrix row's attention: the model
    section of params.yaml's paper defaults at size "paper", the chosen scale's at "small"."""
    model = params.model if size == "small" else _paper_model(params)
    specs = {r.name: r for r in params.matrix.rows}
    missing = [r for r in rows if r not in specs]
    if missing:
        raise ValueError(f"bench.char_rows: unknown matrix row(s) {', '.join(missing)}; "
                         f"rows: {', '.join(specs)}")
    ctx = model.context
    shape = f"ctx{ctx} d{model.d_model} {model.n_layer}x{model.n_head}"

    def case(spec: Row) -> Case:
        def batch(b: int, device: torch.device) -> tuple:
            g = torch.Generator().manual_seed(b)
            seq = torch.randint(0, DICKENS_VOCAB, (b, ctx + 1), generator=g).to(device)
            return seq[:, :-1], seq[:, 1:]
        return Case(family="char_gpt", model=f"char-{spec.name}", variant=spec.label or spec.name, shape=shape, unit="tok",
                    items_per_sample=ctx, build=lambda: GPT(DICKENS_VOCAB, model, spec.variant, spec.options),
                    batch=batch, loss=lambda m, xy: m.loss(*xy), forward=lambda m, xy: m(xy[0]),
                    baseline=None if spec.name == CHAR_BASELINE else f"char-{CHAR_BASELINE}")
    ordered = sorted(rows, key=lambda r: r != CHAR_BASELINE)  # the baseline first
    return [case(specs[r]) for r in ordered]


def _paper_model(params: Params):
    """The paper defaults of the model section (params.yaml without the scale's overrides)."""
    from ..config import load_params
    # nor the command's --overrides (params.overrides): resolved at its scale, they are not the
    # paper's shapes, which the "paper" rows of Table 4 stand for
    return load_params(params.path, "paper").model


# ----------------------------------------------------------------------------- ViTs
VIT_SIZES = {"Ti": "tiny", "S": "small", "B": "base"}  # vision.models.SIZES -> Table 4's names


def paper_vit_cases(params: Params, sizes: tuple[str, ...]) -> list[Case]:
    """DeiT, GKA and VLT at the paper's shape for the given sizes only (bench.paper_vit_sizes)."""
    from ..errors import ParamsError

    unknown = [s for s in sizes if s not in VIT_SIZES]
    if unknown:
        raise ParamsError(f"{params.path}: bench.paper_vit_sizes names unknown size(s) {', '.join(map(repr, unknown))}; "
                          f"sizes: {', '.join(VIT_SIZES)}")
    return vit_cases(params, "paper", sizes)


def vit_cases(params: Params, size: str, paper_sizes: tuple[str, ...] | None = None) -> list[Case]:
    """DeiT, GKA and VLT at each of the paper's sizes (224 px, patch 16, 1000 classes) for
    size "paper" (or those of `paper_sizes`); at "small", the ViT the scale's vision section
    trains (one size, "cpu")."""
    from ..tracks.vision import model as vm

    vp = params.vision
    measured = _vit_attentions(params)
    if size == "paper":
        specs = [(VIT_SIZES[s], vm.paper_spec(v, s, opts)) for s in vm.SIZES for v, opts in measured
                 if paper_sizes is None or s in paper_sizes]
    else:
        in_chans, classes = VIT_SHAPES[vp.dataset]
        specs = [("cpu", vm.spec_from_params(vp, v, in_chans, classes, opts)) for v, opts in measured]

    def case(size_name: str, spec) -> Case:
        def batch(b: int, device: torch.device) -> tuple:
            g = torch.Generator().manual_seed(b)
            images = torch.randn(b, spec.in_chans, spec.img_size, spec.img_size, generator=g)
            return images.to(device), torch.randint(0, spec.num_classes, (b,), generator=g).to(device)
        return Case(family="vit", model=f"{spec.variant}_{size_name}", variant=spec.variant,
                    shape=f"{spec.img_size}px/{spec.patch_size} d{spec.embed_dim} {spec.depth}x{spec.n_head}",
                    unit="img", items_per_sample=1, build=lambda: vm.build_vit(spec), batch=batch,
                    loss=lambda m, xy: torch.nn.functional.cross_entropy(m(xy[0]).float(), xy[1]),
                    forward=lambda m, xy: m(xy[0]),
                    baseline=None if spec.variant == "deit" else f"deit_{size_name}")
    return [case(n, s) for n, s in specs]


def _vit_attentions(params: Params) -> list[tuple[str, dict]]:
    """(variant, options) of each ViT measured: bench.vit_rows' rows of vision.rows (DeiT's
    first: every ratio's baseline), else Table 5's DeiT, VLT and GKA."""
    from ..config.vision import VARIANTS
    from ..errors import ParamsError

    wanted = params.bench.vit_rows
    if not wanted:
        return [("deit", {}), *((v, {}) for v in VARIANTS if v != "deit")]
    rows = {r.name: r for r in params.vision.rows}
    unknown = [w for w in wanted if w not in rows]
    if unknown or rows[wanted[0]].variant != "deit":
        raise ParamsError(f"{params.path}: bench.vit_rows must name rows of vision.rows, DeiT's first; got "
                          f"{', '.join(map(repr, wanted))} (rows: {', '.join(rows)})")
    return [(rows[w].variant, dict(rows[w].options)) for w in wanted]


# ----------------------------------------------------------------------------- the nanochat LM
LM_PAPER_DEPTH, LM_PAPER_CONTEXT = 12, 2048  # issue 7: depth 12 at sequence 2048


def lm_cases(params: Params, size: str) -> list[Case]:
    """The nanochat-style GPT, baseline and GKA-LM: depth 12 at sequence 2048 with the lm
    section's vocabulary and attention settings for size "paper"; the scale's own LM at "small"."""
    import dataclasses

    from ..tracks.lm.model import VARIANTS, GPTConfig, build_model

    lm = params.lm
    base_name = VARIANTS[0]

    def config(variant: str) -> GPTConfig:
        cfg = GPTConfig.from_params(lm, lm.vocab_size, variant)
        if size == "paper":
            cfg = dataclasses.replace(cfg, depth=LM_PAPER_DEPTH, context=LM_PAPER_CONTEXT)
        return cfg

    def case(variant: str) -> Case:
        cfg = config(variant)

        def batch(b: int, device: torch.device) -> tuple:
            g = torch.Generator().manual_seed(b)
            seq = torch.randint(0, cfg.vocab_size, (b, cfg.context + 1), generator=g).to(device)
            return seq[:, :-1], seq[:, 1:]

        def loss(m, xy):
            logits = m(xy[0])
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), xy[1].reshape(-1))
        return Case(family="lm", model=f"lm-d{cfg.depth}-{variant}", variant=variant,
                    shape=f"seq{cfg.context} d{cfg.dim} depth {cfg.depth} {cfg.window_pattern}", unit="tok",
                    items_per_sample=cfg.context, build=lambda: build_model(cfg), batch=batch, loss=loss,
                    forward=lambda m, xy: m(xy[0]),
                    baseline=None if variant == base_name else f"lm-d{cfg.depth}-{base_name}")
    return [case(v) for v in VARIANTS]
