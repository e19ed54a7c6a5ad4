"""kernattn's LM against golden values made once by nanochat c7ba252's own code (float32, CPU).

tests/golden/nanochat/README.md says how golden.npz was made and how to remake it: nanochat's
GPT (depth 2, width 128, 2 heads, context 16, vocabulary 300 padded to 320, window pattern
SSSL) at an init on an 8-bit grid, a batch's logits and loss, the gradients, and the weights
after three steps of its MuonAdamW under base_train.py's schedules.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernattn.config.lm import LMParams
from kernattn.io import atomic_torch_save, atomic_write_json
from kernattn.tracks.lm import muon, nanochat_io, optim
from kernattn.tracks.lm.model import GPT, GPTConfig
from kernattn.tracks.lm.track import lr_factor

GOLDEN = Path(__file__).parent / "golden" / "nanochat" / "golden.npz"
# base_train.py's schedule arguments the golden steps used (make_golden.SCHEDULE_ARGS), 3 steps
SCHEDULE = types.SimpleNamespace(warmup_frac=0.0, warmdown_frac=0.5, min_lr_ratio=0.0)
STEPS = 3
VOCAB = 300


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as g:
        return {k: g[k] for k in g.files}


def unpack_nibbles(packed: np.ndarray, shape) -> torch.Tensor:
    """make_golden.pack_nibbles undone: int values in -7..7 of `shape`."""
    flat = np.stack([packed >> 4, packed & 15], axis=1).reshape(-1).astype(np.int16) - 8
    return torch.from_numpy(flat[: int(np.prod(shape))].reshape(tuple(shape)).astype(np.int8))


def nanochat_init(g) -> dict[str, torch.Tensor]:
    """The golden init in nanochat's names, rebuilt exactly as make_golden.py rebuilt it."""
    return {k[5:]: unpack_nibbles(g[k], g["shape/" + k[5:]]).float() * torch.from_numpy(g["scale/" + k[5:]])
            for k in g if k.startswith("init/")}


def kernattn_config(g) -> GPTConfig:
    c = json.loads(str(g["config"]))
    return GPTConfig(vocab_size=c["vocab_size"], depth=c["n_layer"], aspect_ratio=c["n_embd"] // c["n_layer"],
                     head_dim=c["n_embd"] // c["n_head"], context=c["sequence_len"], window_pattern=c["window_pattern"])


@pytest.fixture()
def imported(golden, tmp_path):
    """kernattn's GPT loaded through import-lm's reader from a nanochat-layout folder."""
    atomic_torch_save(tmp_path / "model_000000.pt", nanochat_init(golden))
    atomic_write_json(tmp_path / "meta_000000.json", {"model_config": json.loads(str(golden["config"]))})
    cfg = kernattn_config(golden)
    state, _, _ = nanochat_io.load_nanochat(tmp_path, None, cfg)
    model = GPT(cfg)
    model.load_state_dict(state)
    return model


def batch(g, step):
    return torch.from_numpy(g["x"][step]).long(), torch.from_numpy(g["y"][step]).long()


def loss_of(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, model.cfg.vocab_size), y.reshape(-1))


def check_sketch(prefix: str, golden, tensors: dict[str, torch.Tensor], atol: float, rel: float = 1e-4) -> None:
    """Every tensor against the golden sketch: sampled entries (or all) within atol, and the
    sum and sum of squares of all entries (relative `rel`)."""
    for name, value in tensors.items():
        if nanochat_io.PADDED.match(name):
            value = value[:VOCAB]  # the sketch leaves nanochat's padding rows out
        flat = value.detach().reshape(-1).double()
        if f"{prefix}_idx/{name}" in golden:
            sums = golden[f"{prefix}_sums/{name}"]
            assert flat.sum().item() == pytest.approx(sums[0], rel=rel, abs=atol * flat.numel() ** 0.5), name
            assert flat.square().sum().item() == pytest.approx(sums[1], rel=rel), name
            flat = flat[torch.from_numpy(golden[f"{prefix}_idx/{name}"]).long()]
        np.testing.assert_allclose(flat.numpy(), golden[f"{prefix}/{name}"], rtol=0, atol=atol, err_msg=name)


def test_logits_and_loss_match_nanochat(golden, imported):
    x, y = batch(golden, 0)
    with torch.no_grad():
        logits = imported(x)
    np.testing.assert_allclose(logits.numpy(), golden["logits"], rtol=0, atol=1e-5)
    assert loss_of(imported, x, y).item() == pytest.approx(golden["losses"][0], abs=1e-5)


def test_gradients_match_nanochat(golden, imported):
    x, y = batch(golden, 0)
    loss_of(imported, x, y).backward()
    grads = nanochat_io.to_nanochat({n: p.grad for n, p in imported.named_parameters()}, imported.cfg.vocab_size)
    scale = max(np.abs(golden[k]).max() for k in golden if k.startswith("grad/"))
    check_sketch("grad", golden, grads, atol=1e-5 * scale)


def golden_scale(cfg: GPTConfig) -> dict[str, float]:
    """make_golden.py's optimiser: base_train's defaults with batch and horizon factors at 1."""
    return {"batch_lr_scale": 1.0, "dmodel_lr_scale": (cfg.dim / muon.D_MODEL_REF) ** -0.5, "weight_decay": 0.2}


def test_groups_are_nanochats(golden, imported):
    """Per-group lrs, betas, eps and decay of LMParams' defaults equal nanochat's setup_optimizer."""
    ours = optim.muon_adamw_groups(imported, LMParams(), golden_scale(imported.cfg))
    names = {id(p): n for n, p in imported.named_parameters()}
    mapped = {}
    for g in ours:
        for p in g["params"]:
            for n in nanochat_io.to_nanochat({names[id(p)]: p}, imported.cfg.vocab_size):
                mapped[n] = g
    for theirs in json.loads(str(golden["groups"])):
        for n in theirs["params"]:
            g = mapped.pop(n)
            assert g["kind"] == theirs["kind"] and g["lr"] == pytest.approx(theirs["lr"], rel=1e-12), n
            for key in ("betas", "eps", "weight_decay", "beta2", "ns_steps"):
                if key in theirs:
                    assert tuple(np.atleast_1d(g[key])) == pytest.approx(tuple(np.atleast_1d(theirs[key]))), (n, key)
    assert not mapped  # every parameter of ours is in one of nanochat's groups


def test_schedule_is_nanochats(golden):
    """lr multiplier, Muon momentum and weight decay per step as base_train.py's functions gave."""
    ours = [(lr_factor(s, STEPS, SCHEDULE), muon.muon_momentum(s), muon.weight_decay_at(s, STEPS, 0.2))
            for s in range(STEPS)]
    np.testing.assert_allclose(np.array(ours), golden["schedule"], rtol=1e-12)


def run_steps(model, golden, grads, steps: int = STEPS) -> list[float]:
    """`steps` steps of kernattn's MuonAdamW as make_golden.train ran nanochat's; the losses."""
    opt = muon.MuonAdamW(optim.muon_adamw_groups(model, LMParams(), golden_scale(model.cfg)))
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    losses = []
    for step in range(steps):
        losses.append(grads(model, step))
        optim.apply_schedule(opt, step, STEPS, lr_factor(step, STEPS, SCHEDULE), 0.2)
        opt.step()
        model.zero_grad(set_to_none=True)
    return losses


def test_three_muon_adamw_steps_match_nanochat(golden, imported):
    """Gradients that are the same elementwise function of the weights in both (make_golden.
    synthetic_grad): the weights after three steps equal nanochat's to 1e-4."""
    def grads(model, step):
        for p in model.parameters():
            p.grad = torch.sin(p.detach() * 7.0 + step) * 1e-3
    run_steps(imported, golden, grads)
    check_sketch("after_synthetic", golden, nanochat_io.to_nanochat(imported.state_dict(), imported.cfg.vocab_size),
                 atol=1e-4)


def test_a_training_step_follows_nanochat(golden, imported):
    """The model's own gradients differ from nanochat's by float32 rounding (~1e-10), which
    the bfloat16 Polar Express turns into differences of a few percent of a Muon update (as
    between nanochat on two machines): after one step the next batch's loss is still
    nanochat's to 5e-4 (measured 1.7e-4 of the step's 0.16; matrix_lr or embedding_lr 20% off
    moves it by 1.2e-3 and 8.7e-3, scalar_lr or unembedding_lr doubled by 1.4e-2 and 4.6e-2)."""
    def grads(model, step):
        loss = loss_of(model, *batch(golden, step))
        loss.backward()
        return loss.item()
    run_steps(imported, golden, grads, steps=1)
    with torch.no_grad():
        assert loss_of(imported, *batch(golden, 1)).item() == pytest.approx(golden["losses"][1], abs=5e-4)


def test_export_gives_nanochats_state_back(golden, imported):
    """export-lm's mapping returns the golden state dict: same names, same values, the
    vocabulary padding zero."""
    init, vocab = nanochat_init(golden), imported.cfg.vocab_size
    back = nanochat_io.to_nanochat(imported.state_dict(), vocab)
    assert set(back) == set(init)
    for name, value in init.items():
        rows = vocab if nanochat_io.PADDED.match(name) else value.shape[0]
        torch.testing.assert_close(back[name][:rows], value[:rows], rtol=0, atol=0, msg=name)
        assert not back[name][rows:].any(), name
