"""Gates a comparison must pass before it gets a verdict (issue 25), each printed in the
verdict when it fails: "not judged (<gate>: <why>)".

    converged   the quantity judged has stopped moving: the validation loss's fitted drop over
                the last `last_fraction` of training (`loss_converged`), and for readings of a
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

from collections.abc import Iterable, Sequence
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
    max_loss_drop: float     # largest fitted drop of the loss over that tail
    max_param_travel: float  # largest fraction of Adam's travel limit a read parameter may use:
                             # from initialisation (params_converged) and over the tail (params_settled)


def thresholds(papers: dict) -> Thresholds:
    g = papers.get("gates") or {}
    try:
        return Thresholds(float(g["last_fraction"]), float(g["max_loss_drop"]), float(g["max_param_travel"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper_numbers.yaml: gates needs numbers last_fraction, max_loss_drop and "
                         f"max_param_travel ({exc})") from None


def loss_converged(steps: Sequence[int], losses: Sequence[float], last_fraction: float,
                   max_drop: float, what: str = "val loss") -> Gate:
    """The least-squares slope of the loss over the evaluations in the last `last_fraction`
    of training (steps >= (1 - last_fraction) * final step), times that span: the drop the
    fit says happened there. Passes when the drop is at most `max_drop`; needs 3 points."""
    steps, losses = np.asarray(steps, dtype=float), np.asarray(losses, dtype=float)
    if steps.size == 0:
        return gate(CONVERGED, False, f"no {what} evaluations")
    end = steps.max()
    tail = steps >= (1 - last_fraction) * end
    if tail.sum() < 3:
        return gate(CONVERGED, False, f"{int(tail.sum())} {what} evaluation(s) in the last {last_fraction:.0%} "
                                      f"of training (3 needed for a slope)")
    slope = np.polyfit(steps[tail], losses[tail], 1)[0]
    drop = -slope * last_fraction * end
    return gate(CONVERGED, drop <= max_drop,
                f"{what} fell {drop:.4f} over the last {last_fraction:.0%} of training (threshold {max_drop:g})")


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
    tail = np.flatnonzero(steps >= (1 - last_fraction) * steps.max())
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


def logged_travel(steps: Sequence[int], lrs: Sequence[float]) -> float:
    """adam_travel of a schedule known only at the steps a run logged (logged_lrs)."""
    return adam_travel(logged_lrs(steps, lrs))


def runs_loss_converged(metrics_files: Iterable[tuple[str, Path]], th: Thresholds) -> Gate:
    """Gate (a) over several runs: each run's training loss (metrics.jsonl's train lines,
    report.stability.read_record) has stopped falling (loss_converged); the first run that
    fails, named, or a pass. `metrics_files`: (run id, its metrics.jsonl)."""
    from .stability import read_record

    for run_id, path in metrics_files:
        rec = read_record(path)
        g = loss_converged(rec.steps, rec.losses, th.last_fraction, th.max_loss_drop, "train loss")
        if not g.passed:
            return gate(g.name, False, f"{run_id}: {g.why}")
    return gate(CONVERGED, True)
