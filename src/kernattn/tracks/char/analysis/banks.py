"""Kernel-bank shapes, per-kernel parameters, the bump, and bank strength (gpa-long, 3.1-3.2).

Every GPA layer holds one KernelBank with a G_h(lag) per head (kernattn.attention.gpa):

    G(lag) = sum_m sigma_m^2 exp(-lag / l_m) exp(-2 alpha_m^2 sin^2(lag / tau_m))   (eq. 5)

The attention adds G (combine "add", gpa-long) or log G (combine "mult", gpa-short) to the
logits; `KernelBank.bias` returns exactly that addend.

Definitions used by the pipeline (and the report):
- shape: G over the integer lags 0..context (the model uses 0..context-1), per layer and head.
- period of a kernel: pi * tau (sin^2 has period pi; attention-math.md), not tau.
- bump: the local maximum of G at a lag >= bump_min_lag with the largest topographic
  prominence (scipy.signal.find_peaks: how far G falls, on the lower side, before it rises
  to a higher point). The prominence is measured against G's own shape, so a bump on a
  decaying curve counts without fitting the decay first; a monotone G has no bump (None).
  "Largest prominence" rather than "highest value": on a decaying bank the highest local
  maximum is usually the first small ripple, while the paper's "prominent bump at lag 70"
  is the one that stands out. Local maxima whose prominence is below 1e-6 of G's range are
  float32 rounding, not bumps.
- strength: the span of the bank's addend to the logits over the lags the model uses,
  max - min over lags 0..context-1 of G (add) or log G (mult), in logit units (nats). Only
  the variation of the bias over lags can change attention weights (a constant cancels in
  the softmax), so a bank of strength s changes no ratio of two attention weights by more
  than a factor exp(s); a bank that is "effectively zero" (gpa-long, 3.1) has strength ~0.
  The bank's mean G (its size, what a plot of it shows) is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.signal import find_peaks

from ....attention.gpa import KernelBank

NOISE_PROMINENCE = 1e-6  # relative to G's range: below this a local maximum is rounding noise


def kernel_banks(model) -> list[KernelBank]:
    """The KernelBank of every layer of a GPT whose attention is GPA (ValueError otherwise)."""
    banks = [getattr(block.attn, "bank", None) for block in model.blocks]
    if not banks or not all(isinstance(b, KernelBank) for b in banks):
        raise ValueError(f"not a GPA model (attention {model.variant!r} has no kernel bank)")
    return banks


@torch.no_grad()
def bank_shapes(model, n_lags: int) -> np.ndarray:
    """[layers, heads, n_lags]: G(lag) at lags 0..n_lags-1, from the explicit sum (eq. 5)."""
    lags = torch.arange(n_lags, dtype=torch.float32)
    return np.stack([b.bank(lags).double().cpu().numpy() for b in kernel_banks(model)])


@torch.no_grad()
def bank_biases(model, n_lags: int) -> np.ndarray:
    """[layers, heads, n_lags]: what the bank adds to the logits at lags 0..n_lags-1 (G or log G)."""
    lags = torch.arange(n_lags, dtype=torch.float32)
    return np.stack([b.bias(lags).double().cpu().numpy() for b in kernel_banks(model)])


def kernel_parameters(model) -> list[dict]:
    """One record per (layer, head, kernel): sigma, length, alpha, tau, period = pi tau (NaN
    for alpha, tau and period in a decay-only bank). Layers, heads and kernels count from 1."""
    out = []
    for layer, bank in enumerate(kernel_banks(model), 1):
        table = {k: v.double().cpu().numpy() for k, v in bank.parameters_table().items()}
        n_head, n_kernels = table["sigma"].shape
        for h in range(n_head):
            for m in range(n_kernels):
                rec = {"layer": layer, "head": h + 1, "kernel": m + 1}
                for key in ("sigma", "length", "alpha", "tau", "period"):
                    rec[key] = float(table[key][h, m]) if key in table else math.nan
                out.append(rec)
    return out


@dataclass(frozen=True)
class Bump:
    lag: int
    height: float           # G at the bump
    prominence: float       # in G's units
    rel_prominence: float   # prominence / (max G - min G) over all lags

    def as_dict(self) -> dict:
        return asdict(self)


def find_bump(g, min_lag: int) -> Bump | None:
    """The bump of one bank G over lags 0..len(g)-1 (module docstring); None if G has no local
    maximum at a lag >= min_lag."""
    g = np.asarray(g, dtype=np.float64)
    span = float(g.max() - g.min()) if g.size else 0.0
    if g.size < 3 or span <= 0:
        return None
    peaks, props = find_peaks(g, prominence=NOISE_PROMINENCE * span)
    keep = peaks >= min_lag
    if not keep.any():
        return None
    peaks, prom = peaks[keep], props["prominences"][keep]
    best = int(np.argmax(prom))  # first (smallest lag) among equals
    lag = int(peaks[best])
    return Bump(lag, float(g[lag]), float(prom[best]), float(prom[best] / span))


def strength(bias) -> np.ndarray:
    """Span (max - min) of banks' logit addends over lags (the last axis): [...] -> [...]."""
    return np.ptp(np.asarray(bias, dtype=np.float64), axis=-1)
