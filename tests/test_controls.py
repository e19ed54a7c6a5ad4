"""The controls of issue 50 (KERPLE, sigmoid, FIRE, differential, projected RBF, FoX, CoPE)
against their papers' equations written out here once more, in float64: what the conformance
suite cannot see, since it holds each fast path to the variant's own kernel. Plus the block
edges of the blocked fast paths, CoPE's clamp, and the causal-only variants' refusal."""

from __future__ import annotations

import math

import pytest
import torch

from kernattn import attention
from kernattn.attention.conformance import build_pair, compare, grads, inputs
from kernattn.attention.cope import gate_mass
from kernattn.attention.positions import KerpleBias
from kernattn.attention.reference import allowed_mask


def heads_of(m, t):
    return m.split_heads(t)


def qkv(m, x):
    return [heads_of(m, t) for t in m.proj_in(x).chunk(3, dim=-1)]


def softmax_rows(logits, allowed):
    return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)


def test_kerple_biases_are_the_papers_kernels():
    lag = torch.arange(-5, 6, dtype=torch.float64)
    for form in ("log", "power"):
        b = KerpleBias(2, form).double()
        with torch.no_grad():
            b.log_r1.copy_(torch.tensor([0.3, -0.2]))
            b.r2_raw.copy_(torch.tensor([0.5, -1.0]))
        r1 = torch.tensor([0.3, -0.2]).double().exp()[:, None]
        if form == "log":
            want = -r1 * torch.log(1 + torch.tensor([0.5, -1.0]).double().exp()[:, None] * lag.abs())
        else:
            r2 = 2 / (1 + torch.exp(-torch.tensor([0.5, -1.0]).double()))[:, None]
            assert bool(((r2 > 0) & (r2 <= 2)).all())
            want = -r1 * lag.abs() ** r2
        torch.testing.assert_close(b.bias(lag), want, rtol=1e-12, atol=1e-12)
        b.bias(lag).sum().backward()  # lag 0 included: no 0 * log 0
        assert all(torch.isfinite(p.grad).all() for p in b.parameters())


def test_sigmoid_weights_are_unnormalised_sigmoids_with_the_log_count_bias():
    m = attention.build("sigmoid", d_model=16, n_head=2, position="none").double()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    q, k, _ = qkv(m, x)
    allowed = allowed_mask(9, True, None)
    count = torch.arange(1, 10, dtype=torch.float64)[:, None]  # causal: query i sees i + 1 keys
    want = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(8) - count.log()) * allowed
    w = m.attention_weights(x)
    torch.testing.assert_close(w, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_fire_bias_is_the_mlp_of_the_log_normalised_lag():
    m = attention.build("fire", d_model=16, n_head=2, hidden=4, init_threshold=3.0).double()
    f = m.fire
    c, big_l = float(f.log_c.detach().exp()), float(f.log_threshold.detach().exp())
    n = 7
    got = f(n, "cpu")
    for i in range(n):
        for j in range(i + 1):
            u = math.log(c * (i - j) + 1) / math.log(c * max(i, big_l) + 1)
            out = torch.relu(u * f.w1 + f.b1) @ f.w2
            torch.testing.assert_close(got[:, i, j], out, rtol=1e-12, atol=1e-12)


def test_every_fire_parameter_changes_the_output():
    """No parameter of FIRE's bias may be one the softmax cancels (a constant per head): its
    gradient would be rounding noise, which Adam turns into full steps, so 2 ranks would end
    elsewhere than 1 (check-variant's DDP check failed on an output bias). Seeded, at the default
    width: a hidden unit that is on over the whole lag range is cancelled too, so with a few
    units drawn at random every b1 entry may be one (it was, at hidden=4, in some draws)."""
    torch.manual_seed(0)
    m = attention.build("fire", d_model=16, n_head=2, init_threshold=3.0).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    (m(x) * torch.randn(2, 9, 16, dtype=torch.float64)).sum().backward()
    for name, p in m.fire.named_parameters():
        assert p.grad.abs().max() > 1e-6, name


def test_differential_weights_subtract_two_softmax_maps():
    m = attention.build("differential", d_model=16, n_head=2, position="none", lambda_init=0.5).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    q, k, _ = qkv(m, x)
    allowed = allowed_mask(6, True, None)
    lam = (torch.exp(m.lambda_q1 @ m.lambda_k1) - torch.exp(m.lambda_q2 @ m.lambda_k2) + 0.5)
    a = [softmax_rows(qh @ kh.transpose(-1, -2) / 2.0, allowed) for qh, kh in zip(q.chunk(2, -1), k.chunk(2, -1))]
    w = m.attention_weights(x)
    torch.testing.assert_close(w, a[0] - lam * a[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w.sum(-1), (1 - lam).expand_as(w.sum(-1)), rtol=1e-12, atol=1e-12)


def test_rbf_is_the_gaussian_kernel_of_the_projections():
    m = attention.build("rbf", d_model=16, n_head=2, causal=False, init_sigma=2.0).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    q, k, _ = qkv(m, x)
    d2 = ((q[:, :, :, None, :] - k[:, :, None, :, :]) ** 2).sum(-1)
    sigma = m.log_sigma.exp()[None, :, None, None]  # 2.0 up to its float32 log
    kern = torch.exp(-d2 / (2 * sigma**2))
    torch.testing.assert_close(m.attention_weights(x), kern / kern.sum(-1, keepdim=True), rtol=1e-12, atol=1e-12)


def test_fox_logits_carry_the_log_forget_gates_between_key_and_query():
    m = attention.build("fox", d_model=16, n_head=2).double()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    q, k, _ = qkv(m, x)
    f = torch.sigmoid(m.forget(x)).transpose(1, 2)  # [B, H, N]
    torch.testing.assert_close(m.gates(x), f, rtol=1e-12, atol=1e-12)
    logits = q @ k.transpose(-1, -2) / math.sqrt(8)
    for i in range(6):
        for j in range(i + 1):
            logits[:, :, i, j] += f[:, :, j + 1:i + 1].log().sum(-1)
    want = softmax_rows(logits, allowed_mask(6, True, None))
    torch.testing.assert_close(m.attention_weights(x), want, rtol=1e-12, atol=1e-12)


def test_cope_positions_count_gates_and_interpolate_the_embeddings():
    m = attention.build("cope", d_model=16, n_head=2, n_positions=3).double()
    torch.manual_seed(1)
    with torch.no_grad():
        m.pos_emb.normal_()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    q, k, _ = qkv(m, x)
    s = q @ k.transpose(-1, -2) / math.sqrt(8)
    g = torch.sigmoid(s).tril()
    torch.testing.assert_close(m.gates(x), g, rtol=1e-12, atol=1e-12)
    logits = s.clone()
    for i in range(6):
        for j in range(i + 1):
            p = torch.clamp(g[..., i, j:i + 1].sum(-1), max=2.0)  # n_positions 3: the clamp is reached
            lo = p.floor().long()
            frac = (p - p.floor())[..., None]
            e = (1 - frac) * m.pos_emb.t()[lo] + frac * m.pos_emb.t()[(lo + 1).clamp(max=2)]
            logits[..., i, j] += (q[..., i, :] * e).sum(-1)
    torch.testing.assert_close(m.attention_weights(x), softmax_rows(logits, allowed_mask(6, True, None)),
                               rtol=1e-12, atol=1e-12)


def test_gate_mass_is_the_share_on_the_marked_keys():
    gates = torch.tensor([[[[1.0, 0.0], [1.0, 2.0]]]])  # B 1, H 1, N 2
    assert gate_mass(gates, torch.tensor([[True, False]])).tolist() == [0.5]


@pytest.mark.parametrize("name, options", [("sigmoid", {}), ("cope", {}), ("cope", {"n_positions": 4})])
@pytest.mark.parametrize("causal, window", [(True, None), (True, 5), (False, None)])
def test_blocked_fast_paths_across_block_edges(name, options, causal, window, monkeypatch):
    """Blocks of 7 queries at N = 17: block edges and the window's reach across them."""
    if not causal and name == "cope":  # causal only
        with pytest.raises(attention.AttentionConfigError):
            build_pair(name, options, causal, window)
        return
    monkeypatch.setattr(attention.variant(name).module, "block", 7)
    fast, ref = build_pair(name, options, causal, window)
    x, probe = inputs(17)
    y_fast, g_fast = grads(fast, x, probe)
    y_ref, g_ref = grads(ref, x, probe)
    problems = compare(y_fast, y_ref, "output", 1e-9, 1e-10)
    for key in g_ref:
        problems += compare(g_fast[key], g_ref[key], f"gradient of {key}", 1e-9, 1e-10)
    assert not problems


@pytest.mark.parametrize("name", ["fire", "fox", "cope"])
def test_causal_only_variants_refuse_bidirectional_attention(name):
    with pytest.raises(attention.AttentionConfigError) as e:
        attention.build(name, d_model=16, n_head=2, causal=False)
    assert "causal only" in str(e.value) and name in str(e.value) and "\n" not in str(e.value)
    assert not attention.make_options(name, {}).allows_bidirectional()


def test_the_new_variants_are_registered_with_their_tracks():
    for name in ("sigmoid", "differential", "rbf"):
        assert attention.make_options(name, {}).allows_bidirectional()
    positions = attention.option_fields("softmax")["position"].metadata["choices"]
    assert {"kerple_log", "kerple_power"} <= set(positions)
