"""Stage `kernattn import-lm`: a nanochat c7ba252 base checkpoint -> an LM run folder eval-lm scores.

    kernattn import-lm [--params params.yaml] [--scale S] --nanochat DIR [--step N] --run base-s0 [--replace]

DIR holds nanochat's model_<step>.pt and meta_<step>.json (the last step unless --step). The
run must be a row of lm.rows computing nanochat's function (variant base, no options, the
lm constants of c7ba252) with the checkpoint's shape; its vocabulary is lm.data_dir's, so the
model must have been trained with that tokenizer (nanochat's own tokenizer.pkl is not
converted). Writes lm.out_dir/<run_id>/: model.pt, config.json and, last, final.json (no
fingerprint: train-lm treats the folder as another configuration's and does not resume it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...errors import UsageError
from ...io import atomic_torch_save, atomic_write_json
from . import flops as fl
from . import nanochat_io as nio
from .model import GPT
from .stages import add_run_argument, load_stage, run_dir
from .track import row_config


def data_vocab(data_dir: str) -> int:
    meta = Path(data_dir) / "meta.json"
    if not meta.is_file():
        raise UsageError(f"{meta}: no such file; run `kernattn prepare-lm` first (eval-lm scores with its tokenizer)")
    return int(json.loads(meta.read_text())["vocab_size"])


def final_record(run, model: GPT, meta: dict, step: int, source: Path) -> dict:
    """final.json of an imported run: what eval-lm and the report read, and where it came from."""
    fpt = fl.flops_per_token(model)["total"]
    tokens = step * int(meta.get("total_batch_size") or 0)
    loop = meta.get("loop_state") or {}
    return {"run_id": run.run_id, "row": run.row, "seed": run.seed, "variant": run.variant, "label": run.label,
            "status": "IMPORTED", "imported_from": {"nanochat": str(source), "step": step,
                                                    "val_bpb": meta.get("val_bpb")},
            "steps": step, "n_params": model.param_counts()["total"], "params": model.param_counts(),
            "flops_per_token": fpt, "train_tokens": tokens, "train_flops": tokens * fpt,
            "value_embed_layers": model.value_embed_layers, "wall_s": float(loop.get("total_training_time") or 0.0)}


def import_checkpoint(params, run, source: Path, step: int | None, replace: bool = False) -> Path:
    """Read nanochat's checkpoint into the run's folder; returns the folder."""
    lm = params.lm
    cfg = row_config(lm, data_vocab(lm.data_dir), run)
    nio.check_nanochat_function(cfg, f"{params.path} (lm, run {run.run_id})")
    state, meta, step = nio.load_nanochat(source, step, cfg)
    folder = run_dir(params, run.run_id)
    if (folder / "final.json").exists() and not replace:
        raise UsageError(f"{folder}: holds a run already; pass --replace to overwrite it with the import")
    model = GPT(cfg)
    model.load_state_dict(state)  # strict: every weight of nanochat's model, nothing else
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "final.json").unlink(missing_ok=True)  # final.json last: the folder is done only then
    atomic_torch_save(folder / "model.pt", model.state_dict())
    atomic_write_json(folder / "config.json", {"run_id": run.run_id, "vocab_size": cfg.vocab_size,
                                               "windows": model.windows, "nanochat_meta": meta})
    atomic_write_json(folder / "final.json", final_record(run, model, meta, step, Path(source)))
    return folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nanochat", required=True, type=Path, metavar="DIR",
                        help="a nanochat base checkpoint folder (model_<step>.pt, meta_<step>.json)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the last)")
    parser.add_argument("--replace", action="store_true", help="overwrite a finished run in the run folder")
    add_run_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, spec = load_stage(args)
    folder = import_checkpoint(params, spec, args.nanochat, args.step, args.replace)
    print(f"kernattn import-lm: {args.nanochat} -> {folder}; score it with `kernattn eval-lm --run {spec.run_id}`")
    return 0
