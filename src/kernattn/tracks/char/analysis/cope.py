"""Read one trained CoPE run's gates: how much of each head's count is newlines (the CoPE
control of issue 50, claim rev-cope-newlines; the rule is tracks/char/report_cope.py's).

    kernattn analyze-cope --params params.yaml [--scale S] --run <run_id>

The run's checkpoint (the one its final.json names) is loaded into a freshly built model and
run on `analysis.streams` windows of the model's context, evenly spaced over the validation
split. For every CoPE layer and head (attention.cope.gate_mass):

    share      the head's gate mass on keys that are a newline (over queries, keys, windows);
    blind      the same share with every allowed gate set to 1 (a counter blind to content);
    enrichment share / blind.

Writes <analysis.out_dir>/<run_id>/cope-newlines.json atomically: {run_id, windows, context,
heads: [{layer, head, share, blind, enrichment}]}. The report reads that file, never a model,
so the published records (which keep no checkpoint) rebuild the verdict.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from ....config import find_run, params_from_args
from ....io import atomic_write_text
from ..stages import cope_output

NEWLINE = "\n"


@dataclass(frozen=True)
class HeadShare:
    layer: int
    head: int
    share: float
    blind: float

    @property
    def enrichment(self) -> float:
        return self.share / self.blind if self.blind > 0 else float("nan")

    def record(self) -> dict:
        return {"layer": self.layer, "head": self.head, "share": self.share, "blind": self.blind,
                "enrichment": self.enrichment}


def head_shares(model, x, newline_id: int) -> list[HeadShare]:
    """Every CoPE layer's per-head newline share of `model` (a char GPT) on the windows x [B, N]."""
    import torch

    from ....attention.cope import CopeAttention, gate_mass

    inputs: dict[int, torch.Tensor] = {}
    layers = [(i, b.attn) for i, b in enumerate(model.blocks) if isinstance(b.attn, CopeAttention)]
    hooks = [attn.register_forward_pre_hook(lambda _m, args, i=i: inputs.__setitem__(i, args[0]))
             for i, attn in layers]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    counted = x == newline_id
    out = []
    for i, attn in layers:
        gates = attn.gates(inputs[i])
        blind = attn.allowed(x.shape[1], x.device).to(gates.dtype).expand_as(gates)
        share, base = gate_mass(gates, counted), gate_mass(blind, counted)
        out += [HeadShare(i + 1, h + 1, float(share[h]), float(base[h])) for h in range(share.shape[0])]
    return out


def run_shares(params, spec, streams: int) -> list[HeadShare]:
    """head_shares of a finished run: its checkpoint on `streams` evenly spaced validation windows."""
    import torch

    from ....engine.rundir import load_trained
    from ..data import load_vocab, windows
    from ..stages import data_dir
    from ..track import CharTrack

    track = CharTrack(params, spec)
    load_trained(track, torch.device("cpu"))
    chars = load_vocab(data_dir(params))
    if NEWLINE not in chars:
        raise ValueError(f"{data_dir(params)}/vocab.json has no newline character")
    context = params.model.context
    starts = torch.linspace(0, track.val_data.numel() - context - 1, streams).long()
    return head_shares(track.model, windows(track.val_data, starts, context)[0], chars.index(NEWLINE))


def analyze(params, spec) -> dict:
    """Read the run and write its cope-newlines.json; returns what it wrote."""
    shares = run_shares(params, spec, params.analysis.streams)
    out = {"run_id": spec.run_id, "windows": params.analysis.streams, "context": params.model.context,
           "heads": [h.record() for h in shares]}
    atomic_write_text(cope_output(params, spec.run_id), json.dumps(out, indent=1) + "\n")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="RUN_ID", help="a CoPE run of the matrix, '<row>-s<seed>'")


def run(args: argparse.Namespace) -> int:
    from ....errors import UsageError

    params = params_from_args(args)
    spec = find_run(params, args.run)
    if spec.variant != "cope":
        raise UsageError(f"run {spec.run_id} has attention {spec.variant!r}, not cope: it has no gates to read")
    out = analyze(params, spec)
    best = max(out["heads"], key=lambda h: h["share"])
    print(f"kernattn analyze-cope: {spec.run_id}: largest newline share {best['share']:.3f} (layer {best['layer']} "
          f"head {best['head']}, {best['enrichment']:.1f}x content-blind); wrote {cope_output(params, spec.run_id)}")
    return 0
