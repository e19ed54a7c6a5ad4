"""Issue 17, section 2: GKA's bandwidth at initialisation, measured on constructed inputs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kernattn import attention
from kernattn.attention import gka_readings as gka_init
from kernattn.tracks.char.model import GPT


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def gka(d_model=32, n_head=2, **options):
    torch.manual_seed(0)
    return attention.build("gka", d_model=d_model, n_head=n_head, causal=True, impl="fast", **options).double()


def test_median_distance_of_constructed_features():
    """Three tokens at 0, 1 and 4 on a line: the causal pairs (1,0), (2,0), (2,1) are 1, 4 and
    3 apart, median 3; the second head is the same picture scaled by 2."""
    pos = torch.tensor([0.0, 1.0, 4.0])
    f = torch.zeros(1, 2, 3, 2, dtype=torch.float64)
    f[0, 0, :, 0] = pos
    f[0, 1, :, 1] = 2 * pos
    causal = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    assert gka_init.median_distance(f, causal).tolist() == [3.0, 6.0]
    full = torch.ones(3, 3, dtype=torch.bool)  # both directions: the same three distances twice
    assert gka_init.median_distance(f, full).tolist() == [3.0, 6.0]
    with pytest.raises(ValueError, match="no pair"):
        gka_init.median_distance(f, torch.eye(3, dtype=torch.bool))


def test_identical_tokens_spread_their_weight_evenly():
    """All features equal: every kernel value is 1, so query i puts 1 / (i + 1) on itself;
    the first position (only itself allowed) is left out of the mean."""
    attn = gka()
    x = torch.ones(2, 6, 32, dtype=torch.float64)
    diag = gka_init.mean_diagonal_weight(attn, lambda: attn(x))
    expected = np.mean([1 / (i + 1) for i in range(1, 6)])
    np.testing.assert_allclose(diag, np.full((1, 2), expected), rtol=1e-12)


def test_sigma_one_starts_as_the_identity_and_the_median_init_does_not():
    """RMS-normed features of head dim 64: squared distances ~ 2 d = 128, kernel ~ exp(-64).
    sigma = 1 is the papers' start (init_sigma "paper"; the default is sqrt_d)."""
    attn = gka(d_model=128, n_head=2, qk_norm=True, init_sigma="paper")
    x = torch.randn(4, 32, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    run = lambda: attn(x)  # noqa: E731
    assert gka_init.mean_diagonal_weight(attn, run).min() > 0.9999
    (log_sigma,) = gka_init.data_driven_log_sigma(attn, run)
    # unit-RMS random features: distances near sqrt(2 d) = sqrt(128)
    assert torch.allclose(log_sigma.exp(), torch.full((2,), math.sqrt(128.0), dtype=torch.float64), rtol=0.05)
    torch.testing.assert_close(attn.log_sigma.detach(), log_sigma)
    assert gka_init.mean_diagonal_weight(attn, run).max() < 0.5


def test_gradient_to_log_sigma_is_zero_with_a_zero_w_o_and_tiny_at_sigma_one():
    attn = gka(d_model=128, n_head=2, qk_norm=True, init_sigma="paper")
    x = torch.randn(2, 16, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    target = torch.randn(2, 16, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    loss = lambda: (attn(x) - target).pow(2).mean()  # noqa: E731
    with torch.no_grad():
        attn.proj_out.weight.zero_()
    (g,) = gka_init.gradient_norms(attn, loss)
    assert g["log_sigma_norm"] == 0.0 and g["w_o_norm"] > 0
    torch.nn.init.normal_(attn.proj_out.weight, std=0.02)
    (g,) = gka_init.gradient_norms(attn, loss)
    assert 0 < g["log_sigma_norm"] < 1e-6 * g["w_o_norm"]
    assert attn.log_sigma.grad is None and attn.proj_out.weight.grad is None  # cleared after


def test_data_driven_init_layer_by_layer_on_a_gpt():
    """Each layer's sigma is the median distance of its own features, measured with the
    layers below already set; apply=False measures and leaves the model as it was."""
    torch.manual_seed(0)
    small = SimpleNamespace(n_layer=2, n_head=2, d_model=32, context=16, mlp_ratio=2, dropout=0.0)
    model = GPT(20, small, "gka", {"qk_norm": True}).eval()
    idx = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(0))
    run = lambda: model(idx)  # noqa: E731
    before = [b.attn.log_sigma.detach().clone() for b in model.blocks]
    measured = gka_init.data_driven_log_sigma(model, run, apply=False)
    for b, s in zip(model.blocks, before):
        torch.testing.assert_close(b.attn.log_sigma.detach(), s, rtol=0, atol=0)
    values = gka_init.data_driven_log_sigma(model, run)
    torch.testing.assert_close(values[0], measured[0])  # layer 1 sees the same input either way
    attn = model.blocks[1].attn
    inputs = {}
    handle = attn.register_forward_pre_hook(lambda m, a: inputs.setdefault("x", a[0].detach()))
    with torch.no_grad():
        model(idx)
    handle.remove()
    f = attn.prepare(inputs["x"]).f
    expected = gka_init.median_distance(f, attn.allowed(16, f.device)).log().float()
    torch.testing.assert_close(attn.log_sigma.detach(), expected)
    assert gka_init.mean_diagonal_weight(model, run).shape == (2, 2)
    assert gka_init.named_log_sigma("sqrt_d", 64) == pytest.approx(math.log(8.0))
    with pytest.raises(ValueError, match="unknown init_sigma"):
        gka_init.named_log_sigma("two", 64)
    with pytest.raises(ValueError, match="no GKA"):
        gka_init.gka_modules(torch.nn.Linear(2, 2))


# ----------------------------------------------------------------------------- init_sigma as a registry option
@pytest.mark.parametrize("init, sigma", [(3.0, 3.0), (1, 1.0), ("paper", 1.0), ("sqrt_d_half", 2.0), ("sqrt_d", 4.0),
                                         ("median", 4.0), (None, 4.0)])  # None: the default, sqrt_d
def test_init_sigma_rules_at_construction(init, sigma):
    """d_head = 16: sqrt(d) / 2 = 2, sqrt(d) = 4; the median rule starts at sqrt(d) until its
    first training batch. Only the median rule adds the `sigma_ready` buffer."""
    attn = gka(d_model=32, n_head=2, **({} if init is None else {"init_sigma": init}))
    torch.testing.assert_close(attn.sigma.detach(), torch.full((2,), sigma, dtype=torch.float64))
    assert ("sigma_ready" in attn.state_dict()) == (init == "median")


def test_init_sigma_is_checked_by_the_registry():
    for bad, words in ((0.0, "must be > 0"), ("sqrt", "one of paper, sqrt_d_half, sqrt_d, median"), (True, "must be")):
        with pytest.raises(attention.AttentionConfigError, match=words):
            attention.make_options("gka", {"init_sigma": bad})


def small_gpt(init_sigma, seed=0):
    torch.manual_seed(seed)
    small = SimpleNamespace(n_layer=2, n_head=2, d_model=32, context=16, mlp_ratio=2, dropout=0.0)
    return GPT(20, small, "gka", {"init_sigma": init_sigma})


def test_median_rule_sets_sigma_on_the_first_training_forward_as_the_measured_init():
    """The lazy rule on the first training batch equals gka_init.data_driven_log_sigma (layer by
    layer) on a model with the same weights; an evaluation before it changes nothing, and a
    second training batch does not re-initialise."""
    model, ref = small_gpt("median"), small_gpt(4.0)  # same seed: the same weights, sigma = sqrt(16)
    idx = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        model(idx)
    assert not any(bool(b.attn.sigma_ready) for b in model.blocks)
    torch.testing.assert_close(model.blocks[0].attn.sigma.detach(), torch.full((2,), 4.0))
    model.train()
    model(idx)
    expected = gka_init.data_driven_log_sigma(ref.eval(), lambda: ref(idx))
    for block, value in zip(model.blocks, expected):
        torch.testing.assert_close(block.attn.log_sigma.detach(), value)
        assert bool(block.attn.sigma_ready)
    other = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(1))
    model(other)
    for block, value in zip(model.blocks, expected):
        torch.testing.assert_close(block.attn.log_sigma.detach(), value, rtol=0, atol=0)


def test_median_rule_is_not_repeated_after_a_resume():
    """A checkpoint carries the flag: the resumed model keeps the trained bandwidths."""
    model = small_gpt("median")
    idx = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(0))
    model.train()
    model(idx)
    with torch.no_grad():
        for b in model.blocks:
            b.attn.log_sigma.add_(0.25)  # as if training had moved them
    resumed = small_gpt("median", seed=5)
    resumed.load_state_dict(model.state_dict())
    resumed.train()
    resumed(torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(2)))
    for a, b in zip(model.blocks, resumed.blocks):
        torch.testing.assert_close(b.attn.log_sigma.detach(), a.attn.log_sigma.detach(), rtol=0, atol=0)


def test_median_distance_caps_the_pairs_by_batch_rows():
    """Two rows: row 0's three causal distances are 1, 4, 3 (median 3), row 1's scaled by 10. With
    room for three pairs only row 0 is read; with room for six both are (median of 1, 3, 4, 10, 30,
    40 = (4 + 10) / 2 = 7); a cap below one row's pairs still reads one row."""
    from kernattn.attention import gka as gka_mod

    pos = torch.tensor([0.0, 1.0, 4.0])
    f = torch.zeros(2, 1, 3, 1, dtype=torch.float64)
    f[0, 0, :, 0], f[1, 0, :, 0] = pos, 10 * pos
    causal = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    assert gka_mod.median_distance(f, causal, max_pairs=3).tolist() == [3.0]
    assert gka_mod.median_distance(f, causal, max_pairs=6).tolist() == [7.0]
    assert gka_mod.median_distance(f, causal, max_pairs=1).tolist() == [3.0]
