"""The gate "gap stable at this budget" (report.verdicts.gates.gap_stable, issue 37) on constructed curves
with known answers: a gap read per unit of learning-rate sum, relative to itself, with a bound
over seeds."""

import json
import math

import numpy as np
import pytest

from kernattn.report.verdicts import gates


def tiny_lrs(lr=2e-3, warmup=30, steps=210, floor=0.1):
    """The tiny char schedule: linear warm-up, cosine to lr x floor (tracks.char.track.lr_at)."""
    out = []
    for s in range(steps):
        if s < warmup:
            out.append(lr * (s + 1) / warmup)
        else:
            p = (s - warmup) / (steps - warmup)
            out.append(lr * floor + 0.5 * lr * (1 - floor) * (1 + math.cos(math.pi * p)))
    return out


STEPS = list(range(0, 211, 21))
CUM = gates.cumulative(tiny_lrs())
BASE = [3.0 - 1.2 * (1 - math.exp(-s / 60)) for s in STEPS]   # a row's falling val loss


def rows(gaps_by_seed, steps=STEPS, cum=CUM):
    """Row a = row b + the gap, for each seed: ({a-s<k>: RunCurve}, {b-s<k>: RunCurve})."""
    a, b = {}, {}
    for seed, gaps in gaps_by_seed.items():
        b[f"b-s{seed}"] = gates.RunCurve(steps, BASE[:len(steps)], cum)
        a[f"a-s{seed}"] = gates.RunCurve(steps, [x + g for x, g in zip(BASE, gaps)], cum)
    return a, b


# The tiny gpa_m64 - rope gap of the current main (issue 37): -0.172 at step 42, -0.148 at 126,
# -0.129 at 168, -0.127 at 210; read between those evaluations as straight lines.
TINY_GAP = np.interp(STEPS, [0, 42, 126, 168, 210], [-0.2, -0.172, -0.148, -0.129, -0.127])


def test_the_closing_tiny_gap_fails():
    a, b = rows({0: TINY_GAP, 1: TINY_GAP + 0.004 * np.sin(np.arange(len(STEPS)))})
    g = gates.gap_stable("gpa_m64", a, "rope", b, tail=0.5, max_closing=0.5)
    assert not g.passed and g.name == "gap not stable at this budget"
    assert "closing at" in g.why and "over 2 seeds (paired)" in g.why
    # its point estimate alone is past the threshold: read on the straight lines between the four
    # published points, the gap would lose about two thirds of itself over one more run's lr-sum
    # (the three points of the tail alone give 0.96)
    (_, slope), = gates._gap_tail([([a["a-s0"]], [b["b-s0"]])], 0.5)
    assert 0.5 < -np.sign(TINY_GAP[-1]) * slope / abs(TINY_GAP[-1]) < 1.0


def test_a_steady_gap_passes_and_an_opening_one_too():
    rng = np.random.default_rng(0)
    steady = {s: np.full(len(STEPS), -0.03) + rng.normal(0, 1e-4, len(STEPS)) for s in range(5)}
    g = gates.gap_stable("a", *rows(steady)[:1], "b", rows(steady)[1], tail=0.5, max_closing=0.5)
    assert g.passed and "over 5 seeds (paired)" in g.why
    opening = {s: -0.01 - 0.1 * np.asarray(STEPS) / 210 + rng.normal(0, 1e-4, len(STEPS)) for s in range(3)}
    a, b = rows(opening)
    g = gates.gap_stable("a", a, "b", b, tail=0.5, max_closing=0.5)
    assert g.passed and "opening" in g.why


def test_the_bound_over_seeds_decides_not_the_mean():
    """Seeds that disagree on the gap's direction: the mean closing is small, but its upper
    bound over 3 seeds is not, so the gate does not pass."""
    cum_at = CUM[STEPS] / CUM[STEPS[-1]]
    wild = {0: -0.05 + 0.05 * cum_at, 1: -0.05 - 0.05 * cum_at, 2: -0.05 + 0.01 * cum_at}
    a, b = rows(wild)
    g = gates.gap_stable("a", a, "b", b, tail=0.5, max_closing=0.5)
    assert not g.passed and "upper 97.5% bound" in g.why


def test_a_gap_closing_slowly_per_learning_rate_sum_passes():
    """A gap losing 10% of itself per run's lr-sum (linear in the lr-sum share u): stable."""
    u = CUM[STEPS] / CUM[STEPS[-1]]
    slow = {s: -0.05 * (1.1 - 0.1 * u) / 1.0 + 1e-4 * s for s in range(3)}
    a, b = rows(slow)
    g = gates.gap_stable("a", a, "b", b, tail=0.5, max_closing=0.5)
    assert g.passed and "closing at 10%" in g.why


def test_unequal_seeds_are_paired_on_the_seeds_they_share():
    """Issue 48 (fault 3d): the x1 twins' 3 seeds against RoPE's 5 were read as one value of the
    two mean curves, with no bound. Now the rows are paired on the seeds they share (3 here),
    with the bound over them; rows sharing fewer than 2 seeds have no bound, so the gate fails."""
    rng = np.random.default_rng(1)
    a, _ = rows({s: np.full(len(STEPS), -0.03) + rng.normal(0, 1e-4, len(STEPS)) for s in range(3)})
    _, b = rows({s: np.zeros(len(STEPS)) for s in range(5)})
    g = gates.gap_stable("a", a, "b", b, tail=0.5, max_closing=0.5)
    assert g.passed and "over 3 seeds (paired)" in g.why
    a1, _ = rows({0: np.full(len(STEPS), -0.03)})
    _, b1 = rows({1: np.zeros(len(STEPS)), 2: np.zeros(len(STEPS))})
    g = gates.gap_stable("a", a1, "b", b1, tail=0.5, max_closing=0.5)
    assert not g.passed and g.why == "the rows share 0 seed(s); a bound over seeds needs 2 shared"


def test_unreadable_runs_are_named():
    a, b = rows({0: np.full(len(STEPS), -0.03)})
    sparse = {"b-s0": gates.RunCurve([0, 100, 210], [3, 2, 1], CUM)}
    g = gates.gap_stable("a", a, "b", sparse, tail=0.5, max_closing=0.5)
    assert not g.passed and g.why == "2 val loss evaluation(s) of b-s0 in the last 50% of its learning-rate sum (3 needed for a slope)"
    nan = {"b-s0": gates.RunCurve(STEPS, [math.nan] * len(STEPS), CUM)}
    assert gates.gap_stable("a", a, "b", nan, 0.5, 0.5).why == "b-s0 has a non-finite val loss"
    short = {"b-s0": gates.RunCurve(STEPS, BASE, CUM[:100])}
    assert "known only to step 99" in gates.gap_stable("a", a, "b", short, 0.5, 0.5).why
    assert gates.gap_stable("a", a, "b", {}, 0.5, 0.5).why == "no run of b"
    # two identical rows: no gap, not moving: stable (not "undefined")
    zero = {f"a-s{s}": gates.RunCurve(STEPS, BASE, CUM) for s in range(2)}
    same = gates.gap_stable("a", zero, "b", rows({0: np.zeros(len(STEPS)), 1: np.zeros(len(STEPS))})[1], 0.5, 0.5)
    assert same.passed and "at its test's boundary 0, moving 0.0000 at most" in same.why


def test_a_null_gap_standing_still_passes_with_a_floor_and_not_without():
    """Issue 48: the room a gap may close was |gap - boundary|, which goes to 0 with the gap, so a
    null comparison (noise of +-1e-3 about 0) could never pass. With the floor delta (0.01) it
    passes; a gap that closes a whole floor per run's lr-sum still fails."""
    rng = np.random.default_rng(2)
    null = {s: rng.normal(0, 1e-3, len(STEPS)) for s in range(5)}
    a, b = rows(null)
    assert not gates.gap_stable("a", a, "b", b, 0.5, 0.5).passed
    g = gates.gap_stable("a", a, "b", b, 0.5, 0.5, floor=0.01)
    assert g.passed and "threshold 50% closing of at least 0.01" in g.why
    u = CUM[STEPS] / CUM[STEPS[-1]]
    moving = {s: 0.02 - 0.02 * u + rng.normal(0, 1e-4, len(STEPS)) for s in range(5)}   # 0.02 -> 0
    a, b = rows(moving)
    assert not gates.gap_stable("a", a, "b", b, 0.5, 0.5, floor=0.01).passed


def test_thresholds_are_read_and_checked():
    g = {"last_fraction": 0.2, "max_loss_drop": 0.01, "max_param_travel": 0.5, "gap_tail_lr_fraction": 0.5,
         "gap_max_closing": 0.5}
    th = gates.thresholds({"gates": g})
    assert (th.gap_tail_lr_fraction, th.gap_max_closing) == (0.5, 0.5)
    with pytest.raises(ValueError, match="gap_tail_lr_fraction"):
        gates.thresholds({"gates": {**g, "gap_tail_lr_fraction": 0}})
    with pytest.raises(ValueError, match="gap_max_closing"):
        gates.thresholds({"gates": {k: v for k, v in g.items() if k != "gap_max_closing"}})


def test_gap_gate_from_metrics_files_reads_their_learning_rates(tmp_path):
    """runs_gap_stable reads every run's train lines and the rate of every step its engine set
    (lr.npy beside metrics.jsonl); a run without a file, one that failed, or one without the
    record of its rates is named."""
    lrs = tiny_lrs()

    def write(name, gaps=0.0, failed=False, lr=True):
        lines = [json.dumps({"step": s, "split": "train", "loss": x + (gaps if s else 0.0)})
                 for s, x in zip(STEPS, BASE) if s]
        if failed:
            lines.append(json.dumps({"status": "FAILED", "error": "non-finite loss"}))
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        if lr:
            np.save(tmp_path / name / "lr.npy", np.asarray(lrs))
        return tmp_path / name / "metrics.jsonl"

    th = gates.thresholds({"gates": {"last_fraction": 0.2, "max_loss_drop": 0.01, "max_param_travel": 0.5,
                                     "gap_tail_lr_fraction": 0.5, "gap_max_closing": 0.5}})
    a = {f"a-s{s}": write(f"a{s}", -0.05 + 1e-4 * s) for s in range(3)}
    b = {f"b-s{s}": write(f"b{s}") for s in range(3)}
    assert gates.runs_gap_stable("a", a, "b", b, th).passed
    missing = gates.runs_gap_stable("a", a, "b", {**b, "b-s3": tmp_path / "none" / "metrics.jsonl"}, th)
    assert not missing.passed and missing.why == "no train loss evaluations of b-s3"
    failed = gates.runs_gap_stable("a", {**a, "a-s3": write("a3", failed=True)}, "b", b, th)
    assert not failed.passed and failed.why == "a-s3 failed (non-finite loss)"
    nolr = gates.runs_gap_stable("a", {**a, "a-s0": write("x", lr=False)}, "b", b, th)
    assert not nolr.passed and nolr.why == "a-s0 has no lr.npy (trained before the engine recorded its learning " \
        "rates: rerun it with --fresh)"


def test_a_non_inferiority_gap_is_read_against_its_margin():
    """"a works as well as b" with a margin: the gap's distance from the margin is what may not
    close. Two equal rows (gap 0) against a margin of 0.02, standing still: stable; the same gap
    moving toward the margin by 0.03 over the tail: not stable."""
    u = CUM[STEPS] / CUM[STEPS[-1]]
    still = {s: 1e-4 * np.sin(np.arange(len(STEPS)) + s) for s in range(3)}
    a, b = rows(still)
    g = gates.gap_stable("a", a, "b", b, tail=0.5, max_closing=0.5, boundary=0.02)
    assert g.passed and "its distance from the margin 0.0200" in g.why
    toward = {s: 0.03 * u - 0.04 + 1e-4 * s for s in range(3)}  # -0.01 at the end, rising toward +0.02
    a, b = rows(toward)
    assert not gates.gap_stable("a", a, "b", b, 0.5, 0.5, boundary=0.02).passed
