"""Gates a comparison must pass before it gets a verdict (issue 25), each printed in the
verdict when it fails: "not judged (<gate>: <why>)".

    converged   the quantity judged has stopped moving: for a comparison of two rows, the
                fitted change of their loss gap over the last `last_fraction` of training
                (`gap_converged`); for a reading of one run, its validation loss's fitted drop
                there (`loss_converged`); and for readings of a
                trained bank or bandwidth, how far its parameters moved against the farthest
                Adam can move them, from initialisation (`params_converged`) and over that same
                tail of training, read from the run's param_trace.npz (`params_settled`,
                `run_settled`)
    estimable   at least stats.MIN_SEEDS seeds per arm and a non-zero spread (stats.judge_family
                applies it itself)
    premise     what the paper's reading presupposes (e.g. a bank below the strength threshold
                before "a weak head can go"; a converged bank before "the bump stays")

The thresholds are fixed in paper_numbers.yaml (`gates:`), before the runs (`thresholds`).

For the studies and any other part: build `gate(name, passed, why)` for each gate, then
`withheld(gates)` is None when all passed, else the verdict to print (pass it as stats.Test's
`gate` so the comparison is kept out of its Holm family), or `apply(verdict, gates)` on a
verdict already made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import stats

CONVERGED = "not converged"
PREMISE = "premise not met"


@dataclass(frozen=True)
class Gate:
    name: str        # what failed, as the verdict prints it ("not converged", "premise not met")
    passed: bool
    why: str = ""    # one clause, printed after the name when the gate fails


def gate(name: str, passed: bool, why: str = "") -> Gate:
    """One gate; `why` says what was measured against which threshold."""
    return Gate(name, bool(passed), why)


def beside(detail: str, g: Gate) -> str:
    """`detail` with what a passed gate measured after it ("gate (a): ..."): a gate that let a
    verdict through still says what it saw (e.g. rows still learning)."""
    return "; ".join(x for x in (detail, f"gate (a): {g.why}" if g.passed and g.why else "") if x)


def withheld(gates: Iterable[Gate]) -> str | None:
    """The verdict of the first failed gate ("not judged (<name>: <why>)"), or None."""
    failed = next((g for g in gates if not g.passed), None)
    if failed is None:
        return None
    return stats.not_judged(f"{failed.name}: {failed.why}" if failed.why else failed.name)


def apply(verdict: str, gates: Iterable[Gate]) -> str:
    """`verdict` if every gate passed, else the first failed gate's."""
    return withheld(gates) or verdict


@dataclass(frozen=True)
class Thresholds:
    """paper_numbers.yaml `gates:` (units: the loss's, nats per character or token)."""

    last_fraction: float     # the tail of training the loss slope is fitted on
    max_loss_drop: float     # largest fitted change over that tail of one run's loss (drop) or of two rows' gap
    max_param_travel: float  # largest fraction of Adam's travel limit a read parameter may use:
                             # from initialisation (params_converged) and over the tail (params_settled)


def thresholds(papers: dict) -> Thresholds:
    g = papers.get("gates") or {}
    try:
        return Thresholds(float(g["last_fraction"]), float(g["max_loss_drop"]), float(g["max_param_travel"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper_numbers.yaml: gates needs numbers last_fraction, max_loss_drop and "
                         f"max_param_travel ({exc})") from None


def tail_mask(steps: Sequence[int], last_fraction: float) -> np.ndarray:
    """Which evaluations lie in the last `last_fraction` of training: steps >= (1 -
    last_fraction) x the last step (every gate on "the last 20%" reads this tail)."""
    steps = np.asarray(steps, dtype=float)
    return steps >= (1 - last_fraction) * steps.max() if steps.size else np.zeros(0, dtype=bool)


def tail_drop(steps: Sequence[int], values: Sequence[float], last_fraction: float) -> tuple[float | None, int]:
    """The least-squares slope of `values` over the evaluations of tail_mask, times the tail's
    span (last_fraction x the last step): the drop the fit says happened there (negative: a
    rise), and the number of evaluations it rests on (None below 3, too few for a slope)."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if steps.size == 0:
        return None, 0
    end = steps.max()
    tail = tail_mask(steps, last_fraction)
    if tail.sum() < 3:
        return None, int(tail.sum())
    return float(-np.polyfit(steps[tail], values[tail], 1)[0] * last_fraction * end), int(tail.sum())


def loss_converged(steps: Sequence[int], losses: Sequence[float], last_fraction: float,
                   max_drop: float, what: str = "val loss") -> Gate:
    """One run's loss has stopped falling: its tail_drop over the last `last_fraction` of
    training at most `max_drop` (a rise passes); needs 3 evaluations there."""
    if len(steps) == 0:
        return gate(CONVERGED, False, f"no {what} evaluations")
    drop, n = tail_drop(steps, losses, last_fraction)
    if drop is None:
        return gate(CONVERGED, False, f"{n} {what} evaluation(s) in the last {last_fraction:.0%} "
                                      f"of training (3 needed for a slope)")
    return gate(CONVERGED, drop <= max_drop,
                f"{what} fell {drop:.4f} over the last {last_fraction:.0%} of training (threshold {max_drop:g})")


Curve = tuple[Sequence[int], Sequence[float]]  # one run's (steps, losses)


def mean_curve(curves: Iterable[Curve], fractions: np.ndarray) -> np.ndarray:
    """The mean over runs (seeds) of their losses at `fractions` of each run's training (step /
    its last step; linear between its evaluations), so runs of unequal length (a row trained on
    fewer tokens) are compared at the same point of their schedules."""
    out = []
    for steps, losses in curves:
        steps = np.asarray(steps, dtype=float)
        out.append(np.interp(fractions, steps / steps.max(), np.asarray(losses, dtype=float)))
    return np.mean(out, axis=0)


def _unreadable(row: str, curves: Mapping[str, Curve], last_fraction: float, what: str) -> str | None:
    """Why a row's curves cannot be compared (one clause naming the run), or None: every run
    needs finite losses, a last step past 0 and 3 evaluations of its own in the tail."""
    if not curves:
        return f"no run of {row}"
    for run, (steps, losses) in curves.items():
        if len(steps) == 0:
            return f"no {what} evaluations of {run}"
        if not np.all(np.isfinite(np.asarray(losses, dtype=float))):
            return f"{run} has a non-finite {what}"
        if max(steps) <= 0:
            return f"{run} has no {what} evaluation after step 0"
        n = int(tail_mask(steps, last_fraction).sum())
        if n < 3:
            return (f"{n} {what} evaluation(s) of {run} in the last {last_fraction:.0%} of training "
                    f"(3 needed for a slope)")
    return None


def gap_converged(a: str, a_curves: Mapping[str, Curve], b: str, b_curves: Mapping[str, Curve],
                  last_fraction: float, max_drift: float, what: str = "val loss") -> Gate:
    """Gate (a) for a comparison of two rows: the gap between their mean losses (a - b over
    seeds, at the same fraction of each run's training, on every evaluation point of either
    row) has stopped moving: its fitted change over the last `last_fraction` of training
    (tail_drop, either sign) at most `max_drift`. Rows still learning at the same pace keep
    their gap and their order at this budget; a gap still closing or opening faster can
    reorder rows whose difference is of that order. It does not say the rows converged: each
    row's own fall there is printed beside it, and when one fell more than `max_drift` the
    text says the rows are still learning (more training may still change the gap).
    `a_curves`, `b_curves`: run id -> (steps, losses) of every run (seed) of each row."""
    for row, curves in ((a, a_curves), (b, b_curves)):
        why = _unreadable(row, curves, last_fraction, what)
        if why is not None:
            return gate(CONVERGED, False, why)
    runs = [*a_curves.values(), *b_curves.values()]
    grid = np.unique(np.concatenate([np.asarray(s, dtype=float) / max(s) for s, _ in runs]))
    ma, mb = mean_curve(a_curves.values(), grid), mean_curve(b_curves.values(), grid)
    drift = tail_drop(grid, ma - mb, last_fraction)[0]
    falls = {name: tail_drop(grid, m, last_fraction)[0] for name, m in ((a, ma), (b, mb))}
    moved = round(-drift, 4) + 0.0  # + 0.0: never "-0.0000"
    fell = ", ".join(f"{name} {x:.4f}" for name, x in falls.items())
    learning = (f"; the rows are still learning (each row's {what} fell {fell} there): the gap is the one at "
                f"this budget" if max(falls.values()) > max_drift else f"; each row's {what} fell {fell} there")
    return gate(CONVERGED, abs(drift) <= max_drift,
                f"{a} − {b} moved {moved:+.4f} over the last {last_fraction:.0%} of training "
                f"(threshold ±{max_drift:g}){learning}")


def adam_travel(lrs: Sequence[float]) -> float:
    """The farthest Adam (any Adam-style update of unit size per step) moves a parameter:
    the sum of the learning rates of the schedule (each step moves it by at most ~lr)."""
    return float(np.sum(np.asarray(lrs, dtype=float)))


def params_converged(moved: Sequence[float], travel: float, max_fraction: float, what: str) -> Gate:
    """A trained parameter read by a claim (a bank's log-parameters, a log-bandwidth) has
    settled only if it did not travel at Adam's speed limit: the largest |change| from
    initialisation must be below max_fraction x `travel` (adam_travel of the schedule). A
    parameter that moved by about the sum of its learning rates went one way at every step."""
    moved = np.abs(np.asarray(moved, dtype=float))
    if moved.size == 0 or not travel > 0:
        return gate(CONVERGED, False, f"no {what} to read")
    worst = float(moved.max())
    return gate(CONVERGED, worst <= max_fraction * travel,
                f"{what} moved up to {worst:.3f}, {worst / travel:.0%} of Adam's travel limit {travel:.3f} "
                f"(threshold {max_fraction:.0%})")


def params_settled(steps: Sequence[int], values, step_lrs: Sequence[float], last_fraction: float,
                   max_fraction: float, what: str) -> Gate:
    """A trained parameter read by a claim has stopped moving: over the evaluations in the last
    `last_fraction` of training (steps >= (1 - last_fraction) x the last one), its largest
    change between the first of them and the end is at most max_fraction of the farthest Adam
    could move it there (the sum of `step_lrs`, the rate of every optimizer step with any
    variant scale, over the steps between those two evaluations). A parameter still travelling
    one way uses about all of it; one that only jitters about its optimum under gradient noise
    moves about lr x sqrt(steps), a small share of a long tail. `values` [evaluations,
    parameters] as the run's param_trace.npz stores them. Needs 2 evaluations in that tail."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if steps.size == 0 or values.size == 0:
        return gate(CONVERGED, False, f"no {what} recorded at the evaluations")
    tail = np.flatnonzero(tail_mask(steps, last_fraction))
    if tail.size < 2:
        return gate(CONVERGED, False, f"{tail.size} {what} record(s) in the last {last_fraction:.0%} of training "
                                      f"(2 needed)")
    first, last = int(steps[tail[0]]), int(steps[tail[-1]])
    if last > len(step_lrs):
        return gate(CONVERGED, False, f"learning rates known only to step {len(step_lrs)}, the {what} to step {last}")
    travel = adam_travel(np.asarray(step_lrs, dtype=float)[first:last])
    change = float(np.abs(values[tail[-1]] - values[tail[0]]).max())
    where = f"over the last {last_fraction:.0%} of training (steps {first}-{last})"
    if not travel > 0:
        return gate(CONVERGED, False, f"no learning rate known {where}")
    return gate(CONVERGED, change <= max_fraction * travel,
                f"{what} changed by up to {change:.3f} {where}, {change / travel:.0%} of Adam's travel limit "
                f"{travel:.3f} there (threshold {max_fraction:.0%})")


def run_settled(run_dir: Path, th: "Thresholds", what: str, step_lrs: Sequence[float],
                names: Sequence[str] | None = None) -> Gate:
    """params_settled on a run's param_trace.npz (kernattn.engine.trace) at the threshold
    max_param_travel: every traced parameter, or those whose name ends with one of `names`
    (e.g. ("log_sigma",)). `step_lrs`: the rate of every optimizer step of the run."""
    from ..engine.trace import read

    trace = read(run_dir)
    if trace is None:
        return gate(CONVERGED, False, f"no {Path(run_dir).name}/param_trace.npz ({what} not recorded; a run "
                                      f"finished before the engine recorded them needs --fresh)")
    keep = np.concatenate([np.full(size, names is None or any(n.endswith(k) for k in names), dtype=bool)
                           for n, size in zip(trace["names"], trace["sizes"])])
    if not keep.any():
        return gate(CONVERGED, False, f"{Path(run_dir).name}/param_trace.npz holds no parameter named "
                                      f"*{' or *'.join(names or ())} ({what})")
    return params_settled(trace["steps"], trace["values"][:, keep], step_lrs, th.last_fraction,
                          th.max_param_travel, what)


def logged_lrs(steps: Sequence[int], lrs: Sequence[float]) -> np.ndarray:
    """The rate of every optimizer step 0 .. k-1 (0-based, as the char track's lr_at) of a
    schedule known only at the train lines a run logged up to step k (metrics.jsonl: the
    learning rate every log_every steps). A line at step k carries the rate of optimizer step
    k - 1 (the loop sets it, steps, then counts the step); linearly interpolated between the
    logged ones, held flat before the first."""
    steps, lrs = np.asarray(steps, dtype=float), np.asarray(lrs, dtype=float)
    if steps.size == 0:
        return np.zeros(0)
    return np.interp(np.arange(int(steps.max())), steps - 1, lrs)


def runs_gap_converged(a: str, a_runs: Mapping[str, Path], b: str, b_runs: Mapping[str, Path],
                       th: Thresholds) -> Gate:
    """Gate (a) for a comparison of two rows from their runs' training losses (metrics.jsonl's
    train lines, report.stability.read_record): gap_converged at the thresholds, where the
    training loss stands in for what the claim judges (bits per byte, CORE, top-1: evaluated
    once, at the end). A run that failed (a FAILED line) is not compared. `a_runs`, `b_runs`:
    run id -> its metrics.jsonl, every run (seed) of each row."""
    from .stability import read_record

    curves = {}
    for row, files in ((a, a_runs), (b, b_runs)):
        curves[row] = {}
        for run, path in files.items():
            rec = read_record(path)
            if rec.failure is not None:
                return gate(CONVERGED, False, f"{run} failed ({rec.failure})")
            curves[row][run] = (rec.steps, rec.losses)
    return gap_converged(a, curves[a], b, curves[b], th.last_fraction, th.max_loss_drop, "train loss")
