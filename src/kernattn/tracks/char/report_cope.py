"""The CoPE control's reading (issue 50, claim kind `cope_newlines`): do CoPE's learned positions
count newlines? If gpa-long's lag-70 bump is a paragraph or line scale, a model that may count
any tokens it likes should learn to count the newlines.

Per finished CoPE run, its checkpoint (the one its final.json names) is loaded into a freshly
built model and run on `analysis.streams` windows of the model's context, evenly spaced over the
validation split. For every CoPE layer and head (attention.cope.gate_mass):

    share      the head's gate mass on keys that are a newline (over queries, keys, windows);
    blind      the same share with every allowed gate set to 1 (a counter blind to content);
    enrichment share / blind.

The rule (paper_numbers.yaml, pre-registered 2026-12-02 before any CoPE run): a head counts
newlines when share >= min_share; a seed says yes when some head of some layer does; every seed
yes -> holds, none -> contradicted, a split -> inconclusive; fewer than stats.MIN_SEEDS runs
read -> not judged. The heads with enrichment >= min_enrichment are printed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...report import stats
from ...report.claims import ClaimResult

KIND = "cope_newlines"
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


def head_shares(model, x, newline_id: int) -> list[HeadShare]:
    """Every CoPE layer's per-head newline share of `model` (a char GPT) on the windows x [B, N]."""
    import torch

    from ...attention.cope import CopeAttention, gate_mass

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

    from ...engine.rundir import load_finished
    from .data import load_vocab, windows
    from .stages import data_dir
    from .track import CharTrack

    track = CharTrack(params, spec)
    _, ckpt = load_finished(track.run_dir, f"kernattn train --run {spec.run_id}")
    with torch.random.fork_rng(devices=[]):  # building draws initial weights: keep the caller's RNG
        track.build(torch.device("cpu"))
    track.model.load_state_dict(ckpt["model"])
    track.model.eval()
    chars = load_vocab(data_dir(params))
    if NEWLINE not in chars:
        raise ValueError(f"{data_dir(params)}/vocab.json has no newline character")
    context = params.model.context
    last = track.val_data.numel() - context - 1
    starts = torch.linspace(0, last, streams).long()
    return head_shares(track.model, windows(track.val_data, starts, context)[0], chars.index(NEWLINE))


def verdict(per_seed: dict[str, list[HeadShare]], min_share: float) -> str:
    """The pre-registered rule over the runs read (run id -> its heads)."""
    if len(per_seed) < stats.MIN_SEEDS:
        return stats.not_judged(stats.seeds_text(len(per_seed)))
    says = [any(h.share >= min_share for h in heads) for heads in per_seed.values()]
    return stats.HOLDS if all(says) else stats.CONTRADICTED if not any(says) else stats.INCONCLUSIVE


def judge(claim: dict, params, runs_df: pd.DataFrame, scale: str) -> ClaimResult:
    """The claim on every finished run of its row (runs_df: the char report's runs table)."""
    from ...config import find_run

    run_ids = list(runs_df.loc[runs_df["row"] == claim["row"], "run_id"]) if len(runs_df) else []
    if not run_ids:
        return ClaimResult(claim, stats.NOT_RUN, scale=scale, ours="—",
                           detail=f"{claim['row']} is not a row trained at this scale")
    per_seed, why = {}, []
    for run_id in run_ids:
        try:
            per_seed[run_id] = run_shares(params, find_run(params, run_id), params.analysis.streams)
        except (ValueError, OSError, KeyError, RuntimeError) as exc:
            why.append(f"{run_id}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    min_share, min_enr = float(claim["min_share"]), float(claim["min_enrichment"])
    best = {r: max(heads, key=lambda h: h.share) for r, heads in per_seed.items() if heads}
    ours = "; ".join(f"{r}: largest newline share {h.share:.3f} (layer {h.layer} head {h.head}, "
                     f"{h.enrichment:.1f}x the content-blind {h.blind:.3f}); heads enriched >= {min_enr:g}x: "
                     f"{sum(x.enrichment >= min_enr for x in per_seed[r])} of {len(per_seed[r])} heads"
                     for r, h in best.items()) or "—"
    detail = (f"rule: a head counts newlines when >= {min_share:g} of its gate mass is on newline keys; "
              f"{sum(any(h.share >= min_share for h in hs) for hs in per_seed.values())} of {len(per_seed)} "
              f"seeds have one; {params.analysis.streams} validation windows of {params.model.context}"
              + (f"; not read: {'; '.join(why)}" if why else ""))
    estimate = (sum(h.share for h in best.values()) / len(best)) if best else None
    return ClaimResult(claim, verdict(per_seed, min_share), scale=scale, ours=ours, estimate=estimate, detail=detail)
