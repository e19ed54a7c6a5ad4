"""The benchmark part's attention kernels: every CSV of `kernattn bench-attention` found in
the report's bench folders (results/cpu, results/gpu, or --bench-dir), as pivots of the fast
path's time and memory (label x N), or its ratio table. A CSV of another shape is listed as
such, never dropped silently."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# The columns that make a CSV a benchmark's (bench.attention) or its ratios' (bench.attention_ratios).
BENCH_COLUMNS = (
    "variant", "options", "label", "impl", "causal", "window", "B", "H", "d_head", "N", "dtype",
    "device", "torch_version", "threads", "repeats", "median_ms", "min_ms", "tokens_per_s",
    "peak_mib", "timestamp",
)
# `kernattn bench-loader`'s (bench.loader.SCHEMA): the input pipeline's images/s per worker
LOADER_COLUMNS = ("pipeline", "source", "images", "seconds", "cpu_seconds", "images_per_s", "img_size", "threads",
                  "device", "torch", "timestamp")
RATIO_COLUMNS = ("comparison", "label", "impl", "baseline_label", "baseline_impl", "N", "metric",
                 "value", "target", "meets_target", "device", "dtype", "timestamp")


def tables(dirs) -> list[dict]:
    """One entry per benchmark CSV found: pivots (label x N) of the fast rows, or the ratio table."""
    out = []
    for d in dirs:
        for path in sorted(Path(d).glob("*.csv")):
            entry = {"path": str(path), "note": "", "tables": [], "csv": {}, "info": {}}
            try:
                df = pd.read_csv(path)
            except (OSError, ValueError, pd.errors.ParserError) as exc:
                entry["note"] = f"unreadable: {str(exc).splitlines()[0]}"
                out.append(entry)
                continue
            cols = set(df.columns)
            if set(BENCH_COLUMNS) <= cols:
                entry["kind"] = "bench"
                fast = df[df["impl"] == "fast"]
                entry["info"] = {k: ", ".join(str(v) for v in dict.fromkeys(df[k].dropna()))
                                 for k in ("device", "torch_version", "dtype", "threads", "B", "H", "d_head",
                                           "causal", "repeats")}
                index = "label" if fast.groupby("label")["dtype"].nunique().max() <= 1 else ["label", "dtype"]
                for value, title in (("median_ms", "median time per training step (ms), fast path"),
                                     ("peak_mib", "peak memory of one step (MiB), fast path")):
                    pv = fast.pivot_table(index=index, columns="N", values=value, aggfunc="median", sort=False)
                    pv.columns = [f"N={c}" for c in pv.columns]
                    entry["tables"].append({"title": title, "html": pv.to_html(
                        float_format=lambda x: f"{x:,.2f}", na_rep="—", border=0, classes="num-table")})
                    entry["csv"][f"bench-{path.stem}-{value}.csv"] = pv
            elif set(RATIO_COLUMNS) <= cols:
                entry["kind"] = "ratios"
                show = df[["comparison", "label", "baseline_label", "N", "metric", "value", "target",
                           "meets_target", "device"]]
                entry["tables"].append({"title": "ratios against their targets", "html": show.to_html(
                    index=False, float_format=lambda x: f"{x:,.3f}", na_rep="—", border=0,
                    classes="num-table")})
                entry["csv"][f"bench-{path.stem}.csv"] = show.set_index("comparison")
            elif set(LOADER_COLUMNS) <= cols:
                entry["kind"] = "loader"
                entry["info"] = {k: ", ".join(str(v) for v in dict.fromkeys(df[k].dropna())) for k in ("device", "torch")}
                show = df[["pipeline", "source", "img_size", "images", "images_per_s"]]
                entry["tables"].append({"title": "input pipeline: images/s per CPU worker (one thread, its CPU time)",
                                        "html": show.to_html(index=False, float_format=lambda x: f"{x:,.1f}",
                                                             border=0, classes="num-table")})
                entry["csv"][f"bench-{path.stem}.csv"] = show.set_index("pipeline")
            else:
                entry["note"] = "not a benchmark CSV (columns: " + ", ".join(map(str, df.columns)) + ")"
            out.append(entry)
    return out
