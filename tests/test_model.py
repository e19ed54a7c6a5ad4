"""The char-level GPT: parameter counts, causality for every row of params.yaml, shapes."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernattn.config import load_params
from kernattn.tracks.char.model import GPT, count_params

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml", "paper")
ROWS = {r.name: r for r in PARAMS.matrix.rows}
SMALL = SimpleNamespace(n_layer=2, n_head=2, d_model=32, context=24, mlp_ratio=2, dropout=0.0)
V = 50


def small(row_name: str, **over) -> GPT:
    torch.manual_seed(0)
    row = ROWS[row_name]
    return GPT(V, SimpleNamespace(**{**vars(SMALL), **over}), row.variant, row.options)


def expected_softmax_params(v, m) -> int:
    d, r = m.d_model, m.mlp_ratio
    block = 4 * d * d + (2 * r * d * d + r * d + d) + 4 * d
    return 2 * v * d + m.n_layer * block + 2 * d


def test_rope_param_count_formula_and_paper_scale():
    assert small("rope").num_params() == expected_softmax_params(V, SMALL)
    with torch.device("meta"):  # paper scale without allocating: vocab 93, 4x4, d 512, ctx 256
        paper = GPT(93, PARAMS.model, "softmax", {"position": "rope"})
    assert paper.num_params() == 12_697_600
    assert paper.num_params(non_embedding=True) == 12_697_600 - 2 * 93 * 512
    assert paper.extra_params() == 0


def test_extra_params_per_row():
    L, H, dh = SMALL.n_layer, SMALL.n_head, SMALL.d_model // SMALL.n_head
    expected = {
        "rope": 0,
        "no_pos": 0,                              # softmax without positions
        "alibi": 0,
        "learned_rope": L * dh // 2,              # frequencies shared by the heads of a layer
        "gpa_decay_m8": 2 * 8 * H * L,            # sigma, l per kernel
        "gpa_dp_m8": 4 * 8 * H * L,               # sigma, l, alpha, tau per kernel
        "gpa_m64": 4 * 64 * H * L,
        "gpa_m64_rope": 4 * 64 * H * L,
        "gpa_m1": 4 * 1 * H * L,
        "gpa_m4": 4 * 4 * H * L,
        "gpa_m8": 4 * 8 * H * L,
        "gpa_m16": 4 * 16 * H * L,
        "t5": 32 * H * L,
        "lag_table": 256 * H * L,                 # max_len lags per head (causal)
        "gka": L * (H - 3 * SMALL.d_model ** 2),  # no W_Q, W_K, W_V; one log_sigma per head
        # the controls of issue 50
        "kerple_log": 2 * H * L,                  # r1, r2 per head
        "kerple_power": 2 * H * L,
        "fire": L * (32 + 32 + 32 * H + 2),       # f's w1, b1 (hidden 32), w2 (32 x H, no bias); c and L
        "cope": L * dh * 64,                      # the position embeddings [d_head, n_positions], shared by the heads
        "gka_sqrtd": L * (H - 3 * SMALL.d_model ** 2),
        "rbf": H * L,                             # one log_sigma per head beside W_Q, W_K, W_V
        "sigmoid": 0,                             # its -log n bias is fixed
    }
    assert set(expected) == set(ROWS), "a row was added to params.yaml: add its expected count here"
    base = expected_softmax_params(V, SMALL)
    for name, extra in expected.items():
        model = small(name)
        assert model.extra_params() == extra, name
        assert model.num_params() == base + extra, name


def test_paper_gpa_m64_adds_4096_params():
    # gpa-long: "adding just 4,096 parameters" = 4 M x 4 heads x 4 blocks with M = 64.
    with torch.device("meta"):
        model = GPT(93, PARAMS.model, "gpa", ROWS["gpa_m64"].options)
    assert model.extra_params() == 4 * 64 * PARAMS.model.n_head * PARAMS.model.n_layer == 4096


@pytest.mark.parametrize("row_name", sorted(ROWS))
def test_causal_and_shapes(row_name):
    model = small(row_name).eval()
    B, N, t = 2, SMALL.context, 10
    idx = torch.randint(0, V, (B, N), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 7) % V
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert a.shape == (B, N, V)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert (a[:, t:] - b[:, t:]).abs().max() > 1e-4, "changing token t must change the logits at t"
    # backward reaches every parameter
    model.train()
    targets = torch.randint(0, V, (B, N))
    model.loss(idx, targets).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


def test_context_is_enforced():
    model = small("rope")
    with pytest.raises(ValueError, match="exceeds the model context"):
        model(torch.zeros(1, SMALL.context + 1, dtype=torch.long))


def test_init_and_weight_decay_groups():
    model = small("gpa_dp_m8", n_layer=4, d_model=256, n_head=4)
    std = lambda t: t.detach().std().item()  # noqa: E731
    assert std(model.blocks[0].mlp.fc.weight) == pytest.approx(0.02, rel=0.05)
    assert std(model.blocks[0].attn.proj_out.weight) == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert std(model.blocks[0].mlp.proj.weight) == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    bank = model.blocks[0].attn.bank  # the variant's own init survives (gpa-long: l = 150)
    assert torch.allclose(bank.log_length.exp(), torch.full_like(bank.log_length, 150.0))
    decay, no_decay, variant = model.param_groups(0.1, variant_lr_scale=10.0)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0 == variant["weight_decay"]
    assert (decay["lr_scale"], no_decay["lr_scale"], variant["lr_scale"]) == (1.0, 1.0, 10.0)
    # the variant's own parameters, and only they, get the scaled lr: the four bank tensors per layer
    owned = {n for n, p in model.named_parameters() if any(p is q for q in variant["params"])}
    assert owned == {f"blocks.{i}.attn.bank.{k}" for i in range(4) for k in ("log_sigma", "log_length", "alpha", "log_tau")}
    decayed = {id(p) for p in decay["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in decayed}
    assert all(n.endswith(".weight") for n in names)
    assert "tok_emb.weight" not in names and "lm_head.weight" in names
    assert not any("bank" in n or "ln" in n for n in names)
    assert len(decay["params"]) + len(no_decay["params"]) + len(variant["params"]) == len(list(model.parameters()))
    assert len(small("alibi").param_groups(0.1)) == 2  # no variant-owned parameters: no third group
    assert count_params(model) == model.num_params()


def test_gka_has_no_position_information():
    # GKA (gka-paper) has no position scheme and the GPT no position embedding: a permutation of
    # the prefix before the last token leaves the last token's logits unchanged.
    model = small("gka").eval()
    idx = torch.randint(0, V, (1, 12), generator=torch.Generator().manual_seed(2))
    perm = torch.cat((idx[:, :11][:, torch.randperm(11)], idx[:, 11:]), dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[:, -1], model(perm)[:, -1], rtol=1e-5, atol=1e-5)
