"""Removing weak heads and fine-tuning, as gpa-long proposes (issue 17, section 3).

gpa-long (3.1 and its conclusion) says that the head whose bank is "effectively zero" can be
discarded "and its associated MLP" without loss. "The head and its MLP" is not well defined
in this architecture: a block has one MLP, shared by all its heads, reading the sum of every
head's output (after W_O) plus the residual stream; no MLP, and no slice of one, belongs to a
head. Removing the MLP would remove what every head of the layer feeds, not the weak head's
part. So we remove the head only:
- its rows of W_Q, W_K and W_V (or of whatever input projection the variant has), its kernel
  bank (GPA) or bandwidth (GKA), and its columns of W_O;
- in the model this is done by zeroing the head's output before W_O for the whole run
  (kernattn.tracks.char.analysis.heads.replace_head): then none of those parameters receives a gradient
  or reaches the output, which is exactly the function of the model with the head sliced
  out, while the layers keep their uniform head count. The parameters and FLOPs a slicing
  would save are counted from the module's shapes (`head_cost`).

Which heads: those whose bank strength is below the threshold (flagged weak,
kernattn.tracks.char.analysis.heads), or when none is, the k weakest banks.

The report of a removal: validation loss before removal, right after it, after N steps of
fine-tuning with the head removed, and, because N more steps lower the loss of an under-
trained tiny model anyway, after the same N steps (same batches) without removal: the
removal's cost after fine-tuning is the difference of the last two.

The fine-tuning runs on the training engine (kernattn.studies.prune.run: the char track with
the trained weights loaded, the heads removed by hooks for the whole run, a constant learning
rate), so it resumes, stops on SIGTERM and is tracked in MLflow like every run; this module
holds the choice of heads, the costs and the record (`removal_record`).
"""

from __future__ import annotations

import contextlib

import numpy as np
from torch import nn


def heads_to_remove(strengths, threshold: float, k: int = 1) -> list[tuple[int, int]]:
    """(layer, head), 0-based: the heads with strength < threshold, or the k weakest when none is."""
    strengths = np.asarray(strengths, dtype=np.float64)
    flagged = [tuple(int(i) for i in ix) for ix in zip(*np.nonzero(strengths < threshold))]
    if flagged:
        return flagged
    order = np.argsort(strengths, axis=None, kind="stable")[:k]
    return [tuple(int(i) for i in np.unravel_index(j, strengths.shape)) for j in order]


@contextlib.contextmanager
def removed(model, remove: list[tuple[int, int]]):
    """Within the block the heads `remove` output zeros (before W_O), for training too."""
    from ...tracks.char.analysis.heads import ablate_head

    with contextlib.ExitStack() as stack:
        for layer, head in remove:
            stack.enter_context(ablate_head(model, layer, head))
        yield


def head_cost(attn: nn.Module, context: int) -> dict:
    """Parameters and forward FLOPs per token one head of `attn` accounts for (2 FLOPs per
    multiply-add), if sliced out:
    - W_O: d_model x d_head; every other Linear of the module with k x d_model outputs (a
      fused [W_Q; W_K; W_V] has k = 3): k x d_head rows of (in_features + bias);
    - any other parameter whose first axis is the heads (kernel banks, bandwidths): its share;
    - FLOPs: the matmuls of those rows and columns, plus the kernel over the keys: scores and
      weighted sum, 2 x 2 x d_head per key, with (context + 1) / 2 keys on average under the
      causal mask over a full window. The bank's lag table is per lag, not per token: left out."""
    n_head, d_head, d_model = attn.n_head, attn.d_head, attn.d_model
    params = flops = 0
    counted = set()
    for module in attn.modules():
        if not isinstance(module, nn.Linear):
            continue
        counted.update(id(p) for p in module.parameters())
        if module is attn.proj_out:
            per = module.out_features * d_head
        else:
            k = module.out_features // d_model
            per = k * d_head * (module.in_features + (module.bias is not None))
        params += per
        flops += 2 * per
    for p in attn.parameters():
        if id(p) not in counted and p.dim() >= 1 and p.shape[0] == n_head:
            params += p.numel() // n_head
    flops += 4 * d_head * (context + 1) / 2
    return {"params": int(params), "flops_per_token": float(flops)}


def model_flops_per_token(model) -> float:
    """Forward FLOPs per token of the char GPT: 2 per weight of every matmul (all parameters
    but the embedding lookup), plus every head's kernel over (context + 1) / 2 keys."""
    matmul = model.num_params() - model.tok_emb.weight.numel()
    kernel = sum(4 * b.attn.d_head * b.attn.n_head * (model.context + 1) / 2 for b in model.blocks)
    return float(2 * matmul + kernel)


def removal_record(model, remove: list[tuple[int, int]], losses: dict, steps: int) -> dict:
    """The removal study's record for one trained model (module docstring): `losses` holds
    loss_before, loss_after_removal, loss_after_fine_tune and loss_control_fine_tune (the
    same fine-tuning without removal); the costs are counted on `model`'s modules."""
    costs = [head_cost(model.blocks[layer].attn, model.context) for layer, _ in remove]
    params_saved = sum(c["params"] for c in costs)
    flops_saved = sum(c["flops_per_token"] for c in costs)
    return {
        "removed": [{"layer": layer + 1, "head": head + 1} for layer, head in remove],
        **{k: float(losses[k]) for k in ("loss_before", "loss_after_removal", "loss_after_fine_tune",
                                         "loss_control_fine_tune")},
        "cost_after_removal": float(losses["loss_after_removal"] - losses["loss_before"]),
        "cost_after_fine_tune": float(losses["loss_after_fine_tune"] - losses["loss_control_fine_tune"]),
        "fine_tune_steps": steps, "params_saved": params_saved,
        "params_saved_fraction": params_saved / model.num_params(),
        "flops_saved_per_token": flops_saved, "flops_saved_fraction": flops_saved / model_flops_per_token(model),
    }
