"""MuonAdamW's parts on hand-checkable cases (tracks/lm/muon.py, optim.py): the Polar Express
against an explicit SVD polar factor in float64, NorMuon's normalisation, the schedules and
nanochat's lr, batch and weight-decay scalings from its formulas; Muon's dtype by the device
(bfloat16 where native, float32 elsewhere: hardware.compute_dtype). The whole step against
nanochat's own code is tests/test_nanochat_golden.py."""

from __future__ import annotations

import math

import pytest
import torch

from kernattn import hardware
from kernattn.config.lm import LMParams
from kernattn.tracks.lm import flops, muon, optim
from kernattn.tracks.lm.model import GPT, GPTConfig


def test_polar_express_on_a_diagonal_matrix_is_the_scalar_iteration():
    """A diagonal matrix stays diagonal: each entry follows x <- a x + b x^3 + c x^5 from
    d_i / (1.02 ||d|| + 1e-6)."""
    d = [3.0, 1.0, 0.25]
    got = muon.polar_express(torch.diag(torch.tensor(d, dtype=torch.float64)), dtype=torch.float64)
    norm = math.sqrt(sum(v * v for v in d))
    want = []
    for v in d:
        x = v / (norm * 1.02 + 1e-6)
        for a, b, c in muon.POLAR_EXPRESS:
            x = a * x + b * x**3 + c * x**5
        want.append(x)
    torch.testing.assert_close(got, torch.diag(torch.tensor(want, dtype=torch.float64)), rtol=1e-12, atol=1e-12)
    assert all(0.85 < w < 1.15 for w in want[:2])  # entries within a factor 12 of the largest reach ~1


@pytest.mark.parametrize("shape", [(48, 24), (24, 48), (32, 32)])
def test_polar_express_approximates_the_svd_polar_factor(shape):
    """In float64: the same singular vectors as the polar factor U V^T (U^T X V diagonal), its
    singular values within 15% of 1 for a condition number of 10, so X is within 0.15 of U V^T
    in spectral norm; bfloat16 (what nanochat runs) within 0.05 of float64, entrywise."""
    gen = torch.Generator().manual_seed(0)
    m, n = shape
    u, _ = torch.linalg.qr(torch.randn(m, min(m, n), generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, min(m, n), generator=gen, dtype=torch.float64))
    s = torch.logspace(0, -1, min(m, n), dtype=torch.float64)
    g = u @ torch.diag(s) @ v.T
    x = muon.polar_express(g, dtype=torch.float64)
    core = u.T @ x @ v
    torch.testing.assert_close(core, torch.diag(torch.diagonal(core)), rtol=0, atol=1e-12)
    assert (torch.diagonal(core) - 1).abs().max() < 0.15
    assert torch.linalg.matrix_norm(x - u @ v.T, ord=2) < 0.15
    assert (muon.polar_express(g.float(), dtype=torch.bfloat16).double() - x).abs().max() < 0.05


@pytest.mark.parametrize("shape", [(40, 24), (24, 40), (32, 32)])
def test_float32_polar_express_approximates_the_svd_polar_factor(shape):
    """What a CPU without native bf16 runs, on Gaussian matrices (condition numbers 7 to 70):
    float32 stays within 1e-4 of float64 (its roundoff 6e-8 amplified at most ~1000 times, the
    product of the five quintics' slopes at 0; measured 2e-6) and has torch.linalg.svd's
    singular vectors: U^T X V diagonal to 1e-4 (measured 2e-6, where bfloat16 is 3-6e-2 off),
    its singular values within 15% of 1, so X is within 0.15 of U V^T in spectral norm."""
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    u, _, vh = torch.linalg.svd(g.double(), full_matrices=False)
    x = muon.polar_express(g, dtype=torch.float32)
    assert x.dtype == torch.float32
    assert (x.double() - muon.polar_express(g.double(), dtype=torch.float64)).abs().max() < 1e-4
    core = u.T @ x.double() @ vh.T
    torch.testing.assert_close(core, torch.diag(torch.diagonal(core)), rtol=0, atol=1e-4)
    assert (torch.diagonal(core) - 1).abs().max() < 0.15
    assert torch.linalg.matrix_norm(x.double() - u @ vh, ord=2) < 0.15


def test_muons_dtype_follows_the_device():
    """polar_express without a dtype, and so MuonAdamW's default, computes in what this CPU
    runs natively: bfloat16 with AVX512-BF16 or AMX, float32 otherwise."""
    g = torch.randn(8, 4)
    assert muon.polar_express(g).dtype == hardware.compute_dtype(g.device)
    assert hardware.compute_dtype("cpu") in (torch.bfloat16, torch.float32)


def test_normuon_equalises_rows_and_keeps_the_frobenius_norm():
    """From an empty second moment, every row (m >= n: per row) gets the same RMS and the
    whole keeps its Frobenius norm (to bfloat16's precision, the dtype of the update); the
    buffer holds (1 - beta2 in bf16 = 0.05078125) x the rows' mean squares."""
    x = torch.tensor([[3.0, 4.0], [0.625, 0.75], [1.0, 0.0]], dtype=torch.bfloat16)
    second = torch.zeros(3, 1)
    y = muon.normuon_scale(x, second, 0.95, dim=-1).float()
    rows = y.square().mean(-1)
    torch.testing.assert_close(rows, rows[:1].expand(3), rtol=2e-2, atol=0)
    assert y.norm().item() == pytest.approx(x.float().norm().item(), rel=1e-2)
    mean_sq = torch.tensor([[12.5], [(0.625**2 + 0.75**2) / 2], [0.5]])
    torch.testing.assert_close(second, 0.05078125 * mean_sq, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cautious_weight_decay_spares_the_entries_the_update_moves_away_from_zero(dtype):
    """With the gradient zero and the momentum buffer set, only entries whose update has the
    sign of the weight (the step shrinks them) are decayed: W - lr X - lr wd W [X W >= 0],
    lr and wd rounded to the update's dtype (bfloat16: as nanochat's kernel does)."""
    p = torch.tensor([[[1.0, 1.0], [1.0, -1.0]]])
    c, s = math.cos(0.3), math.sin(0.3)
    buf = torch.tensor([[[2 * c, -s], [2 * s, c]]])  # R(0.3) diag(2, 1): its polar factor is R(0.3)
    mu = torch.tensor(0.95)
    u = torch.zeros_like(p).lerp(buf.clone().lerp_(torch.zeros_like(p), 1 - mu), mu)  # Nesterov with g = 0
    x = muon.polar_express(u, dtype=dtype)
    before = p.clone()
    muon.muon_update(torch.zeros_like(p), p, buf, torch.zeros(1, 2, 1), lr=0.5, momentum=0.95,
                     weight_decay=0.5, beta2=0.95, ns_steps=5, dtype=dtype)
    x = muon.normuon_scale(x, torch.zeros(1, 2, 1), 0.95, -1)
    decay = (x * before >= 0).float()
    lr, wd = torch.tensor(0.5).to(dtype), torch.tensor(0.5).to(dtype)
    torch.testing.assert_close(p, before - (lr * x).float() - (lr * wd).float() * before * decay)
    assert decay.tolist() == [[[1.0, 0.0], [1.0, 0.0]]]  # where X has the weight's sign


def test_schedules_are_nanochats_formulas():
    assert [muon.muon_momentum(s) for s in (0, 150, 300, 1000)] == pytest.approx([0.85, 0.90, 0.95, 0.95])
    assert [muon.weight_decay_at(s, 4, 0.2) for s in range(4)] == pytest.approx([0.2, 0.15, 0.1, 0.05])


def test_paper_scalings_and_batch_are_nanochats():
    """Depth 20 at 2^20 tokens a step: lrs x sqrt(2), AdamW's embedding lrs x (1280/768)^-1/2,
    weight decay 0.2 x sqrt(2) x D_ref / D with the scaling parameters of depth 12 (110,101,632:
    12 x 12 x 768^2 matrices, 6 VE gates of 32 x 6, lm_head 32768 x 768) and depth 20
    (435,162,240); and nanochat's batch rule, 2^round(log2(2^19 (D / D_ref)^0.383)), is 2^20."""
    lm = LMParams()
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=32768, depth=20))
    ref = optim.reference_model(model)
    d12 = 12 * 12 * 768**2 + 6 * 32 * 6 + 32768 * 768
    assert ref.param_counts()["scaling"] == d12 == 110_101_632
    s = optim.scalings(lm, model, flops.tokens_per_step(lm), ref)
    assert s["batch_lr_scale"] == pytest.approx(math.sqrt(2))
    assert s["dmodel_lr_scale"] == pytest.approx((1280 / 768) ** -0.5)
    assert s["weight_decay"] == pytest.approx(0.2 * math.sqrt(2) * d12 / 435_162_240)
    assert optim.nanochat_batch_tokens(lm, model, ref) == flops.tokens_per_step(lm) == 2**20


def test_every_parameter_is_in_exactly_one_group_and_fused_qkv_is_three_matrices():
    model = GPT(GPTConfig(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=16, variant="gpa",
                          attention_options=(("n_kernels", 2),)))
    groups = optim.muon_adamw_groups(model, LMParams(), {"batch_lr_scale": 0.5, "dmodel_lr_scale": 1.0,
                                                          "weight_decay": 0.2})
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters()) and len(set(ids)) == len(ids)
    w_in = model.blocks[0].attn.inner.proj_in.weight
    square = next(g for g in groups if g["kind"] == "muon" and any(p is w_in for p in g["params"]))
    assert sum(square["chunks"]) == 2 * (3 + 1)  # per layer W_Q, W_K, W_V and W_O, each 64 x 64
    assert square["lr"] == 0.02 * 0.5  # nanochat's lrs follow the batch
    banks = next(g for g in groups if any(p is model.blocks[0].attn.inner.bank.log_sigma for p in g["params"]))
    assert banks["kind"] == "adamw" and banks["lr"] == LMParams().lr  # the kernel banks: AdamW at lm.lr, unscaled


def test_the_optimizer_is_chosen_by_name_and_scheduled_per_step():
    """lm.optimizer: muon_adamw builds MuonAdamW, adamw one torch AdamW; apply_schedule sets
    every group's lr from its initial lr and Muon's momentum and decay for the step."""
    import dataclasses

    model = GPT(GPTConfig(vocab_size=64, depth=2, aspect_ratio=32, head_dim=16, context=16))
    adamw, _ = optim.build_optimizer(model, dataclasses.replace(LMParams(), optimizer="adamw"), 2**19,
                                     torch.device("cpu"))
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["eps"] == 1e-8
    opt, scale = optim.build_optimizer(model, LMParams(), 2**17, torch.device("cpu"))
    assert isinstance(opt, muon.MuonAdamW) and scale["batch_lr_scale"] == pytest.approx(0.5)
    optim.apply_schedule(opt, 150, 600, 0.25, scale["weight_decay"])
    for g in opt.param_groups:
        assert g["lr"] == pytest.approx(g["initial_lr"] * 0.25)
        if g["kind"] == "muon":
            assert g["momentum"] == pytest.approx(0.90) and g["weight_decay"] == pytest.approx(scale["weight_decay"] * 0.75)
        else:
            assert g["eps"] == 1e-10 and g["weight_decay"] == 0.0
