"""The report's LM section: seed 003 Tables 6-8 analogues from the eval-lm outputs.

Reads <lm.out_dir>/../eval/<run_id>.json for every LM run of the scale (a missing one is a
warning naming the command that makes it) and the paper's numbers (paper_lm.yaml). Rows are
(variant, matched mode): the baseline, GKA at matched training tokens, GKA at matched
training FLOPs; with several seeds the numbers are means over seeds (n shown). The depth-20
parameter counts and FLOPs/token are computed here on the meta device (nothing allocated)
and set beside the paper's Table 8, whatever the scale.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import yaml

from ..lm.core import KINDS, RANDOM_BASELINE
from ..lm.runs import eval_path, lm_runs

PAPER_FILE = Path(__file__).with_name("paper_lm.yaml")
TASKS = tuple(KINDS)


def paper_numbers() -> dict:
    return yaml.safe_load(PAPER_FILE.read_text())


def depth20_counts(vocab: int = 32768, context: int = 2048) -> dict:
    """Parameter groups and FLOPs/token of both variants at the paper's depth-20 shape."""
    from ..lm.flops import flops_per_token
    from ..lm.model import GPTConfig, build_model

    out = {}
    for variant in ("base", "gka"):
        model = build_model(GPTConfig(vocab_size=vocab, depth=20, context=context, variant=variant), "meta")
        out[variant] = {**model.param_counts(), "flops_per_token": flops_per_token(model)["total"]}
    return out


def _row_key(r: dict) -> str:
    return "base" if r["variant"] == "base" else f"{r['variant']}-{r['matched']}"


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def section(folder: Path, params) -> dict:
    lm = params.lm
    paper = paper_numbers()
    runs = lm_runs(lm)
    results, warnings = [], []
    for r in runs:
        p = eval_path(lm, r.run_id)
        if not p.is_file():
            warnings.append(f"{r.run_id}: no evaluation ({p}); run `kernattn train-lm --run {r.run_id}` then "
                            f"`kernattn eval-lm --run {r.run_id}`")
            continue
        results.append(json.loads(p.read_text()))
    groups: dict[str, list[dict]] = {}
    for res in results:
        groups.setdefault(_row_key(res), []).append(res)
    rows = []
    for key, rs in groups.items():
        first = rs[0]
        rows.append({
            "key": key, "label": first["label"], "variant": first["variant"], "matched": first["matched"],
            "n": len(rs), "seeds": [x["seed"] for x in rs],
            "train_bpb": _mean(x["train_bpb"] for x in rs), "val_bpb": _mean(x["val_bpb"] for x in rs),
            "gap": _mean(x["val_bpb"] - x["train_bpb"] for x in rs),
            "tasks": {t: _mean(x["core"]["tasks"][t]["centered"] for x in rs) for t in TASKS},
            "accuracy": {t: _mean(x["core"]["tasks"][t]["accuracy"] for x in rs) for t in TASKS},
            "items": {t: first["core"]["tasks"][t]["items"] for t in TASKS},
            "core": _mean(x["core"]["core"] for x in rs),
            "params_m": first["n_params"] / 1e6, "flops_per_token": first["flops_per_token"],
            "train_tokens": first["train_tokens"], "train_flops": first["train_flops"], "steps": first["steps"],
            "train_wall_s": _mean(x["train_wall_s"] for x in rs), "eval_s": _mean(x["eval_s"] for x in rs),
        })
    order = {"base": 0, "gka-tokens": 1, "gka-flops": 2}
    rows.sort(key=lambda r: order.get(r["key"], 9))
    base = next((r for r in rows if r["key"] == "base"), None)
    for r in rows:
        r["core_delta"] = None if base is None or r is base else r["core"] - base["core"]
        r["flops_ratio"] = None if base is None else r["train_flops"] / base["train_flops"]
        r["tokens_ratio"] = None if base is None else r["train_tokens"] / base["train_tokens"]
        r["params_ratio"] = None if base is None else r["params_m"] / base["params_m"]
    d20 = depth20_counts()
    tables = _tables(rows, paper, d20)
    (folder / "tables").mkdir(exist_ok=True)
    for name, df in tables.items():
        df.to_csv(folder / "tables" / f"lm-{name}.csv", index=False)
    meta_path = Path(lm.data_dir) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    return {"present": bool(rows), "rows": rows, "warnings": warnings, "paper": paper, "d20": d20,
            "tasks": TASKS, "baselines": RANDOM_BASELINE, "kinds": KINDS, "lm": lm, "meta": meta,
            "is_paper": params.scale == "paper", "model_dim": lm.model_dim(),
            "n_head": max(1, lm.model_dim() // lm.head_dim)}


def _tables(rows: list[dict], paper: dict, d20: dict) -> dict[str, pd.DataFrame]:
    t6 = [{"model": f"paper: {k}", "train_bpb": v["train_bpb"], "val_bpb": v["val_bpb"], "gap": v["gap"]}
          for k, v in paper["table6"].items()]
    t6 += [{"model": r["label"], "train_bpb": r["train_bpb"], "val_bpb": r["val_bpb"], "gap": r["gap"]} for r in rows]
    t7 = []
    for t in (*TASKS, "mean"):
        rec = {"task": t, "paper_base": paper["table7"][t]["base"], "paper_gka": paper["table7"][t]["gka"]}
        for r in rows:
            rec[r["key"]] = r["core"] if t == "mean" else r["tasks"][t]
        t7.append(rec)
    t8 = [{"model": f"paper: {k}", "params_m": v["params_m"], "flops_per_token": v["flops_per_token"],
           "train_tokens": v["train_tokens"], "train_flops": v["train_flops"]} for k, v in paper["table8"].items()]
    t8 += [{"model": f"ours at depth 20: {k}", "params_m": v["total"] / 1e6, "flops_per_token": v["flops_per_token"],
            "train_tokens": None, "train_flops": None} for k, v in d20.items()]
    t8 += [{"model": r["label"], "params_m": r["params_m"], "flops_per_token": r["flops_per_token"],
            "train_tokens": r["train_tokens"], "train_flops": r["train_flops"]} for r in rows]
    return {"table6": pd.DataFrame(t6), "table7": pd.DataFrame(t7), "table8": pd.DataFrame(t8)}
