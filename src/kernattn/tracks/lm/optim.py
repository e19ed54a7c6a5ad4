"""The LM's optimiser (lm.optimizer): nanochat c7ba252's MuonAdamW recipe, or one AdamW.

muon_adamw, as nanochat's GPT.setup_optimizer and scripts/base_train.py:
- Muon for every matrix of the blocks (W_Q, W_K, W_V as three matrices, W_O, the MLP's two,
  the value-embedding gates), grouped by shape: lr matrix_lr, momentum 0.85 -> 0.95 over 300
  steps, beta2 0.95, 5 Polar Express steps, cautious weight decay decaying linearly to 0;
- AdamW (eps 1e-10, no decay) for lm_head (unembedding_lr), the token embedding and the value
  embeddings (embedding_lr), resid_lambdas (scalar_lr x 0.01) and x0_lambdas (scalar_lr, betas
  (0.96, 0.95)); betas (adam_beta1, adam_beta2) otherwise. The first three are scaled by
  (model_dim / 768)^-1/2 (tuned at width 768);
- every lr times sqrt(B / 2^19) (B tokens per step), the weight decay times
  sqrt(B / 2^19) x D_ref / D (D = param_data_ratio x the model's scaling parameters, D_ref the
  same for the depth-12 model of the same shape rules);
- the attention's own non-matrix parameters (kernel banks, lag tables, GKA's bandwidths, learned
  RoPE frequencies, biases: nanochat has none) in one more AdamW group at lm.lr, not scaled
  (the lr they had under one AdamW), no decay.
adamw: one torch AdamW at lm.lr, betas (0.9, 0.95), weight_decay on the Linear weights only.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from . import muon
from .model import GPT

ADAM_EPS = 1e-10
X0_BETAS = (0.96, 0.95)
RESID_LR_FACTOR = 0.01
NS_STEPS, MUON_BETA2 = 5, 0.95
REF_DEPTH = 12  # nanochat's reference model for the horizon D_ref


def scalings(lm, model: GPT, tokens_per_step: int, ref_model: GPT) -> dict[str, float]:
    """nanochat's lr factor for the batch size, the width factor of the AdamW lrs and the
    scaled weight decay (base_train.py steps 3-4, setup_optimizer)."""
    batch = (tokens_per_step / muon.B_REF) ** 0.5
    target = int(lm.param_data_ratio * model.param_counts()["scaling"])
    d_ref = lm.param_data_ratio * ref_model.param_counts()["scaling"]
    return {"batch_lr_scale": batch, "dmodel_lr_scale": (model.cfg.dim / muon.D_MODEL_REF) ** -0.5,
            "weight_decay": lm.weight_decay * batch * (d_ref / target)}


def nanochat_batch_tokens(lm, model: GPT, ref_model: GPT) -> int:
    """nanochat's automatic batch in tokens (base_train.py step 2): 2^19 x (D / D_ref)^0.383,
    rounded to a power of 2 (kernattn takes lm.batch_size x grad_accum x context instead:
    this is what the paper scale's 2^20 is checked against)."""
    ratio = model.param_counts()["scaling"] / ref_model.param_counts()["scaling"]  # D / D_ref
    return 2 ** round(math.log2(muon.B_REF * ratio**0.383))


def reference_model(model: GPT) -> GPT:
    """The depth-12 model of the same shape rules (meta device: counts only)."""
    cfg = dataclasses.replace(model.cfg, depth=REF_DEPTH, variant="base", attention_options=())
    with torch.device("meta"):
        return GPT(cfg)


def block_matrices(model: GPT) -> dict[int, tuple[torch.nn.Parameter, int]]:
    """id -> (weight, row blocks) of every Linear in the blocks: a fused input projection
    (`proj_in`, d_model rows per W_Q, W_K, W_V) is that many matrices."""
    out = {}
    for blk in model.blocks:
        for name, m in blk.named_modules():
            if isinstance(m, torch.nn.Linear):
                fused = name.endswith("proj_in")
                out[id(m.weight)] = (m.weight, m.weight.shape[0] // model.cfg.dim if fused else 1)
    return out


def muon_adamw_groups(model: GPT, lm, scale: dict[str, float]) -> list[dict]:
    b, w = scale["batch_lr_scale"], scale["dmodel_lr_scale"]
    betas = (lm.adam_beta1, lm.adam_beta2)

    def adamw(params, lr, betas=betas):
        return {"kind": "adamw", "params": list(params), "lr": lr, "betas": betas, "eps": ADAM_EPS,
                "weight_decay": 0.0}

    block_params = [p for blk in model.blocks for p in blk.parameters()]
    matrices = block_matrices(model)
    by_shape: dict[tuple, list] = {}
    for p, chunks in matrices.values():
        by_shape.setdefault((p.shape[0] // chunks, p.shape[1]), []).append((p, chunks))
    groups = [adamw([model.lm_head.weight], lm.unembedding_lr * w * b),
              adamw([model.wte.weight], lm.embedding_lr * w * b),
              adamw([e.weight for e in model.value_embeds.values()], lm.embedding_lr * w * b),
              adamw([model.resid_lambdas], lm.scalar_lr * RESID_LR_FACTOR * b),
              adamw([model.x0_lambdas], lm.scalar_lr * b, X0_BETAS),
              adamw([p for p in block_params if id(p) not in matrices], lm.lr)]  # not nanochat's: unscaled
    for shape in sorted(by_shape):
        params, chunks = zip(*by_shape[shape])
        groups.append({"kind": "muon", "params": list(params), "chunks": list(chunks), "lr": lm.matrix_lr * b,
                       "momentum": muon.muon_momentum(0), "ns_steps": NS_STEPS, "beta2": MUON_BETA2,
                       "weight_decay": scale["weight_decay"]})
    return [g for g in groups if g["params"]]


def build_optimizer(model: GPT, lm, tokens_per_step: int, device: torch.device) -> tuple[torch.optim.Optimizer, dict]:
    """(optimizer, its scalings); every group records its initial lr for the schedule."""
    if lm.optimizer == "adamw":
        decayed = set(model.linear_weights())
        groups = [{"params": [p for n, p in model.named_parameters() if n in decayed], "weight_decay": lm.weight_decay},
                  {"params": [p for n, p in model.named_parameters() if n not in decayed], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=lm.lr, betas=(0.9, 0.95),
                                **({"fused": True} if device.type == "cuda" else {}))
        scale = {"weight_decay": lm.weight_decay}
    else:
        scale = scalings(lm, model, tokens_per_step, reference_model(model))
        opt = muon.MuonAdamW(muon_adamw_groups(model, lm, scale))
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    return opt, scale


def apply_schedule(opt: torch.optim.Optimizer, step: int, total: int, lr_multiplier: float,
                   weight_decay: float) -> None:
    """nanochat's per-step update: every lr times the multiplier; Muon's momentum warm-up and
    decaying weight decay."""
    for g in opt.param_groups:
        g["lr"] = g["initial_lr"] * lr_multiplier
        if g.get("kind") == "muon":
            g["momentum"] = muon.muon_momentum(step)
            g["weight_decay"] = muon.weight_decay_at(step, total, weight_decay)
