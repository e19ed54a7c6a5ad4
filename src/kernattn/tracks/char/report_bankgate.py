"""Gate (a) of issue 25 for readings of a trained kernel bank (the bump, its lag): has the bank
stopped moving? The char track keeps a run's bank at initialisation and at the end only
(analyze-gpa's kernels.csv; the init is the options' own: GPAOptions), so the test is the
one report.gates.params_converged makes: a log-parameter that moved by about the farthest
Adam can move it (the sum of the schedule's learning rates, track.lr_at) went one way at
every step and was still travelling when training stopped.

Read per run: |log sigma - log sigma_0|, |log l - log l_0|, |log tau - log tau_0| (tau_0 the
kernel's place in linspace(init_tau)) and |alpha - alpha_0| (alpha is stored as is), every
kernel of every bank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...attention import make_options
from ...report import gates
from .track import lr_at


def adam_travel(tp) -> float:
    """The sum of the learning rates the char schedule (train params `tp`) gives the
    variant-owned parameters (x train.variant_lr_scale)."""
    return gates.adam_travel([lr_at(s, tp) * tp.variant_lr_scale for s in range(tp.max_steps)])


def moved(kernels: pd.DataFrame, options: dict) -> np.ndarray:
    """|change| from initialisation of every stored log-parameter (and alpha) of the bank."""
    o = make_options("gpa", options)
    m = int(kernels["kernel"].max())
    tau0 = np.linspace(o.init_tau[0], o.init_tau[1], m)
    out = [np.log(kernels["sigma"]) - np.log(o.init_sigma), np.log(kernels["length"]) - np.log(o.init_length)]
    if kernels["tau"].notna().all() and kernels["alpha"].notna().all():
        out += [np.log(kernels["tau"]) - np.log(tau0[kernels["kernel"].to_numpy() - 1]), kernels["alpha"] - o.init_alpha]
    return np.abs(np.concatenate([np.asarray(x, dtype=float) for x in out]))


def bank_gate(kernels: pd.DataFrame, options: dict, tp, max_fraction: float) -> gates.Gate:
    """The bank of one run has converged (gates.params_converged on `moved`)."""
    if kernels.empty:
        return gates.gate(gates.CONVERGED, False, "no kernels.csv (run kernattn analyze-gpa)")
    return gates.params_converged(moved(kernels, options), adam_travel(tp), max_fraction, "bank log-parameters")
