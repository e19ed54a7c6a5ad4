"""Every registry variant in the models: the nanochat-style GPT (causal, sliding windows) and
the ViT (bidirectional). Parametrised over `attention.available()` and each variant's option
sets (`registry.variations`), so a new variant or option is covered without editing this
file: it builds, trains two steps on CPU with a finite loss and finite gradients, its
FLOPs/token formula equals torch's FlopCounterMode, and a combination a model cannot take
stops with one line naming the option."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from kernattn import attention
from kernattn.attention import registry
from kernattn.attention.registry import freeze_options
from kernattn.tracks.lm import flops
from kernattn.tracks.lm.model import GPT, GPTConfig
from kernattn.tracks.vision.model import ViTSpec, attention_modules, build_vit

ROWS = [(name, opts) for name in attention.available() for opts in registry.variations(name)]
IDS = [name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts in ROWS]
LM = dict(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=32)
VIT = dict(img_size=16, patch_size=4, in_chans=1, num_classes=5, embed_dim=32, depth=2, n_head=2)


def lm_config(name, opts, **kw):
    return GPTConfig(**(LM | kw), variant=name, attention_options=freeze_options(opts))


def two_steps(model, batch, loss_fn):
    """Two AdamW steps: the loss is finite and every parameter gets a finite gradient."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        loss = loss_fn(model, batch)
        assert torch.isfinite(loss), float(loss)
        loss.backward()
        for n, p in model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), n
        opt.step()


def lm_loss(model, idx):
    logits = model(idx[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))


# ----------------------------------------------------------------------------- LM
@pytest.mark.parametrize("name, opts", ROWS, ids=IDS)
def test_every_variant_trains_in_the_lm_with_its_windows(name, opts):
    """Window pattern SL: layer 0 keeps 8 keys. A variant without a causal window form stops
    with one line naming lm.window_pattern, and trains with full attention instead."""
    torch.manual_seed(0)
    cfg = lm_config(name, opts, window_pattern="SL", short_window=8)
    if not registry.make_options(name, dict(cfg.attention[1])).allows_window(True):
        with pytest.raises(attention.AttentionConfigError) as e:
            GPT(cfg)
        msg = str(e.value)
        assert "\n" not in msg and "lm.window_pattern='SL'" in msg and name in msg and "window=None" in msg
        cfg = lm_config(name, opts, window_pattern="L")
    model = GPT(cfg)
    inner = [b.attn.inner for b in model.blocks]
    assert all(m.registry_name == name and m.causal for m in inner)
    assert [m.window for m in inner] == model.windows
    # value embeddings exactly where the variant has a value projection, on alternating layers
    has_v = registry.variant(name).module.has_value_projection
    assert model.value_embed_layers == ([1] if has_v else [])
    assert (model.blocks[1].attn.ve_gate is not None) == has_v
    two_steps(model, torch.randint(0, 64, (2, 33)), lm_loss)


@pytest.mark.parametrize("name, opts", ROWS, ids=IDS)
def test_lm_flops_per_token_equal_flop_counter_mode(name, opts):
    """The formula against FlopCounterMode on the plain path (dense-mask SDPA, math backend:
    every matmul visible), full attention, a context of 80 (one whole and one partial chunk of
    the linear-attention variants). The counter sees the padded width: total + padding."""
    torch.manual_seed(0)
    model = GPT(lm_config(name, opts, window_pattern="L", context=80))
    for block in model.blocks:
        for attr in ("bias_backend", "window_backend"):
            if hasattr(block.attn.inner, attr):
                setattr(block.attn.inner, attr, "sdpa")
    x = torch.randint(0, 64, (2, 80))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    f = flops.flops_per_token(model)
    assert counter.get_total_flops() / x.numel() == pytest.approx(f["total"] + f["padding"], rel=1e-12)
    assert f["dense"] == 6 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    names = set(model.linear_weights())
    assert "lm_head.weight" in names and "blocks.0.mlp.c_fc.weight" in names and "blocks.0.attn.inner.proj_out.weight" in names
    assert not names & {"wte.weight", "resid_lambdas", "x0_lambdas", *(n for n, _ in model.named_parameters()
                                                                     if "bank" in n or "lag_bias" in n)}


@pytest.mark.parametrize("context, window, chunk", [(80, 24, 16), (64, 8, 16), (50, 40, 16), (40, 7, 64)])
def test_favor_window_flops_equal_flop_counter_mode(context, window, chunk):
    """FAVOR+'s sliding window (chunk states + an exact band) costs what its formula says."""
    model = GPT(lm_config("favor", {"chunk": chunk, "n_features": 24}, window_pattern="SL", short_window=window,
                          context=context))
    assert model.windows[0] == window
    x = torch.randint(0, 64, (2, context))
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    f = flops.flops_per_token(model)
    assert counter.get_total_flops() / x.numel() == pytest.approx(f["total"], rel=1e-12) and f["padding"] == 0


def test_softmax_row_is_nanochats_baseline():
    """variant softmax with no options is base: same parameters, same outputs."""
    torch.manual_seed(0)
    base = GPT(lm_config("base", {}, window_pattern="SL", short_window=8))
    soft = GPT(lm_config("softmax", {}, window_pattern="SL", short_window=8))
    soft.load_state_dict(base.state_dict())
    assert base.cfg.attention == soft.cfg.attention == (
        "softmax", {"position": "rope", "qk_norm": True, "qk_gain": 1.0, "rope_base": base.cfg.rope_base})
    idx = torch.randint(0, 64, (2, 32))
    torch.testing.assert_close(base(idx), soft(idx), rtol=0, atol=0)
    # a row's options win over the LM defaults
    gpa = lm_config("gpa", {"n_kernels": 8, "combine": "add", "rope": False}).attention
    assert gpa == ("gpa", {"rope": False, "qk_norm": True, "qk_gain": 1.0, "rope_base": 10000.0,
                           "n_kernels": 8, "combine": "add"})


@pytest.mark.parametrize("cfg_kw, needle", [
    (dict(variant="flash"), "valid names: base, cope, differential, favor, fire, fox, gka, gpa, nw, rbf, sigmoid, "
                            "softmax, valueless"),
    (dict(variant="gpa", attention_options=freeze_options({"n_kernel": 8})), "unknown option 'n_kernel'"),
    (dict(variant="gpa", attention_options=freeze_options({"combine": "sum"})), "add, mult"),
    (dict(variant="nw", attention_options=freeze_options({"kernel": "linear"}), window_pattern="SL",
          short_window=8), "kernel='linear'"),
    (dict(variant="softmax", attention_options=freeze_options({"position": "lag_table", "max_len": 16})),
     "max_len=16 is shorter than lm.context=32"),
])
def test_impossible_lm_rows_fail_with_one_line(cfg_kw, needle):
    with pytest.raises(attention.AttentionConfigError) as e:
        GPT(GPTConfig(**(LM | cfg_kw)))
    assert needle in str(e.value) and "\n" not in str(e.value)


# ----------------------------------------------------------------------------- ViT
def vit_loss(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


@pytest.mark.parametrize("name, opts", ROWS, ids=IDS)
def test_every_set_defined_variant_trains_in_the_vit(name, opts):
    """Variants with no 1-D position scheme train; the others stop with one line naming it, as
    do the causal-only ones (naming that)."""
    torch.manual_seed(0)
    spec = ViTSpec(name, **VIT, attention_options=freeze_options(opts))
    vname, vopts = spec.attention
    if not registry.make_options(vname, vopts).allows_bidirectional():
        with pytest.raises(attention.AttentionConfigError) as e:
            build_vit(spec)
        msg = str(e.value)
        assert "\n" not in msg and "causal only" in msg and name in msg
        return
    probe = attention.build(vname, d_model=32, n_head=2, causal=False, **vopts)
    if probe.position_scheme() is not None:
        with pytest.raises(attention.AttentionConfigError) as e:
            build_vit(spec)
        msg = str(e.value)
        assert "\n" not in msg and "raster" in msg and name in msg
        return
    model = build_vit(spec)
    assert all(not m.inner.causal and m.inner.window is None and m.inner.registry_name == name
               for m in attention_modules(model))
    batch = (torch.randn(3, 1, 16, 16), torch.tensor([0, 3, 4]))
    two_steps(model, batch, vit_loss)


def test_vit_names_and_defaults():
    """deit/vlt/gka stay the paper's rows; a bare registry name gets DeiT's biases, no positions."""
    assert ViTSpec("deit").attention == ("softmax", {"position": "none", "bias": True})
    assert ViTSpec("softmax").attention == ViTSpec("deit").attention
    assert ViTSpec("nw", attention_options=(("kernel", "gaussian"),)).attention == (
        "nw", {"bias": True, "kernel": "gaussian"})
    assert ViTSpec("gka", attention_options=(("init_sigma", 2.0),)).attention == ("gka", {"init_sigma": 2.0})
    assert "init_sigma" not in ViTSpec("gka").attention[1]  # the registry's default (sqrt_d)
    with torch.device("meta"):
        deit, soft = build_vit(ViTSpec("deit", **VIT)), build_vit(ViTSpec("softmax", **VIT))
    assert [(n, p.shape) for n, p in deit.named_parameters()] == [(n, p.shape) for n, p in soft.named_parameters()]


@pytest.mark.parametrize("name, opts, needle", [
    ("gpa", {}, "kernel bank"),
    ("softmax", {"position": "alibi"}, "set option position: none"),
    ("gka", {"rope": True}, "set option rope: false"),
    ("valueless", {"position": "lag_table"}, "lag_table"),
    ("flash", {}, "valid names: deit, vlt, gka, cope, differential, favor, fire, fox, gpa, nw, rbf, sigmoid, softmax, "
                  "valueless"),
    ("nw", {"kernel": "cosine"}, "exp_dot, gaussian, yat, linear"),
])
def test_impossible_vision_rows_fail_with_one_line(name, opts, needle):
    with pytest.raises(attention.AttentionConfigError) as e:
        build_vit(ViTSpec(name, **VIT, attention_options=freeze_options(opts)))
    assert needle in str(e.value) and "\n" not in str(e.value)
