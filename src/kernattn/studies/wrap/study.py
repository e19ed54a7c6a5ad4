"""The line-wrap study's reading and verdict (issue 17, part 1; gpa-long Section 3.2).

    kernattn wrap-study --params params.yaml [--scale S]

For every row of studies.wrap.rows and every corpus (the original, then studies.wrap.corpora):
the first-layer bump of each seed's trained run (`run_bump`: the median over the first layer's
heads of the bank bumps at lags >= analysis.bump_min_lag, the banks read at lags 0..context as
kernattn analyze-gpa reads them), the corpus's newline peak (its training split's sharp peak,
kernattn analyze-corpus; None without line structure), and the verdict per row
(kernattn.report.verdicts.line_wrap: seed-paired shift interval, tolerance studies.wrap.tol). The
original corpus's runs are the main DAG's (train.out_dir/<row>-s<seed>), not retrained.
Controls recorded beside the verdict: the bump of each run's bank at initialisation (the same
seed and constructor as its training: `init_bumps`, and "initialisation" lines in bumps.csv)
and the study's premise per row (`premise_met`, `premise_why`: the original bump at the
newline peak, moved from its initial position, on banks that stopped moving (gate "converged",
as the report's bank readings), and, with a planted_<p> corpus, the positive control found:
its bump moved with the planted period). The planted corpora never vote: their
shift verdicts are the row's `controls`. The unwrapped corpus and the paragraph counterfactuals
vote by their own rules (the bump disappearing, or moving to the paragraph lag; vanish_fraction
pre-registered in paper_numbers.yaml), the rewrapped ones by the shift rule: every rule, the
premise and the overall verdict included, is kernattn.report.verdicts.line_wrap's.

Writes <studies.out_dir>/wrap/summary.json (and bumps.csv: row, corpus, seed, bump), atomically.
Overall: the premise-met rows' verdicts the same -> that verdict; otherwise inconclusive.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...config import find_run, params_from_args
from ...config.studies import wrap_rows
from ...io import atomic_write_json, atomic_write_text
from ..common import SUMMARY, root, study_params, trained_model
from .stages import wrap_analysis_dir, wrap_data_dir, wrap_run_dir, wrap_runs

REFERENCE = "original"
INIT = "initialisation"  # bumps.csv's "corpus" of the banks at initialisation (same seed, same constructor)


def newline_peak(summary_file: Path) -> dict:
    """The training split's newline peak of a corpus analysis: (sharp peak or None, peak, contrast)."""
    from ...errors import UsageError

    try:
        train = json.loads(Path(summary_file).read_text())["splits"]["train"]
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{summary_file}: no corpus analysis ({exc}); run kernattn analyze-corpus "
                         f"(original) or kernattn prepare-wrap (counterfactuals)") from None
    return {"sharp": train["sharp_peak"], "peak": train["peak"], "contrast": train["peak_contrast"],
            "line_peak": train["lines"]["peak"], "paragraph_median": train["paragraphs"]["median"]}


def run_bump(first_layer, min_lag: int) -> float | None:
    """The first-layer bump of one run: median over heads of the bump lags of G [heads, lags]."""
    import statistics

    import numpy as np

    from ...tracks.char.analysis import banks

    lags = [b.lag for b in (banks.find_bump(g, min_lag) for g in np.asarray(first_layer)) if b is not None]
    return float(statistics.median(lags)) if lags else None


def model_bump(params, model) -> float | None:
    """The first-layer bump of one model (run_bump on its banks at lags 0..context)."""
    from ...tracks.char.analysis import banks

    shapes = banks.bank_shapes(model, params.model.context + 1)
    return run_bump(shapes[0], params.analysis.bump_min_lag)


def first_layer_bump(params, spec, device, params_file: str) -> float | None:
    model, _, _ = trained_model(params, spec, device, params_file)
    return model_bump(params, model)


def init_and_trained_bumps(params, spec, device, params_file: str) -> tuple[float | None, float | None, float]:
    """(bump of the bank at initialisation, bump of the trained bank, the farthest any bank
    parameter moved) of a main-DAG run: the reference a trained bump is read against (a bump
    that is where the initial bank put it, e.g. an initial kernel's period pi x tau, says
    nothing about the corpus), and what the converged gate reads (bank_gate)."""
    from ...tracks.char.analysis.analyze_gpa import load_models
    from ...tracks.char.data import load_data
    from ...tracks.char.stages import data_dir

    init, model, _ = load_models(params, spec, load_data(data_dir(params), params.model.context), device, params_file)
    return model_bump(params, init), model_bump(params, model), bank_moved(init, model)


def bank_moved(init, model) -> float:
    """The largest |change| from initialisation of the model's variant-owned parameters (the
    banks' log sigma, log l, log tau and alpha), as report_bankgate.moved reads them."""
    pairs = zip(init.variant_parameters(), model.variant_parameters())
    return max((float((b.detach() - a.detach()).abs().max()) for a, b in pairs), default=0.0)


def bank_gate(moved: dict, params, row: str) -> tuple[bool, str]:
    """Gate (a), converged, on the row's original runs (`moved`: seed -> bank_moved): every
    seed's bank moved less than gates.max_param_travel (paper_numbers.yaml) of Adam's travel
    limit over its schedule, and over the last part of training (its param_trace.npz). A bank
    still moving puts its bump wherever training stopped it."""
    from ...report import shipped
    from ...report.verdicts import gates
    from ...tracks.char.report_bankgate import adam_travel, bank_settled
    from ...tracks.char.stages import run_dir

    th = gates.thresholds(shipped.paper_numbers())
    lacking = [f"{row}-s{seed}" for seed in sorted(moved) if gates.run_rates(run_dir(params, f"{row}-s{seed}")) is None]
    if lacking:
        return False, f"bank not converged: {gates.no_rates(lacking[0])}"
    # Adam's travel limit from each seed's own record of rates (the same schedule: the least of them)
    travel = min(adam_travel(run_dir(params, f"{row}-s{seed}"), params.train) for seed in moved)
    checks = [gates.params_converged(list(moved.values()), travel, th.max_param_travel, "bank log-parameters")]
    for seed in sorted(moved):
        g = bank_settled(run_dir(params, f"{row}-s{seed}"), params.train, th)
        checks.append(gates.gate(g.name, g.passed, f"{row}-s{seed}: {g.why}"))
    failed = next((g for g in checks if not g.passed), None)
    if failed is not None:
        return False, f"bank not converged: {failed.why}"
    return True, (f"bank converged: {checks[0].why}; each seed's used at most {th.max_param_travel:.0%} of Adam's "
                  f"travel over the last {th.last_fraction:.0%} of training")


def split_controls(corpora: list, width: int) -> tuple[list, list]:
    """(the original and the corpora that vote, the positive controls: planted_<p>), in order."""
    from ...config.studies import CONTROL_KINDS, wrap_layout

    def is_control(c) -> bool:
        return c.name != REFERENCE and wrap_layout(c.name, width)[0] in CONTROL_KINDS
    return [c for c in corpora if not is_control(c)], [c for c in corpora if is_control(c)]


def read_study(params, params_file: str = "params.yaml") -> dict:
    """summary.json's content (module docstring)."""
    from ...config.studies import wrap_layout
    from ...engine import resolve_device
    from ...errors import UsageError
    from ...report.verdicts import line_wrap
    from ...tracks.char.stages import corpus_dir
    from . import votes as wrap_votes

    w = params.studies.wrap
    device = resolve_device("cpu")  # a bank's shape is a few hundred numbers
    peaks = {REFERENCE: newline_peak(corpus_dir(params) / SUMMARY)}
    peaks.update({c: newline_peak(wrap_analysis_dir(params, c) / "corpus" / SUMMARY) for c in w.corpora})
    kinds = {c: wrap_layout(c, w.width)[0] for c in w.corpora}
    lags = {c: wrap_votes.paragraph_lag(peaks[c]) for c in peaks}
    try:
        vanish = wrap_votes.vanish_fraction()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    runs = wrap_runs(params)
    rows, records = [], []
    for row in wrap_rows(params):
        corpora, init_bumps, travelled = [], {}, {}
        for corpus in (REFERENCE, *w.corpora):
            cb = line_wrap.CorpusBumps(corpus, peaks[corpus]["sharp"])
            for c, spec in runs.values():
                if c != corpus or spec.row != row:
                    continue
                p = study_params(params, str(wrap_data_dir(params, c)), str(wrap_run_dir(params)))
                cb.bumps[spec.seed] = first_layer_bump(p, spec, device, params_file)
            if corpus == REFERENCE:
                for seed in sorted({s.seed for c, s in runs.values() if s.row == row}):
                    spec = find_run(params, f"{row}-s{seed}")
                    init_bumps[seed], cb.bumps[seed], travelled[seed] = init_and_trained_bumps(
                        params, spec, device, params_file)
                records += [{"row": row, "corpus": INIT, "seed": s, "bump": b} for s, b in sorted(init_bumps.items())]
            records += [{"row": row, "corpus": corpus, "seed": s, "bump": b} for s, b in sorted(cb.bumps.items())]
            corpora.append(cb)
        voting, controls = split_controls(corpora, w.width)
        found = [line_wrap.study_verdict([corpora[0], c], REFERENCE, w.tol)["corpora"][1] for c in controls]
        met, why = line_wrap.premise(corpora[0].bumps, init_bumps, peaks[REFERENCE]["sharp"], w.tol,
                                     bank_gate(travelled, params, row))
        if found:  # the positive control must move with its planted period
            moved = all(c["verdict"] == line_wrap.TRACKS for c in found)
            met, why = met and moved, f"{why}; positive control {'found' if moved else 'not found'}"
        votes = line_wrap.row_verdict(voting, kinds, lags, params.model.context, w.tol, vanish, REFERENCE)
        rows.append({"row": row, **votes, "init_bumps": init_bumps,
                     "controls": found, "premise_met": met, "premise_why": why})
    return {"study": "wrap", "scale": params.scale, "params_digest": params.digest(), "width": w.width,
            "tol": w.tol, "vanish_fraction": vanish, "max_lag": params.model.context,
            "bump_min_lag": params.analysis.bump_min_lag, "reference": REFERENCE,
            "corpora": [REFERENCE, *w.corpora], "peaks": peaks, "rows": rows, "bumps": records,
            "rows_not_trained": [r for r in w.rows if r not in wrap_rows(params)],
            "verdict": line_wrap.overall_verdict(rows)}


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    summary = read_study(params, args.params)
    out = root(params) / "wrap"
    table = pd.DataFrame(summary["bumps"], columns=["row", "corpus", "seed", "bump"])
    atomic_write_text(out / "bumps.csv", table.to_csv(index=False))
    atomic_write_json(out / SUMMARY, summary)  # last: the stage's output
    print(f"kernattn wrap-study: {summary['verdict']} "
          f"({'; '.join(r['row'] + ': ' + r['verdict'] for r in summary['rows'])}); wrote {out / SUMMARY}")
    return 0
