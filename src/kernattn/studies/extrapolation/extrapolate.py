"""Stages `extrapolate-char` and `extrapolate-lm`: every trained run of the track scored,
without retraining, at each of studies.extrapolation.factors times its training context.

    kernattn extrapolate-char --params params.yaml [--scale S]
    kernattn extrapolate-lm   --params params.yaml [--scale S]

Each finished run is loaded through its track (the char track's CharTrack and its checkpoint,
the LM's LMTrack and model.pt), rebuilt for longer sequences with the same weights, and
scored on the same validation text at every length (length.py: non-overlapping
windows; the mean over every target and over the targets beyond the training context; bits
per byte too for the LM). A variant that is not defined at a length (a free lag table beyond
its max_len) gets a line saying so instead of a number. The LM keeps each layer's trained
sliding window (an S layer sees the same number of keys at every length; an L layer sees the
whole sequence).

As a check of the loading, each run's validation loss is also re-scored by its track's own
evaluation at the training context (`val_loss_protocol`: the training run's fixed validation
windows) beside the one its final.json records (`val_loss_train`); on CPU in float32 they agree
to rounding.

Writes results/<scale>/extrapolation/<track>.csv (beside studies.out_dir) (COLUMNS; one line per run and factor),
atomically.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...config import Params, params_from_args
from ...io import atomic_write_text, load_torch
from . import stages as paths
from .length import ShortText, behaviour, defined_limit, text_targets, window_losses

COLUMNS = ("track", "run_id", "row", "seed", "variant", "label", "train_context", "factor", "length", "defined",
           "loss", "loss_beyond", "bpb", "windows", "targets", "note", "behaviour", "val_loss_train",
           "val_loss_protocol")


@dataclass
class Loaded:
    """One finished run, ready to score at any length up to `limit`."""
    track: str
    spec: Any                                       # its RunSpec
    final: dict                                     # final.json
    context: int                                    # the training context
    tokens: torch.Tensor                            # the validation text (1-D ids), from its start
    protocol_loss: float                            # the track's own evaluation, re-scored
    model_at: Callable[[int], torch.nn.Module]      # the trained model for sequences up to n
    limit: int | None                               # the longest sequence it is defined on
    behaviour: str
    autocast: Callable
    device: torch.device


def _first(tokens, n: int) -> torch.Tensor:
    return torch.from_numpy(np.asarray(tokens[:n], dtype=np.int64))


def char_run(params: Params, spec, device) -> Loaded:
    from ...engine.rundir import load_finished
    from ...engine.runtime import autocast_factory
    from ...tracks.char.model import GPT
    from ...tracks.char.stages import run_dir
    from ...tracks.char.track import CharTrack

    track = CharTrack(params, spec)
    track.build(device)
    final, ckpt = load_finished(run_dir(params, spec.run_id), f"kernattn train --params {params.path} "
                                                                f"--scale {params.scale} --run {spec.run_id}")
    track.model.load_state_dict(ckpt["model"])
    autocast = autocast_factory(device, params.train.dtype)

    def model_at(n: int) -> torch.nn.Module:
        model = GPT(track.data.vocab_size, dataclasses.replace(params.model, context=n), spec.variant, spec.options)
        model.load_state_dict(ckpt["model"])
        return model.to(device).eval()

    ctx = params.model.context
    return Loaded("char", spec, final, ctx, track.data.val, track.evaluate(track.model, autocast)["loss"], model_at,
                  defined_limit(track.model), behaviour(track.model, ctx), autocast, device)


def lm_run(params: Params, spec, device) -> Loaded:
    from ...engine.runtime import autocast_factory
    from ...tracks.lm.model import GPT
    from ...tracks.lm.stages import run_dir
    from ...tracks.lm.track import LMTrack, row_config

    track = LMTrack(params, spec)
    track.build(device)
    folder = run_dir(params, spec.run_id)
    fix = f"retrain with: kernattn train-lm --params {params.path} --scale {params.scale} --run {spec.run_id} --fresh"
    final = json.loads((folder / "final.json").read_text())
    state = load_torch(folder / "model.pt", fix)
    track.model.load_state_dict(state)
    autocast = autocast_factory(device, track.section.dtype)
    trained_cfg, windows = row_config(track.section, track.vocab, spec), track.model.windows
    short = next((w for w in windows if w is not None), None)

    def model_at(n: int) -> torch.nn.Module:
        # the trained windows kept: S layers their keys, L layers (None) the whole sequence
        model = GPT(dataclasses.replace(trained_cfg, context=n, short_window=n if short is None else short))
        if model.windows != windows:
            raise RuntimeError(f"{spec.run_id}: windows {model.windows} at length {n}, trained with {windows}")
        model.load_state_dict(state)
        return model.to(device).eval()

    ctx = track.section.context
    return Loaded("lm", spec, final, ctx, track.val_data, track.evaluate(track.model, autocast)["loss"], model_at,
                  defined_limit(track.model), behaviour(track.model, ctx), autocast, device)


def sweep(run: Loaded, factors, windows: int, batch: int, token_bytes: torch.Tensor | None = None) -> list[dict]:
    """One line per factor (COLUMNS): the run scored at factor x its context, or why not."""
    from ...tracks.lm.bpb import bits_per_byte

    ctx = run.context
    n_targets = text_targets(len(run.tokens), factors, ctx, windows)
    tokens = _first(run.tokens, n_targets + 1)
    lengths = [f * ctx for f in factors]
    model = run.model_at(max(n for n in lengths if run.limit is None or n <= run.limit))

    def model_fn(x):
        with run.autocast():
            return model(x.to(run.device))

    s, final = run.spec, run.final
    lines = []
    for factor, n in zip(factors, lengths):
        line = {"track": run.track, "run_id": s.run_id, "row": s.row, "seed": s.seed, "variant": s.variant,
                "label": s.label, "train_context": ctx, "factor": factor, "length": n, "behaviour": run.behaviour,
                "val_loss_train": final.get("val_loss"), "val_loss_protocol": run.protocol_loss if factor == 1 else None}
        if run.limit is not None and n > run.limit:
            lines.append({**line, "defined": False, "note": f"not defined beyond {run.limit}"})
            continue
        r = window_losses(model_fn, tokens, n, ctx, n_targets, batch)
        bpb = bits_per_byte(r["nats"], r["ids"], token_bytes)[0] if token_bytes is not None else None
        lines.append({**line, "defined": True, "loss": r["loss"], "loss_beyond": r["loss_beyond"], "bpb": bpb,
                      "windows": r["windows"], "targets": r["targets"], "note": ""})
    return lines


def track_lines(params: Params, track: str) -> list[dict]:
    from ...engine import resolve_device
    from ...tracks.char import stages as char_stages
    from ...tracks.lm import stages as lm_stages

    e = params.studies.extrapolation
    section = params.train if track == "char" else params.lm
    device = resolve_device(section.device)
    if section.threads:
        torch.set_num_threads(section.threads)
    token_bytes, lines = None, []
    if track == "lm":
        from ...tracks.lm.tokenizer import load_token_bytes

        data_dir = Path(lm_stages.data_outputs(params)[0]).parent
        token_bytes = torch.from_numpy(load_token_bytes(data_dir)).long()
    load = char_run if track == "char" else lm_run
    for spec in (char_stages.runs(params) if track == "char" else lm_stages.runs(params)):
        run = load(params, spec, device)
        lines += sweep(run, e.factors, e.windows, e.batch, token_bytes)
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options beyond --params and --scale: the track is the command's."""


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from ...errors import UsageError

    params = params_from_args(args)  # a ParamsError is one line (cli.main)
    track = next(t for t, cmd in paths.COMMAND.items() if cmd == args.command)
    try:
        lines = track_lines(params, track)
    except ShortText as exc:  # too little validation text: one line naming the key
        raise UsageError(f"{params.path}: {exc}") from None
    table = pd.DataFrame(lines, columns=list(COLUMNS))
    out = paths.output(params, track)
    atomic_write_text(out, table.to_csv(index=False))
    ones = table[table["factor"] == 1]
    gap = (ones["val_loss_protocol"] - ones["val_loss_train"]).abs().max()
    print(f"kernattn {args.command}: {table['run_id'].nunique()} runs x {len(params.studies.extrapolation.factors)} "
          f"lengths; re-scored training validation loss within {gap:.2e} of final.json; wrote {out}")
    return 0
