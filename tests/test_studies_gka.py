"""Issue 17, section 2: GKA's bandwidth at initialisation, measured on constructed inputs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kernattn import attention
from kernattn.analysis import gka_init
from kernattn.models import GPT


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
    """RMS-normed features of head dim 64: squared distances ~ 2 d = 128, kernel ~ exp(-64)."""
    attn = gka(d_model=128, n_head=2, qk_norm=True)
    x = torch.randn(4, 32, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    run = lambda: attn(x)  # noqa: E731
    assert gka_init.mean_diagonal_weight(attn, run).min() > 0.9999
    (log_sigma,) = gka_init.data_driven_log_sigma(attn, run)
    # unit-RMS random features: distances near sqrt(2 d) = sqrt(128)
    assert torch.allclose(log_sigma.exp(), torch.full((2,), math.sqrt(128.0), dtype=torch.float64), rtol=0.05)
    torch.testing.assert_close(attn.log_sigma.detach(), log_sigma)
    assert gka_init.mean_diagonal_weight(attn, run).max() < 0.5


def test_gradient_to_log_sigma_is_zero_with_a_zero_w_o_and_tiny_at_sigma_one():
    attn = gka(d_model=128, n_head=2, qk_norm=True)
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
