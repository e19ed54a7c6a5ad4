"""Stage `kernattn eval-lm`: bits per byte and CORE-6 (GKA Table 7 tasks) of one trained LM run.

    kernattn eval-lm [--params params.yaml] [--scale S] --run base-s0

Reads lm.out_dir/<run_id>/model.pt (and final.json), the tokenizer and token streams of
lm.data_dir, and writes <lm.out_dir>/../eval/<run_id>.json atomically:
  {"run_id", "row", "variant", "options", "matched", "seed", "label", "value_embed_layers", "train_bpb", "val_bpb", "bpb": {split: {bpb, nats, bytes,
   tokens}}, "core": {"tasks": {task: {kind, items, fewshot, accuracy, random_baseline,
   centered, correct: [0/1 per item]}}, "core": mean centered}, "n_params", "flops_per_token", "train_tokens",
   "train_flops", "steps", "eval_s"}
BPB scores the first lm.bpb_tokens tokens of each split (bpb.py); CORE the first
lm.core_items items of each task with lm.core_fewshot shots (core.py).

`kernattn eval-lm --nproc N` scores on N ranks (torchrun, engine/launch.py): BPB's windows and
CORE's items are split over the ranks (position i to rank i mod N), the sums of nats and bytes
and the items' answers are gathered, and rank 0 alone writes the same file one process writes
(BPB equal to float64 summation order, CORE exactly).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import numpy as np
import torch

from ...fetch import DataError
from ...io import atomic_write_json
from ...engine import resolve_device
from ...engine.dist import World, device_of, process_group, world_from_env
from ...engine.options import add_world_options
from . import core_eval as core
from . import tokenizer as tok
from .bpb import evaluate_bpb
from .data import eval_folder
from ...config import RunSpec
from .model import GPT
from .stages import add_run_argument, eval_path, load_stage, run_dir
from .track import load_stream, row_config



def evaluate_run(params, run: RunSpec, world: World | None = None) -> dict:
    from ...errors import UsageError

    lm = params.lm
    folder = run_dir(params, run.run_id)
    final_path, weights = folder / "final.json", folder / "model.pt"
    if not final_path.is_file() or not weights.is_file():
        raise UsageError(f"{folder}: no finished run (final.json, model.pt); run `kernattn train-lm --run {run.run_id}`")
    final = json.loads(final_path.read_text())
    enc = tok.load(lm.data_dir)
    token_bytes = torch.from_numpy(tok.load_token_bytes(lm.data_dir)).long()
    world = world or World()
    device = device_of(world, resolve_device(lm.device))
    if lm.threads:
        torch.set_num_threads(lm.threads)
    model = GPT(row_config(lm, enc.n_vocab, run))
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    model.to(device).eval()
    bf16 = device.type == "cuda" and lm.dtype == "bfloat16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def model_fn(x):
        with autocast():
            return model(x.to(device))

    t0 = time.perf_counter()
    bpb = {}
    with process_group(world, device, lm.dist_timeout_s):
        for split in ("train", "val"):
            head = np.asarray(load_stream(lm.data_dir, split, lm.context)[: lm.bpb_tokens + 1], dtype=np.int64)
            bpb[split] = evaluate_bpb(model, torch.from_numpy(head), token_bytes, lm.context, lm.batch_size,
                                      lm.bpb_tokens, autocast, world)
        core_res = core.evaluate_core(model_fn, enc, eval_folder(params), lm.context, lm.core_items, lm.core_fewshot,
                                      lm.core_seed, tok.bos_id(enc), world)
    c = run.compute
    return {"run_id": run.run_id, "row": run.row, "variant": run.variant, "options": run.options,
            "matched": c.match if c else None, "compute": c.describe() if c else None, "seed": run.seed,
            "label": run.label, "value_embed_layers": model.value_embed_layers,
            "train_bpb": bpb["train"]["bpb"], "val_bpb": bpb["val"]["bpb"], "bpb": bpb,
            "core": core_res, "n_params": final["n_params"], "params": final["params"],
            "flops_per_token": final["flops_per_token"], "train_tokens": final["train_tokens"],
            "train_flops": final["train_flops"], "steps": final["steps"], "train_wall_s": final["wall_s"],
            "eval_s": time.perf_counter() - t0, "scale": params.scale}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_argument(parser)
    add_world_options(parser, "score")


def run(args: argparse.Namespace) -> int:
    from ...errors import UsageError

    params, spec = load_stage(args)
    world = world_from_env()
    try:
        result = evaluate_run(params, spec, world)
    except (core.EvalDataError, tok.TokenizerError, DataError) as exc:
        raise UsageError(str(exc)) from None
    if not world.main:  # rank 0 writes the one file
        return 0
    out = eval_path(params, spec.run_id)
    atomic_write_json(out, result, sort_keys=False)
    print(f"kernattn eval-lm: {spec.run_id}: val bpb {result['val_bpb']:.4f}, CORE-6 "
          f"{result['core']['core']:.4f} -> {out}")
    return 0
