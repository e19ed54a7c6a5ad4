"""gpa-short's claims that are properties of the library, checked here (paper_numbers.yaml kind
unit_test names these tests; the report reads them "holds (test ...)" when they passed):
RoPE's attention scores depend on positions only through n - i, and a kernel bank's Toeplitz
matrix G(|i - j|) is positive semi-definite (it is a sum of products of the exponential and
the periodic kernel, both PSD: gpa-short, Section 2)."""

from __future__ import annotations

import torch

from kernattn.attention.gpa import GPAOptions, KernelBank
from kernattn.attention.positions import Rope


def _score(rope: Rope, q: torch.Tensor, k: torch.Tensor, n: int, i: int) -> torch.Tensor:
    """q at position n and k at position i, rotated, dotted."""
    seq_q = torch.zeros(n + 1, q.shape[-1], dtype=torch.float64)
    seq_k = torch.zeros(n + 1, k.shape[-1], dtype=torch.float64)
    seq_q[n], seq_k[i] = q, k
    return rope(seq_q)[n] @ rope(seq_k)[i]


def test_rope_scores_depend_only_on_n_minus_i():
    torch.manual_seed(0)
    rope = Rope(16).double()
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    for lag in (0, 1, 5, 17):
        scores = torch.stack([_score(rope, q, k, i + lag, i) for i in (0, 3, 40, 101)])
        assert torch.allclose(scores, scores[0].expand_as(scores), rtol=0, atol=1e-10), (lag, scores)
    # and they do depend on the lag (the claim is not vacuous)
    assert not torch.isclose(_score(rope, q, k, 5, 0), _score(rope, q, k, 6, 0))


def test_kernel_bank_toeplitz_matrix_is_psd():
    torch.manual_seed(1)
    n = 96
    lags = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).double()
    for kernel in ("decay_periodic", "decay"):
        bank = KernelBank(2, GPAOptions(n_kernels=8, kernel=kernel, combine="add")).double()
        with torch.no_grad():  # trained-like parameters, away from the initial ones
            for p in bank.parameters():
                p.add_(0.5 * torch.randn_like(p))
        gram = bank.bank(lags)                         # [H, n, n] = G_h(|i - j|)
        assert torch.allclose(gram, gram.transpose(-1, -2))
        eig = torch.linalg.eigvalsh(gram)
        assert (eig >= -1e-10 * eig.abs().max()).all(), (kernel, eig.min())
    # a lag function that is not a kernel fails the same check (the test can fail)
    bad = torch.cos(lags / 3.0) - 0.5 * (lags.abs() == 1)
    assert torch.linalg.eigvalsh(bad).min() < -1e-3
