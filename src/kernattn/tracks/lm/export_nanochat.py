"""Stage `kernattn export-lm`: a finished LM run -> a nanochat c7ba252 base checkpoint folder.

    kernattn export-lm [--params params.yaml] [--scale S] --run base-s0 --out DIR

Writes DIR/model_<step>.pt (nanochat's names, vocabulary rows zero-padded to a multiple of
64) and DIR/meta_<step>.json (model_config and the run's batch), which nanochat's
checkpoint_manager.build_model loads. The run must compute nanochat's function (variant base,
c7ba252's constants).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ...config.lm import NANOCHAT_COMMIT
from ...errors import UsageError
from ...io import atomic_torch_save, atomic_write_json
from . import flops as fl
from . import nanochat_io as nio
from .stages import add_run_argument, load_stage, run_dir
from .track import row_config


def export_run(params, run, out: Path) -> tuple[Path, Path]:
    """(model file, meta file) written in `out`."""
    lm, folder = params.lm, run_dir(params, run.run_id)
    try:
        final = json.loads((folder / "final.json").read_text())
        vocab = int(json.loads((folder / "config.json").read_text())["vocab_size"])
        state = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise UsageError(f"{folder}: no finished run to export ({type(exc).__name__}: {exc}); "
                         f"run `kernattn train-lm --run {run.run_id}` first") from None
    cfg = row_config(lm, vocab, run)
    nio.check_nanochat_function(cfg, f"{params.path} (lm, run {run.run_id})")
    step = int(final["steps"])
    meta = {"step": step, "model_config": nio.nanochat_config(cfg), "val_bpb": None,
            "device_batch_size": lm.batch_size, "max_seq_len": lm.context, "total_batch_size": fl.tokens_per_step(lm),
            "user_config": {"kernattn_run": run.run_id, "nanochat_commit": NANOCHAT_COMMIT}}
    out.mkdir(parents=True, exist_ok=True)
    model = atomic_torch_save(out / f"model_{step:06d}.pt", nio.to_nanochat(state, vocab))
    return model, atomic_write_json(out / f"meta_{step:06d}.json", meta)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_argument(parser)
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="the nanochat checkpoint folder to write")


def run(args: argparse.Namespace) -> int:
    params, spec = load_stage(args)
    model, meta = export_run(params, spec, args.out)
    print(f"kernattn export-lm: {spec.run_id} -> {model}, {meta} (nanochat checkpoint_manager.build_model loads them)")
    return 0
