"""Gate (a) of issue 25 for readings of a trained kernel bank (the bump, its lag): has the bank
stopped moving? Two tests, both on every kernel of every bank. (1) report.verdicts.gates.params_converged
on the bank at initialisation and at the end (analyze-gpa's kernels.csv; the init is the
options' own: GPAOptions): a log-parameter that moved by about the farthest Adam can move it
(the sum of the rates its engine set, lr.npy) went one way at every step and was
still travelling when training stopped. (2) report.verdicts.gates.run_settled on the bank recorded at
every evaluation (the run's param_trace.npz): its change over the last part of training
against what Adam could move it there.

Read per run: |log sigma - log sigma_0|, |log l - log l_0|, |log tau - log tau_0| (tau_0 the
kernel's place in linspace(init_tau)) and |alpha - alpha_0| (alpha is stored as is), every
kernel of every bank. Adam's limit is read at the run's own variant_lr_scale (its row's, e.g. the
x1 twins', not train's for every run: issue 48).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ...attention import make_options
from ...report.verdicts import gates


def run_factor(run_dir: Path, tp) -> float:
    """The run's own variant_lr_scale: what its final.json records (a row's own factor, e.g. the
    x1 twins', replaces train.variant_lr_scale), else train.variant_lr_scale for a run finished
    before final.json recorded it."""
    try:
        factor = json.loads((Path(run_dir) / "final.json").read_text(encoding="utf-8")).get("variant_lr_scale")
    except (OSError, ValueError, AttributeError):
        factor = None
    return tp.variant_lr_scale if factor is None else float(factor)


def variant_lrs(run_dir: Path, tp, factor: float | None = None) -> np.ndarray:
    """The learning rate of every step the run's engine gave its variant-owned parameters: the
    rates it set (lr.npy, gates.run_rates) x the run's own factor (`factor`, else run_factor);
    empty for a run without the record (the gates then say no learning rate is known)."""
    rates = gates.run_rates(run_dir)
    return np.zeros(0) if rates is None else rates * (run_factor(run_dir, tp) if factor is None else factor)


def adam_travel(run_dir: Path, tp, factor: float | None = None) -> float:
    """The sum of those learning rates: the farthest Adam moved such a parameter in the run."""
    return gates.adam_travel(variant_lrs(run_dir, tp, factor))


def moved(kernels: pd.DataFrame, options: dict) -> np.ndarray:
    """|change| from initialisation of every stored log-parameter (and alpha) of the bank."""
    o = make_options("gpa", options)
    m = int(kernels["kernel"].max())
    tau0 = np.linspace(o.init_tau[0], o.init_tau[1], m)
    out = [np.log(kernels["sigma"]) - np.log(o.init_sigma), np.log(kernels["length"]) - np.log(o.init_length)]
    if kernels["tau"].notna().all() and kernels["alpha"].notna().all():
        out += [np.log(kernels["tau"]) - np.log(tau0[kernels["kernel"].to_numpy() - 1]), kernels["alpha"] - o.init_alpha]
    return np.abs(np.concatenate([np.asarray(x, dtype=float) for x in out]))


def bank_settled(run_dir: Path, tp, th: gates.Thresholds, factor: float | None = None) -> gates.Gate:
    """report.verdicts.gates.run_settled on one run's bank (its param_trace.npz), against the char
    schedule's rates for the variant-owned parameters (variant_lrs)."""
    return gates.run_settled(run_dir, th, "bank parameters", variant_lrs(run_dir, tp, factor))


def bank_gate(kernels: pd.DataFrame, options: dict, tp, th: gates.Thresholds, run_dir: Path,
              factor: float | None = None) -> gates.Gate:
    """The bank of one run has converged: it did not travel at Adam's speed limit
    (gates.params_converged on `moved`) and it stopped moving over the last part of training
    (gates.run_settled on the run's param_trace.npz); the first that fails, or a pass naming both.
    `factor`: the run's own variant_lr_scale (None: run_factor reads it)."""
    if kernels.empty:
        return gates.gate(gates.CONVERGED, False, "no kernels.csv (run kernattn analyze-gpa)")
    if gates.run_rates(run_dir) is None:
        return gates.gate(gates.CONVERGED, False, gates.no_rates(Path(run_dir).name))
    travel = gates.params_converged(moved(kernels, options), adam_travel(run_dir, tp, factor), th.max_param_travel,
                                    "bank log-parameters")
    if not travel.passed:
        return travel
    settled = bank_settled(run_dir, tp, th, factor)
    return settled if not settled.passed else gates.gate(gates.CONVERGED, True, f"{travel.why}; {settled.why}")
