"""Vision models without training: the paper's parameter and FLOP counts (Tables 2/3/5), the
FLOP convention on a hand-counted model, forward/backward of every variant, the DeiT weight
decay groups, attention rollout on constructed cases, and hooks that return the weights the
model used."""

from __future__ import annotations

import math

import pytest
import timm
import torch

from kernattn.tracks.vision import counts
from kernattn.tracks.vision.model import ViTSpec, attention_modules, build_vit
from kernattn.config.vision import VARIANTS
from kernattn.tracks.vision.rollout import cls_map, layer_matrix, rollout
from kernattn.tracks.vision.track import make_optimizer
from kernattn.tracks.vision.viz import capture, replay

# gka-paper Table 2 / 3: total parameters (M), FLOPs (G), sigma scalars
PAPER = {"DeiT-Ti": (5.72, 2.51, 0), "GKA-Ti": (4.38, 1.98, 36), "DeiT-S": (22.05, 9.20, 0),
         "GKA-S": (16.73, 7.11, 72), "DeiT-B": (86.57, 35.13, 0), "GKA-B": (65.31, 26.76, 144)}
TIMM_NAMES = {"Ti": "deit_tiny_patch16_224", "S": "deit_small_patch16_224", "B": "deit_base_patch16_224"}
SMALL = dict(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=32, depth=2, n_head=2)


@pytest.fixture(scope="module")
def paper_rows():
    return {c.model: c for c in counts.paper_models()}


def test_paper_models_match_the_papers_counts(paper_rows):
    for name, (total_m, flops_g, sigma) in PAPER.items():
        c = paper_rows[name]
        assert abs(c.total / 1e6 - total_m) / total_m < 0.01, name
        assert abs(c.flops / 1e9 - flops_g) / flops_g < 0.03, name
        assert c.sigma == sigma, name
        # without GKA's zero padding of the SDPA head width the FLOPs are the paper's to its rounding
        assert abs((c.flops - c.pad_flops) / 1e9 - flops_g) < 0.006, name
        # checkpoint: the paper's MB are MiB of float32 weights
        assert c.ckpt_bytes == 4 * c.total
    # attention parameters: GKA keeps only W_O (+ bias) and H sigma scalars per block (-75%)
    assert paper_rows["GKA-Ti"].attn == 12 * (192 * 192 + 192 + 3)
    assert paper_rows["DeiT-Ti"].attn == 12 * (192 * 3 * 192 + 3 * 192 + 192 * 192 + 192)
    assert paper_rows["VLT-Ti"].total == paper_rows["DeiT-Ti"].total - 12 * (192 * 192 + 192)
    assert all(paper_rows[f"DeiT-{s}"].mlp == paper_rows[f"GKA-{s}"].mlp for s in ("Ti", "S", "B"))


@pytest.mark.parametrize("size", ["Ti", "S", "B"])
def test_deit_equals_timms_own_deit(size, paper_rows):
    with torch.device("meta"):
        ref = timm.create_model(TIMM_NAMES[size])
    assert paper_rows[f"DeiT-{size}"].total == sum(p.numel() for p in ref.parameters())


def test_flop_counter_counts_two_flops_per_multiply_accumulate():
    """DeiT forward FLOPs by hand: patch embedding, per block qkv + q k^T + W V + W_O + MLP, head."""
    spec = ViTSpec("deit", **SMALL)
    d, n, p2 = spec.embed_dim, (spec.img_size // spec.patch_size) ** 2 + 1, spec.patch_size ** 2
    macs = (n - 1) * p2 * spec.in_chans * d
    macs += spec.depth * (n * d * 3 * d + 2 * n * n * d + n * d * d + 2 * n * d * 4 * d)
    macs += d * spec.num_classes
    assert counts.count(spec).flops == 2 * macs
    # GKA: no qkv; its SDPA runs at the padded width 8 * ceil((d_head + 1) / 8) per head
    g = counts.count(ViTSpec("gka", **SMALL))
    dh, width = d // spec.n_head, 8 * math.ceil((d // spec.n_head + 1) / 8)
    gka_macs = macs - spec.depth * (n * d * 3 * d + 2 * n * n * d) + spec.depth * 2 * n * n * width * spec.n_head
    assert g.flops == 2 * gka_macs and g.pad_flops == 2 * spec.depth * 2 * n * n * (width - dh) * spec.n_head


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_backward(variant):
    torch.manual_seed(0)
    model = build_vit(ViTSpec(variant, **SMALL))
    x = torch.randn(3, 1, 28, 28)
    y = model(x)
    assert y.shape == (3, 10)
    y.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    names = {n for n, _ in model.named_parameters()}
    has_sigma = any(n.endswith("log_sigma") for n in names)
    assert has_sigma == (variant == "gka")
    assert any(n.endswith("attn.inner.proj_in.weight") for n in names) == (variant != "gka")


def test_no_weight_decay_on_biases_norms_embeddings_and_log_sigma():
    from kernattn.config import load_params

    vp = load_params("params.yaml", "micro").vision
    model = build_vit(ViTSpec("gka", **SMALL))
    opt = make_optimizer(model, vp)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    free = {names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert decayed | free == set(names.values())
    assert {"pos_embed", "cls_token", "blocks.0.attn.inner.log_sigma", "blocks.0.norm1.weight",
            "blocks.0.attn.inner.proj_out.bias", "head.bias"} <= free
    assert all(n.endswith("weight") and "norm" not in n for n in decayed)
    assert "blocks.1.attn.inner.proj_out.weight" in decayed and "head.weight" in decayed


# ----------------------------------------------------------------------------- rollout
def test_rollout_of_uniform_attention_has_a_closed_form():
    """A = U (every row 1/N): 0.5 U + 0.5 I, and U is idempotent, so after L layers
    R = 0.5^L I + (1 - 0.5^L) U: the class token gives each patch (1 - 0.5^L) / N."""
    n, heads, layers = 5, 3, 4
    uniform = torch.full((heads, n, n), 1.0 / n)
    r = rollout([uniform] * layers)
    expected = 0.5 ** layers * torch.eye(n, dtype=torch.float64) + (1 - 0.5 ** layers) / n
    torch.testing.assert_close(r, expected)
    torch.testing.assert_close(cls_map(rollout([uniform] * layers), 2), torch.full((2, 2), (1 - 0.5 ** layers) / n,
                                                                                    dtype=torch.float64))
    assert torch.equal(rollout([torch.eye(n).expand(heads, n, n)] * layers), torch.eye(n, dtype=torch.float64))


def test_rollout_discard_zeroes_the_weak_entries_before_renormalising():
    a = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.05, 0.15, 0.8]])
    # heads averaged: two heads whose mean is `a`
    heads = torch.stack([a + 0.01 * torch.tensor([[1, -1, 0], [0, 1, -1], [-1, 0, 1]]),
                         a - 0.01 * torch.tensor([[1, -1, 0], [0, 1, -1], [-1, 0, 1]])])
    # 9 entries, ratio 0.5: the quantile is the 5th smallest (0.3); 0.05, 0.1, 0.15, 0.2 are dropped
    kept = torch.tensor([[0.6, 0.3, 0.0], [0.0, 0.5, 0.3], [0.0, 0.0, 0.8]], dtype=torch.float64)
    step = 0.5 * kept + 0.5 * torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(layer_matrix(heads, 0.5), step / step.sum(-1, keepdim=True))
    torch.testing.assert_close(layer_matrix(heads, 0.0).sum(-1), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        layer_matrix(heads, 1.0)


# ----------------------------------------------------------------------------- hooks
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hooks_return_the_weights_the_forward_pass_used(variant):
    torch.manual_seed(1)
    model = build_vit(ViTSpec(variant, **SMALL)).eval()
    if variant == "gka":  # trained-like bandwidths, so the weights are far from identity
        for m in attention_modules(model):
            m.inner.log_sigma.data.uniform_(1.0, 2.5)
    x = torch.randn(2, 1, 28, 28)
    logits, records = capture(model, x)
    torch.testing.assert_close(logits, model(x))  # the hooks changed nothing
    assert len(records) == len(model.blocks) == SMALL["depth"]
    # the block's attention input is its norm1 of the residual stream, and W reproduces the output
    h = model.patch_embed(x)
    h = model._pos_embed(h)
    for blk, mod, rec in zip(model.blocks, attention_modules(model), records):
        torch.testing.assert_close(rec["input"], blk.norm1(h))
        w = rec["weights"]
        assert w.shape == (2, SMALL["n_head"], 17, 17)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, SMALL["n_head"], 17))
        with torch.no_grad():
            torch.testing.assert_close(replay(mod, rec["input"], w), rec["output"], atol=2e-5, rtol=1e-4)
        h = blk(h)
    # and weights from another input would not: the check can fail
    other = records[0]["weights"].flip(0)
    with torch.no_grad():
        assert not torch.allclose(replay(attention_modules(model)[0], records[0]["input"], other), records[0]["output"],
                                  atol=1e-4)
