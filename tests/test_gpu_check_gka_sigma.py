"""gpu-check's GKA at sigma = 1 (issue 25): kappa and the fused path's bound on hand-computed
cases, the three statuses, the advice it prints, and the module check on the CPU."""

from __future__ import annotations

import pytest
import torch

from kernattn.gpu_check import checks, gka_sigma
from kernattn.gpu_check.common import Context


def test_kappa_and_bound_hand_computed():
    # one head, tokens at 0, (3, 4) and (1, 0): squared distances to the first 0, 25, 1; sigma 2 -> 25 / 4
    f = torch.tensor([[[[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]]]])
    assert gka_sigma.kappa(f, torch.tensor([2.0])) == pytest.approx(6.25)
    # the shift by the first token: a shared offset changes nothing
    assert gka_sigma.kappa(f + 1000.0, 2.0) == pytest.approx(6.25)
    assert gka_sigma.bound(6.25, torch.bfloat16) == pytest.approx(6.25 / 256)
    assert gka_sigma.bound(6.25, torch.float32) == pytest.approx(6.25 * 2.0 ** -24)


def test_status_pass_known_limit_fail():
    k = 64.0  # bf16 bound 0.25; x4 = 1.0
    assert gka_sigma.status(0.04, 5e-2, k, torch.bfloat16) == "pass"
    assert gka_sigma.status(0.6, 5e-2, k, torch.bfloat16) == gka_sigma.KNOWN_LIMIT
    assert gka_sigma.status(1.5, 5e-2, k, torch.bfloat16) == "fail"
    # float32: the bound (64 x 2^-24 x 4 = 1.5e-5) is below the tolerance: over it is a failure
    assert gka_sigma.status(2e-4, 1e-4, k, torch.float32) == "fail"
    rows = [{"dtype": "bfloat16", "tensor": "out", "error": 0.6, "tolerance": 5e-2, "status": "fail"},
            {"dtype": "bfloat16", "tensor": "grad_log_sigma", "error": 0.9, "tolerance": float("nan"), "status": "info"}]
    judged = gka_sigma.rejudge(rows, k)
    assert [r["status"] for r in judged] == [gka_sigma.KNOWN_LIMIT, "info"] and judged[0]["kappa"] == k
    (line,) = gka_sigma.advice(judged, k)
    assert "bound eps x kappa = 2.5e-01 (kappa = 64)" in line and "init_sigma: sqrt_d" in line and "float32" in line


def test_module_check_at_sigma_one_on_cpu():
    """The check as gpu-check runs it (tiny shape, CPU): GKA built at init_sigma paper, rows
    judged against the bound; float32 within its tolerance; the summary says what happened."""
    ctx = Context(device=torch.device("cpu"), tiny=True, out_dir=None)
    shape = checks.TINY
    variant, options, _ = checks.MODULES[gka_sigma.GKA_SIGMA1]
    assert options == {"init_sigma": "paper"}
    rows = checks._module_case(ctx, shape, gka_sigma.GKA_SIGMA1, variant, options, "causal", True, None,
                               shape.lengths[1])
    assert rows and all(r["kappa"] > shape.d_head for r in rows)  # about 2d and more at sigma = 1
    assert {r["status"] for r in rows if r["dtype"] == "float32" and r["tensor"] != checks.SUMMED} == {"pass"}
    assert {r["status"] for r in rows} <= {"pass", "info", gka_sigma.KNOWN_LIMIT}
    lines = checks._sigma_one_lines(rows)
    assert lines and "GKA at sigma = 1" in lines[1]
