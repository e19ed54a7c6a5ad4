"""Gates a comparison must pass before it gets a verdict (issue 25), each printed in the
verdict when it fails: "not judged (<gate>: <why>)".

    gap stable at this budget
                for a comparison of two rows without a budget sweep: their loss gap is not
                closing at a rate that would take away `gap_max_closing` of it (of at least a
                floor) over one more run's learning-rate sum, read per shared seed over the part
                of training that holds the last `gap_tail_lr_fraction` of the schedule's
                learning-rate sum, with a t bound over seeds (`gap_stable`; issues 37, 48). A
                reading of this budget, never "converged"; a swept comparison is read across its
                budgets instead (report.verdicts.budget_trend).
    converged   the quantity judged has stopped moving: for a reading of one run, its
                validation loss's fitted drop over the last `last_fraction` of training
                (`loss_converged`); and for readings of a
                trained bank or bandwidth, how far its parameters moved against the farthest
                Adam can move them, from initialisation (`params_converged`) and over that same
                tail of training, read from the run's param_trace.npz (`params_settled`,
                `run_settled`)
    estimable   at least levels.MIN_SEEDS seeds per arm and a non-zero spread (comparisons.judge_family
                applies it itself)
    premise     what the paper's reading presupposes (e.g. a bank below the strength threshold
                before "a weak head can go"; a converged bank before "the bump stays")

The thresholds are fixed in paper_numbers.yaml (`gates:`), before the runs (`thresholds`).

For the studies and any other part: build `gate(name, passed, why)` for each gate, then
`withheld(gates)` is None when all passed, else the verdict to print (pass it as comparisons.Test's
`gate` so the comparison is kept out of its Holm family), or `apply(verdict, gates)` on a
verdict already made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
import re
from pathlib import Path

import numpy as np

from .. import stats
from . import words

CONVERGED = "not converged"
GAP_UNSTABLE = "gap not stable at this budget"
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
    return words.not_judged(f"{failed.name}: {failed.why}" if failed.why else failed.name)


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
    gap_tail_lr_fraction: float = 0.5  # gap_stable's tail: the last this share of the learning-rate sum
    gap_max_closing: float = 0.5       # gap_stable's bound on the share of the gap closing per run's lr-sum


def thresholds(papers: dict) -> Thresholds:
    g = papers.get("gates") or {}
    keys = ("last_fraction", "max_loss_drop", "max_param_travel", "gap_tail_lr_fraction", "gap_max_closing")
    try:
        th = Thresholds(*(float(g[k]) for k in keys))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"paper_numbers.yaml: gates needs numbers {', '.join(keys)} ({exc})") from None
    if not (0 < th.gap_tail_lr_fraction <= 1 and th.gap_max_closing > 0):
        raise ValueError(f"paper_numbers.yaml: gates.gap_tail_lr_fraction must lie in (0, 1] and gap_max_closing "
                         f"be positive; got {th.gap_tail_lr_fraction} and {th.gap_max_closing}")
    return th


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
                   max_drop: float, what: str = "val loss", until: int | None = None) -> Gate:
    """One run's loss has stopped falling: its tail_drop over the last `last_fraction` of
    training at most `max_drop` (a rise passes); needs 3 evaluations there. `until`: training
    read up to that step only: a warmup-stable-decay run's cooldown start, since in the cooldown
    the loss falls by the annealing gain of a lowered rate whether or not the model still learns
    (read there, the gate could not pass)."""
    if until is not None:
        keep = [i for i, s in enumerate(steps) if s <= until]
        steps, losses = [steps[i] for i in keep], [losses[i] for i in keep]
    where = "of training" if until is None else f"of training before its cooldown (step {until})"
    if len(steps) == 0:
        return gate(CONVERGED, False, f"no {what} evaluations")
    drop, n = tail_drop(steps, losses, last_fraction)
    if drop is None:
        return gate(CONVERGED, False, f"{n} {what} evaluation(s) in the last {last_fraction:.0%} {where} "
                                      f"(3 needed for a slope)")
    return gate(CONVERGED, drop <= max_drop,
                f"{what} fell {drop:.4f} over the last {last_fraction:.0%} {where} (threshold {max_drop:g})")


@dataclass(frozen=True)
class RunCurve:
    """One run's evaluations and its schedule: `cum_lr[t]` is the learning-rate sum of the
    optimizer steps before step t (`cumulative`), at least up to the last evaluated step."""

    steps: Sequence[int]
    losses: Sequence[float]
    cum_lr: Sequence[float]


def cumulative(step_lrs: Sequence[float]) -> np.ndarray:
    """[0, lr_0, lr_0 + lr_1, ...]: the learning-rate sum before each step."""
    return np.concatenate([[0.0], np.cumsum(np.asarray(step_lrs, dtype=float))])


def _lr_share(curve: RunCurve) -> np.ndarray:
    """Each evaluation's place in its run as the share of the run's learning-rate sum spent
    before it (0 at the start, 1 at the last evaluation)."""
    cum = np.asarray(curve.cum_lr, dtype=float)
    at = cum[np.asarray(curve.steps, dtype=int)]
    return at / at[-1]


def _unreadable(row: str, curves: Mapping[str, RunCurve], tail: float, what: str) -> str | None:
    """Why a row's curves cannot be read by gap_stable (one clause naming the run), or None:
    every run needs finite losses, a schedule known to its last step, a learning-rate sum past
    0 and 3 evaluations of its own in the tail."""
    if not curves:
        return f"no run of {row}"
    for run, c in curves.items():
        if len(c.steps) == 0:
            return f"no {what} evaluations of {run}"
        if not np.all(np.isfinite(np.asarray(c.losses, dtype=float))):
            return f"{run} has a non-finite {what}"
        if len(c.cum_lr) <= 1 < max(c.steps):
            return no_rates(run)
        if max(c.steps) >= len(c.cum_lr):
            return f"the learning rates of {run} are known only to step {len(c.cum_lr) - 1}, its {what} to {max(c.steps)}"
        if max(c.steps) <= 0 or not c.cum_lr[max(c.steps)] > 0:
            return f"{run} has no {what} evaluation after its first step"
        n = int((_lr_share(c) >= 1 - tail).sum())
        if n < 3:
            return (f"{n} {what} evaluation(s) of {run} in the last {tail:.0%} of its learning-rate sum "
                    f"(3 needed for a slope)")
    return None


_SEED = re.compile(r"-s(\d+)$")


def _by_seed(curves: Mapping[str, RunCurve]) -> dict[int, RunCurve] | None:
    """The runs keyed by their seed ('<row>-s<seed>'), None when a run id names none."""
    seeds = {}
    for run, c in curves.items():
        m = _SEED.search(run)
        if m is None:
            return None
        seeds[int(m.group(1))] = c
    return seeds


def _gap_tail(pairs: Sequence[tuple[Sequence[RunCurve], Sequence[RunCurve]]], tail: float) -> list[tuple[float, float]]:
    """(final gap, least-squares slope of the gap against the lr-sum share over the tail) of
    each pair of run groups (one seed of each row; or every run of each, as mean curves)."""
    out = []
    for runs_a, runs_b in pairs:
        shares = [(_lr_share(c), np.asarray(c.losses, dtype=float)) for c in (*runs_a, *runs_b)]
        grid = np.unique(np.concatenate([u for u, _ in shares]))
        grid = grid[grid >= 1 - tail]
        mean = [np.mean([np.interp(grid, u, x) for u, x in shares[i:j]], axis=0)
                for i, j in ((0, len(runs_a)), (len(runs_a), len(shares)))]
        gap = mean[0] - mean[1]
        out.append((float(gap[-1]), float(np.polyfit(grid, gap, 1)[0])))
    return out


def _shared_pairs(a_curves: Mapping[str, RunCurve], b_curves: Mapping[str, RunCurve]):
    """(pairs of one seed of each row, or None, and why not): rows paired on the seeds they share,
    since a bound over seeds needs per-seed values, and two rows of unequal seeds still share
    some (the x1 twins' 3 among RoPE's 5)."""
    sa, sb = _by_seed(a_curves), _by_seed(b_curves)
    if sa is None or sb is None:
        return None, "a run id names no seed ('<row>-s<seed>'): no pairs to bound"
    shared = sorted(set(sa) & set(sb))
    if len(shared) < 2:
        return None, f"the rows share {len(shared)} seed(s); a bound over seeds needs 2 shared"
    return [([sa[s]], [sb[s]]) for s in shared], ""


def gap_stable(a: str, a_curves: Mapping[str, RunCurve], b: str, b_curves: Mapping[str, RunCurve],
               tail: float, max_closing: float, what: str = "val loss", boundary: float = 0.0,
               floor: float = 0.0) -> Gate:
    """Gate (a) for a comparison of two rows (paper_numbers.yaml gates.gap_*): the gap a - b
    is stable at this budget. Each run's evaluations are placed by the share of its own
    learning-rate sum spent before them (so the tail of a cosine is not mistaken for most of
    the training, and rows trained for different steps are compared at the same point of their
    schedules). Per seed the two rows share (_shared_pairs; fewer than 2: the gate fails, there
    is no bound) the gap's slope over the last `tail` of that share is fitted; how far it moves
    toward its test's boundary (0 for "a < b", the margin for "a works as well as b") over one
    more run's learning-rate sum at that rate (negative: away from it) must have an upper
    one-sided 97.5% t bound over seeds of at most `max_closing` x the room left, |final gap -
    boundary|, counted as at least `floor` (a null gap standing still then passes; without a
    floor its room, 0, lets nothing close; within `floor` of the boundary movement either way
    counts, the side it stands on being noise). It says nothing of where the rows converge: a
    budget sweep does. `a_curves`, `b_curves`: run id ('<row>-s<seed>') -> RunCurve."""
    for row, curves in ((a, a_curves), (b, b_curves)):
        why = _unreadable(row, curves, tail, what)
        if why is not None:
            return gate(GAP_UNSTABLE, False, why)
    pairs, why = _shared_pairs(a_curves, b_curves)
    if pairs is None:
        return gate(GAP_UNSTABLE, False, why)
    read = _gap_tail(pairs, tail)
    final = float(np.mean([g for g, _ in read]))
    room = final - boundary
    # how far the gap moves toward its boundary over one more run's learning-rate sum, per seed
    # (in the loss's unit; negative: away), compared with the room left rather than divided by it.
    # Within `floor` of the boundary the side it stands on is noise, so any movement counts.
    near = abs(room) < floor
    amount = np.array([abs(slope) if near else -np.sign(room) * slope for _, slope in read])
    ci = stats.mean_ci(amount.tolist())
    allowed = max(abs(room), floor)
    return gate(GAP_UNSTABLE, ci.hi <= max_closing * allowed,
                f"{a} − {b} {final:+.4f} at the end, {_moved(room, amount, boundary, floor)} per run's learning-rate "
                f"sum over the last {tail:.0%} of it ({_bound_text(ci, room, allowed)}; threshold "
                f"{max_closing:.0%} closing" + (f" of at least {floor:g}" if floor else "") + ")")


def _moved(room: float, amount: np.ndarray, boundary: float, floor: float) -> str:
    if room == 0 or abs(room) < floor:
        where = f"at its test's boundary {boundary:g}" if room == 0 else f"within {floor:g} of its test's boundary"
        return f"{where}, moving {max(abs(x) for x in amount):.4f} at most"
    what_closes = "itself" if boundary == 0 else f"its distance from the margin {boundary:.4f}"
    return f"{'closing' if amount.mean() > 0 else 'opening'} at {abs(amount.mean()) / abs(room):.0%} of {what_closes}"


def _bound_text(ci: stats.MeanCI, room: float, allowed: float) -> str:
    share = f"{ci.hi / abs(room):+.0%}" if room != 0 and allowed == abs(room) else f"{ci.hi:+.4f}"
    return f"upper 97.5% bound {share} over {ci.n} seeds (paired)"


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
    from ...engine.trace import read

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


def run_rates(run_dir: Path) -> np.ndarray | None:
    """The rate of every optimizer step of a run, as its engine set it (lr.npy:
    kernattn.engine.schedule), or None for a run trained before the engine recorded it."""
    from ...engine.schedule import read

    return read(run_dir)


def no_rates(run: str) -> str:
    from ...engine.schedule import FILE

    return f"{run} has no {FILE} (trained before the engine recorded its learning rates: rerun it with --fresh)"


def runs_gap_stable(a: str, a_runs: Mapping[str, Path], b: str, b_runs: Mapping[str, Path],
                    th: Thresholds, floor: float = 0.0) -> Gate:
    """Gate (a) for a comparison of two rows from their runs' training losses (metrics.jsonl's
    train lines, report.verdicts.stability.read_record): gap_stable at the thresholds, where the training
    loss stands in for what the claim judges (bits per byte, CORE, top-1: evaluated once, at
    the end), and each run's schedule is the rate of every step its engine set (run_rates).
    A run that failed (a FAILED line) is not compared. `a_runs`, `b_runs`: run id -> its
    metrics.jsonl, every run (seed) of each row."""
    from .stability import read_record

    curves = {}
    for row, files in ((a, a_runs), (b, b_runs)):
        curves[row] = {}
        for run, path in files.items():
            rec = read_record(path)
            if rec.failure is not None:
                return gate(GAP_UNSTABLE, False, f"{run} failed ({rec.failure})")
            rates = run_rates(Path(path).parent)
            if rates is None and rec.steps:
                return gate(GAP_UNSTABLE, False, no_rates(run))
            curves[row][run] = RunCurve(rec.steps, rec.losses, cumulative([] if rates is None else rates))
    return gap_stable(a, curves[a], b, curves[b], th.gap_tail_lr_fraction, th.gap_max_closing, "train loss",
                      floor=floor)

