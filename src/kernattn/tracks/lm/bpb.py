"""Bits per byte exactly as nanochat defines it.

    bpb = sum of the per-token losses (nats) / (ln 2 x sum of the UTF-8 bytes of the targets)

where a target's byte count comes from the tokenizer's token_bytes table and special tokens
(BOS) count 0 bytes: their loss is left out of the numerator too, so a document boundary is
neither rewarded nor penalised. Unlike per-token loss, BPB does not depend on the vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...engine.dist import World, reduce_sum, val_share


def byte_sums(nats: torch.Tensor, targets: torch.Tensor, token_bytes: torch.Tensor) -> tuple[float, float]:
    """(summed nats, summed bytes) of per-token losses `nats` for token ids `targets`, in float64:
    the numerator and denominator of BPB, which add over any split of the tokens (ranks)."""
    nbytes = token_bytes.to(targets.device)[targets.reshape(-1)].to(torch.float64)
    counted = nats.reshape(-1).to(torch.float64) * (nbytes > 0)
    return float(counted.sum()), float(nbytes.sum())


def bpb_of(total_nats: float, total_bytes: float) -> float:
    if total_bytes == 0:
        raise ValueError("no target carries any byte (all special tokens?); BPB is undefined")
    return total_nats / (math.log(2) * total_bytes)


def bits_per_byte(nats: torch.Tensor, targets: torch.Tensor, token_bytes: torch.Tensor) -> tuple[float, float, int]:
    """(bpb, summed nats, summed bytes) of per-token losses `nats` for token ids `targets`."""
    total_nats, total_bytes = byte_sums(nats, targets, token_bytes)
    return bpb_of(total_nats, total_bytes), total_nats, int(total_bytes)


@torch.no_grad()
def evaluate_bpb(model, stream: torch.Tensor, token_bytes: torch.Tensor, context: int, batch_size: int,
                 max_tokens: int, autocast=None, world: World | None = None) -> dict:
    """BPB over the first max_tokens targets of `stream`, in consecutive windows of `context`
    targets (each window's inputs are the `context` tokens before its targets). Over several
    ranks (`world`) window i is scored by rank i mod size and the sums of nats and bytes are
    added over the ranks: every window once, the same BPB as one process."""
    import contextlib

    world = world or World()
    autocast = autocast or contextlib.nullcontext
    device = next(model.parameters()).device
    n_windows = max(1, min(max_tokens, stream.numel() - 1) // context)
    starts = val_share(torch.arange(n_windows) * context, world)
    nats, targets = [torch.zeros(0)], [torch.zeros(0, dtype=torch.long)]
    was = model.training
    model.eval()
    for i in range(0, len(starts), batch_size):
        s = starts[i:i + batch_size]
        chunk = stream[s[:, None] + torch.arange(context + 1)].long().to(device)
        with autocast():
            logits = model(chunk[:, :-1])
        y = chunk[:, 1:].reshape(-1)
        nats.append(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y, reduction="none").cpu())
        targets.append(y.cpu())
    model.train(was)
    sums = torch.tensor(byte_sums(torch.cat(nats), torch.cat(targets), token_bytes), dtype=torch.float64)
    total_nats, total_bytes = reduce_sum(sums.to(device), world).tolist()
    return {"bpb": bpb_of(total_nats, total_bytes), "nats": total_nats, "bytes": int(total_bytes),
            "tokens": int(n_windows * context)}
