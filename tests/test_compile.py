"""What only the GPU runs, checked on CPU: the Flex score_mod's float32 lag table under bf16,
torch.compile forward + backward of each track's model (char GPT, nanochat LM, ViT) with a
softmax, a GPA and a GKA attention, and bf16 autocast of the same models.

The models are `kernattn bench`'s cases at the micro scale (one or two blocks, d <= 64), so
the whole file takes seconds plus one inductor compile. Compilation is checked twice: every
model through dynamo + AOT autograd (backend "aot_eager": graph capture, functionalisation
and the joint forward/backward graph, the steps the GPU's inductor runs first), and one
model, the char GPT with GPA + RoPE, through inductor itself (C++ codegen on CPU, which takes
tens of seconds per model on 2 cores, hence one).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch

from kernattn.attention.fused import attend, gather_lag_table, lag_score_mod
from kernattn.attention.reference import allowed_mask, exp_kernel, nadaraya_watson
from kernattn.bench.cases import char_gpt_cases, lm_cases, vit_cases
from kernattn.config import load_params

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


# ----------------------------------------------------------------------------- the lag table in float32
def _gpa_like(heads, n, gen):
    """Magnitude ~64 (a GPA bank with M = 64, add) with lag-to-lag steps of ~0.05 logits."""
    lag = torch.arange(-(n - 1), n, dtype=torch.float64).abs()
    return 64.0 - 0.05 * lag[None] + 0.05 * torch.randn(heads, 2 * n - 1, generator=gen, dtype=torch.float64)


def _reference(q, k, v, table, causal):
    n = q.shape[-2]
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + gather_lag_table(table, n)
    allowed = allowed_mask(n, causal, None)
    return nadaraya_watson(exp_kernel(logits, allowed), v, allowed)[0]


def test_score_mod_adds_the_table_in_float32():
    table = _gpa_like(2, 5, torch.Generator().manual_seed(0)).float()
    mod = lag_score_mod(table, 5)
    score = torch.tensor(1.0, dtype=torch.bfloat16)
    got = mod(score, 0, torch.tensor(1), torch.tensor(3), torch.tensor(1))
    assert got.dtype == torch.float32
    assert got.item() == (torch.tensor(1.0) + table[1, 3 - 1 + 4]).item()  # float32 sum, no bf16 rounding


@pytest.mark.parametrize("backend", ["flex", "auto", "sdpa"])  # Flex (eager here), CPU blocks, dense mask
def test_bf16_inputs_keep_the_lag_table_in_float32(backend):
    """bf16 q, k, v and a float32 table of magnitude 64: every path must add the table before
    rounding. The same call with the table itself rounded to bf16 (the old Flex behaviour)
    is shown to miss by far more, so this tolerance can tell them apart."""
    gen = torch.Generator().manual_seed(1)
    b, h, n, d = 1, 2, 48, 16
    q, k, v = (torch.randn(b, h, n, d, generator=gen, dtype=torch.float64) for _ in range(3))
    table = _gpa_like(h, n, gen)
    want = _reference(q, k, v, table, causal=True)

    def run(t):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # eager flex warns that it is unfused
            out = attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True, bias_table=t, backend=backend)
        return (out.double() - want).abs().max().item() / want.abs().max().item()

    tolerance = 2e-2  # a bf16 output: one rounding is 4e-3 of its size
    assert run(table.float()) < tolerance
    assert run(table.bfloat16().float()) > tolerance  # the rounded table: the bug this guards against


# ----------------------------------------------------------------------------- each track's model
def _cases():
    params = load_params(PARAMS, "micro")
    picked = {c.model: c for c in char_gpt_cases(params, ("rope", "gpa_m64_rope", "gka"), "small")}
    picked |= {c.model: c for c in lm_cases(params, "small")}  # base, gka
    picked |= {c.model: c for c in vit_cases(params, "small") if c.variant in ("deit", "gka")}
    return picked


CASES = _cases()


def _loss_and_grads(case, run_model, model, inputs):
    model.zero_grad(set_to_none=True)
    loss = case.loss(run_model, inputs)
    loss.backward()
    return loss.detach(), [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                           for p in model.parameters()]


def _model_and_inputs(name):
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    model.train()
    return case, model, case.batch(2, torch.device("cpu"))


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_forward_backward_equals_eager(name):
    case, model, inputs = _model_and_inputs(name)
    want_loss, want_grads = _loss_and_grads(case, model, model, inputs)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    got_loss, got_grads = _loss_and_grads(case, compiled, model, inputs)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_inductor_compiles_the_gpa_char_model():
    case, model, inputs = _model_and_inputs("char-gpa_m64_rope")
    want_loss, want_grads = _loss_and_grads(case, model, model, inputs)
    torch._dynamo.reset()
    compiled = torch.compile(model)  # inductor: C++ kernels on CPU
    got_loss, got_grads = _loss_and_grads(case, compiled, model, inputs)
    torch._dynamo.reset()
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_autocast_tracks_float32(name):
    """Under CPU bf16 autocast the loss stays within 2% of float32's and the whole gradient
    points the same way (cosine > 0.99): bf16 arithmetic, not a broken path."""
    case, model, inputs = _model_and_inputs(name)
    want_loss, want_grads = _loss_and_grads(case, model, model, inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got_loss, got_grads = _loss_and_grads(case, model, model, inputs)
    assert torch.isfinite(got_loss)
    assert abs(got_loss.item() - want_loss.item()) < 2e-2 * abs(want_loss.item())
    got, want = torch.cat([g.flatten().double() for g in got_grads]), torch.cat([g.flatten().double() for g in want_grads])
    assert torch.isfinite(got).all()
    assert torch.nn.functional.cosine_similarity(got, want, dim=0).item() > 0.99
