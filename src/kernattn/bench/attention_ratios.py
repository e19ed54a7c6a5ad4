"""What one `kernattn bench-attention` run's rows say: the ratios against the targets
(written to <stem>_ratios.csv, columns RATIO_SCHEMA) and the tables printed at the end.

Comparisons, each between rows of the same run:
- gka fast vs gka reference at the largest N having both: reference / fast median time
  (target >= 10) and peak memory (target >= 20);
- every lag-bias configuration (the gpa-* banks and softmax alibi, t5, lag_table): fast
  median time / softmax-rope fast median time at the same N (target <= 1.3);
- gka and gka-lm fast vs softmax-rope fast at the same N: tokens/s ratio (target >= 1.0 on
  CUDA, none on CPU) and peak memory ratio (no target).
"""

from __future__ import annotations

import math
from typing import Any

from .attention_configs import BASELINE_LABEL, DEFAULT_CONFIGS, GKA_LABELS, labels
from .timing import utc_timestamp

RATIO_SCHEMA: dict[str, type] = {
    "comparison": str,     # gka_fast_vs_reference | lag_bias_vs_rope | gka_vs_rope
    "label": str,
    "impl": str,
    "baseline_label": str,
    "baseline_impl": str,
    "N": int,
    "metric": str,         # see RATIO_METRICS
    "value": float,
    "target": str,         # e.g. ">=10", empty when there is none
    "meets_target": str,   # yes | no | empty
    "device": str,
    "dtype": str,
    "timestamp": str,
}
RATIO_METRICS = {
    "reference_over_fast_time": "baseline (reference) median ms / fast median ms",
    "reference_over_fast_memory": "baseline (reference) peak MiB / fast peak MiB",
    "time_over_baseline": "median ms / baseline median ms",
    "throughput_over_baseline": "tokens/s / baseline tokens/s",
    "memory_over_baseline": "peak MiB / baseline peak MiB",
}


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return math.inf if num > 0 else math.nan
    return num / den


def _check(value: float, target: str) -> str:
    if not target or math.isnan(value):
        return ""
    op, bound = target[:2], float(target[2:])
    ok = value >= bound if op == ">=" else value <= bound
    return "yes" if ok else "no"


def _ratio_row(comparison: str, row: dict, base: dict, metric: str, value: float, target: str = "") -> dict:
    return {
        "comparison": comparison, "label": row["label"], "impl": row["impl"],
        "baseline_label": base["label"], "baseline_impl": base["impl"], "N": row["N"],
        "metric": metric, "value": value, "target": target, "meets_target": _check(value, target),
        "device": row["device"], "dtype": row["dtype"], "timestamp": utc_timestamp(),
    }


def _gka_vs_reference(index: dict) -> list[dict[str, Any]]:
    """GKA fast vs its reference, at the largest N having both."""
    both = [n for (label, impl, n) in index if label == "gka" and impl == "fast" and ("gka", "reference", n) in index]
    if not both:
        return []
    n = max(both)
    fast, ref = index[("gka", "fast", n)], index[("gka", "reference", n)]
    return [
        _ratio_row("gka_fast_vs_reference", fast, ref, "reference_over_fast_time",
                   _ratio(ref["median_ms"], fast["median_ms"]), ">=10"),
        _ratio_row("gka_fast_vs_reference", fast, ref, "reference_over_fast_memory",
                   _ratio(ref["peak_mib"], fast["peak_mib"]), ">=20"),
    ]


def _against_rope(index: dict, n: int, device_type: str) -> list[dict[str, Any]]:
    """The lag-bias and GKA configurations' fast rows at N against softmax-rope's."""
    base = index.get((BASELINE_LABEL, "fast", n))
    if base is None:
        return []
    out = []
    for cfg in DEFAULT_CONFIGS:
        row = index.get((cfg.label, "fast", n))
        if row is not None and cfg.lag_bias:
            out.append(_ratio_row("lag_bias_vs_rope", row, base, "time_over_baseline",
                                  _ratio(row["median_ms"], base["median_ms"]), "<=1.3"))
    for label in GKA_LABELS:
        row = index.get((label, "fast", n))
        if row is None:
            continue
        out.append(_ratio_row("gka_vs_rope", row, base, "throughput_over_baseline",
                              _ratio(row["tokens_per_s"], base["tokens_per_s"]),
                              ">=1.0" if device_type == "cuda" else ""))
        out.append(_ratio_row("gka_vs_rope", row, base, "memory_over_baseline",
                              _ratio(row["peak_mib"], base["peak_mib"])))
    return out


def compute_ratios(rows: list[dict[str, Any]], device_type: str = "cpu") -> list[dict[str, Any]]:
    """The comparisons of the module docstring, from rows of one run (missing rows: skipped).

    device_type ("cpu" or "cuda"): the gka-vs-rope throughput target applies on CUDA only.
    """
    index = {(r["label"], r["impl"], r["N"]): r for r in rows}
    out = _gka_vs_reference(index)
    for n in sorted({r["N"] for r in rows}):
        out += _against_rope(index, n, device_type)
    return out


def _fmt(x: float | None, spec: str) -> str:
    return format("-", ">" + spec.split(".")[0]) if x is None else format(x, spec)


def _table_line(label: str, n: int, f: dict | None, r: dict | None) -> str:
    g = lambda row, k: None if row is None else row[k]  # noqa: E731
    rt = _ratio(r["median_ms"], f["median_ms"]) if f and r else None
    rm = _ratio(r["peak_mib"], f["peak_mib"]) if f and r else None
    return (f"{label:<21} {n:>5} | {_fmt(g(f, 'median_ms'), '9.1f')} {_fmt(g(f, 'min_ms'), '9.1f')} "
            f"{_fmt(g(f, 'tokens_per_s'), '9.0f')} {_fmt(g(f, 'peak_mib'), '8.1f')} | "
            f"{_fmt(g(r, 'median_ms'), '9.1f')} {_fmt(g(r, 'peak_mib'), '8.1f')} | "
            f"{_fmt(rt, '10.1f')} {_fmt(rm, '10.1f')}")


def format_table(rows: list[dict[str, Any]]) -> str:
    """One line per (label, N): fast and reference side by side."""
    index = {(r["label"], r["impl"], r["N"]): r for r in rows}
    order = labels()
    keys = sorted({(r["label"], r["N"]) for r in rows},
                  key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]))
    head = (f"{'label':<21} {'N':>5} | {'fast ms':>9} {'min ms':>9} {'tok/s':>9} {'MiB':>8} | "
            f"{'ref ms':>9} {'ref MiB':>8} | {'ref/fast t':>10} {'ref/fast m':>10}")
    lines = [head, "-" * len(head)]
    lines += [_table_line(label, n, index.get((label, "fast", n)), index.get((label, "reference", n)))
              for label, n in keys]
    return "\n".join(lines)


def format_ratios(ratios: list[dict[str, Any]]) -> str:
    head = f"{'comparison':<22} {'label':<21} {'baseline':<24} {'N':>5} {'metric':<27} {'value':>8} {'target':>7} {'ok':>3}"
    lines = [head, "-" * len(head)]
    for r in ratios:
        base = f"{r['baseline_label']}/{r['baseline_impl']}"
        lines.append(f"{r['comparison']:<22} {r['label']:<21} {base:<24} {r['N']:>5} {r['metric']:<27} "
                     f"{r['value']:8.2f} {r['target']:>7} {r['meets_target']:>3}")
    return "\n".join(lines)
