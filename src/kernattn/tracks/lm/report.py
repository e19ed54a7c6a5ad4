"""The LM track's part of the report (the shape of every part: kernattn.report.part): gka-paper
Tables 6-8 analogues from the eval-lm outputs.

Reads <lm.out_dir>/../eval/<run_id>.json for every LM run of the scale (a missing one is a
warning naming the command that makes it) and the paper's numbers (paper_lm.yaml). One table
row per row of lm.rows, in its order, all with the same columns (label, variant, compute,
value embeddings, BPB, CORE, counts); with several seeds the numbers are means over seeds (n
shown). The first row of lm.rows is the reference the others are set against (deltas,
ratios, bootstrap). The depth-20 parameter counts and FLOPs/token of the paper's two models
are computed here on the meta device (nothing allocated) and set beside the paper's Table 8,
whatever the scale.

Uncertainty: BPB per row is the mean over seeds with its t interval; the CORE difference of
each row from the reference row (per task and the mean centered score) gets a paired bootstrap
interval over items (report_bootstrap.py). `claims` (report_claims.py) judges gka-paper's
section 5 claims of paper_numbers.yaml on these numbers, on the pair the paper compared: the rows
whose `paper` field names Table 8's baseline and GKA-LM (claim_rows), trained at unequal budgets
as the paper's were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ...config.lm import NANOCHAT_COMMIT, NANOCHAT_COMMIT_DATE, LMParams
from ...report import stats
from ...report.part import ReportContext
from ...yaml_text import safe_load
from .core_eval import KINDS, RANDOM_BASELINE
from .report_bootstrap import BOOT_RESAMPLES, TASKS, boot_table, core_bootstrap
from .report_claims import CLAIM_KINDS, claim_rows, claims
from .stages import data_outputs, eval_path, runs

OUTLINE = ("part-lm", "Language modelling: nanochat GPT (gka-paper, Section 5)", (
    ("lm", "Baseline vs GKA-LM: Tables 6-8"),))
PAPER_FILE = Path(__file__).with_name("paper_lm.yaml")
# The lm keys of nanochat's model and schedule: where a scale sets one apart from nanochat
# c7ba252 (LMParams' defaults), the report says so.
NANOCHAT_KEYS = ("rope_base", "qk_gain", "resid_lambda_init", "x0_lambda_init", "softcap", "window_pattern",
                 "short_window", "warmup_frac", "warmdown_frac", "min_lr_ratio", "param_data_ratio")


def paper_numbers() -> dict:
    return safe_load(PAPER_FILE.read_text())


def depth20_counts(vocab: int = 32768, context: int = 2048) -> dict:
    """Parameter groups and FLOPs/token of both variants at the paper's depth-20 shape."""
    from .flops import base_steps, flops_per_token, tokens_per_step
    from .model import GPTConfig, build_model

    out = {}
    nanochat = LMParams()  # depth 20's batch (2^20 tokens a step) and parameter-to-data rule
    for variant in ("base", "gka"):
        model = build_model(GPTConfig(vocab_size=vocab, depth=20, context=context, variant=variant), "meta")
        out[variant] = {**model.param_counts(), "flops_per_token": flops_per_token(model)["total"],
                        "has_value_embeds": bool(model.value_embed_layers),  # value_embeds: their count
                        "rule_tokens": base_steps(nanochat, model) * tokens_per_step(nanochat)}
    return out


def nanochat_differences(lm) -> list[str]:
    """'key value (c7ba252: value)' for each of NANOCHAT_KEYS where `lm` leaves nanochat's commit."""
    ref = LMParams()
    show = lambda v: "null" if v is None else str(v)  # noqa: E731  (YAML's spelling)
    return [f"{k} {show(getattr(lm, k))} (c7ba252: {show(getattr(ref, k))})" for k in NANOCHAT_KEYS
            if getattr(lm, k) != getattr(ref, k)]


def section(ctx: ReportContext) -> dict:
    params = ctx.params
    lm = params.lm
    paper = paper_numbers()
    results, warnings = [], []
    for r in runs(params):
        p = eval_path(params, r.run_id)
        if not p.is_file():
            warnings.append(f"{r.run_id}: no evaluation ({p}); run `kernattn train-lm --run {r.run_id}` then "
                            f"`kernattn eval-lm --run {r.run_id}`")
            continue
        results.append(json.loads(p.read_text()))
    groups: dict[str, list[dict]] = {row.name: [x for x in results if x["row"] == row.name] for row in lm.rows}
    groups = {k: v for k, v in groups.items() if v}
    rows = [_summary(key, rs) for key, rs in groups.items()]
    ref = rows[0] if rows and rows[0]["key"] == lm.rows[0].name else None
    boot = core_bootstrap(groups, ref["key"] if ref else None)
    for r in rows:
        r["core_delta"] = None if ref is None or r is ref else r["core"] - ref["core"]
        r["flops_ratio"] = None if ref is None else r["train_flops"] / ref["train_flops"]
        r["tokens_ratio"] = None if ref is None else r["train_tokens"] / ref["train_tokens"]
        r["params_ratio"] = None if ref is None else r["params_m"] / ref["params_m"]
        r["boot"] = boot.get(r["key"])
        r["val_bpb_ci"] = stats.mean_ci([x["val_bpb"] for x in groups[r["key"]]])
    d20 = depth20_counts()
    tables = _tables(rows, paper, d20)
    tables["core-bootstrap"] = boot_table(rows)
    for name, df in tables.items():
        df.to_csv(ctx.tables / f"lm-{name}.csv", index=False)
    meta_path = Path(data_outputs(params)[-1])  # meta.json: the prepared data's provenance
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    return {"present": bool(rows), "rows": rows, "ref": ref, "groups": groups, "warnings": warnings, "paper": paper,
            "d20": d20, "boot_resamples": BOOT_RESAMPLES, "claim_rows": claim_rows(lm.rows),
            "tasks": TASKS, "baselines": RANDOM_BASELINE, "kinds": KINDS, "lm": lm, "meta": meta,
            "is_paper": params.scale == "paper", "model_dim": lm.model_dim(),
            "nanochat": {"commit": NANOCHAT_COMMIT, "date": NANOCHAT_COMMIT_DATE, "differences": nanochat_differences(lm)},
            "n_head": max(1, lm.model_dim() // lm.head_dim)}


# A mean over seeds: None left out; a NaN raises, as the val_bpb interval's mean_ci does.
_mean = stats.mean_of


def _summary(key: str, rs: list[dict]) -> dict:
    """One table row: the row's seeds' evaluations, averaged."""
    first = rs[0]
    return {
        "key": key, "label": first["label"], "variant": first["variant"], "options": first["options"],
        "matched": first["matched"], "compute": first["compute"] or "own steps",
        "value_embeds": bool(first["value_embed_layers"]), "n": len(rs), "seeds": [x["seed"] for x in rs],
        "train_bpb": _mean(x["train_bpb"] for x in rs), "val_bpb": _mean(x["val_bpb"] for x in rs),
        "gap": _mean(x["val_bpb"] - x["train_bpb"] for x in rs),
        "tasks": {t: _mean(x["core"]["tasks"][t]["centered"] for x in rs) for t in TASKS},
        "accuracy": {t: _mean(x["core"]["tasks"][t]["accuracy"] for x in rs) for t in TASKS},
        "items": {t: first["core"]["tasks"][t]["items"] for t in TASKS},
        "core": _mean(x["core"]["core"] for x in rs),
        "params_m": first["n_params"] / 1e6, "flops_per_token": first["flops_per_token"],
        "train_tokens": first["train_tokens"], "train_flops": first["train_flops"], "steps": first["steps"],
        "train_wall_s": _mean(x["train_wall_s"] for x in rs), "eval_s": _mean(x["eval_s"] for x in rs),
    }


def _tables(rows: list[dict], paper: dict, d20: dict) -> dict[str, pd.DataFrame]:
    t6 = [{"model": f"paper: {k}", "train_bpb": v["train_bpb"], "val_bpb": v["val_bpb"], "gap": v["gap"]}
          for k, v in paper["table6"].items()]
    t6 += [{"model": r["label"], "row": r["key"], "variant": r["variant"], "compute": r["compute"],
            "seeds": " ".join(map(str, r["seeds"])), "train_bpb": r["train_bpb"], "val_bpb": r["val_bpb"],
            "val_bpb_ci_half": r["val_bpb_ci"].half, "gap": r["gap"], "core": r["core"]} for r in rows]
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
    t8 += [{"model": r["label"], "row": r["key"], "value_embeds": r["value_embeds"], "params_m": r["params_m"],
            "flops_per_token": r["flops_per_token"], "train_tokens": r["train_tokens"],
            "train_flops": r["train_flops"]} for r in rows]
    return {"table6": pd.DataFrame(t6), "table7": pd.DataFrame(t7), "table8": pd.DataFrame(t8)}


__all__ = ["OUTLINE", "CLAIM_KINDS", "section", "claims"]  # the part (kernattn.report.part); claims: report_claims.py
