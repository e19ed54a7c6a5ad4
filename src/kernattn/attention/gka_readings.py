"""GKA's bandwidth at initialisation, measured (issue 17, section 2; gka-paper gives no init).

With sigma = 1 and head features of unit RMS (qk_norm, or LayerNorm output), the squared
distance between two different tokens is about 2 d (d = head dim), so every off-diagonal
kernel value is about exp(-d) and GKA starts as the identity: each token attends to itself.
This module measures that on any model holding GKA attention modules (char, LM or vision):

- `mean_diagonal_weight`: per GKA layer and head, the attention weight a token gives itself,
  averaged over batch rows and over the query positions that have more than one allowed key
  (under the causal mask the first position's weight on itself is 1 by construction and is
  left out).
  The report's identity rule (issue 37, kernattn.report.gka_state.run_diagonal) reads the same
  measurement on a finished run's checkpoint, averaged over layers and heads.
- `gradient_norms`: the gradient reaching log sigma against the one reaching W_O. At sigma = 1
  the first is orders of magnitude smaller (exactly 0 when W_O is 0): sigma moves only
  because Adam normalises its step.
- `data_driven_log_sigma`: the median heuristic, sigma_h = the median distance
  ||f_i - f_j|| between the head features of different tokens i != j that may attend to each
  other, over the first batch; then a pair at the median distance gets the kernel value
  exp(-1/2). Layer by layer: a layer's features depend on the bandwidths below it, so layer l
  is measured after layers 1..l-1 are set.
"""

from __future__ import annotations

import contextlib
import numpy as np
import torch
from torch import nn

from . import gka
from .gka import GKAAttention
from .options import initial_log_sigma


def gka_modules(model: nn.Module) -> list[GKAAttention]:
    """The GKA attention modules of `model` (itself included) in forward order of definition."""
    found = [m for m in model.modules() if isinstance(m, GKAAttention)]
    if not found:
        raise ValueError(f"{type(model).__name__} has no GKA attention module")
    return found


def sigmas(model: nn.Module) -> list[list[float]]:
    """[GKA layers][heads]: each GKA head's bandwidth sigma."""
    return [m.sigma.detach().float().cpu().tolist() for m in gka_modules(model)]


@contextlib.contextmanager
def _capture_inputs(modules):
    """Within the block, the input x of each module's last forward call: inputs[i]."""
    inputs: dict[int, torch.Tensor] = {}

    def hook_for(i):
        def keep(module, args):
            inputs[i] = args[0].detach()
        return keep

    handles = [m.register_forward_pre_hook(hook_for(i)) for i, m in enumerate(modules)]
    try:
        yield inputs
    finally:
        for h in handles:
            h.remove()


def _inputs_of(modules, run) -> list[torch.Tensor]:
    with _capture_inputs(modules) as inputs, torch.no_grad():
        run()
    if len(inputs) != len(modules):
        raise ValueError("run() made no forward pass through every GKA module")
    return [inputs[i] for i in range(len(modules))]


@torch.no_grad()
def mean_diagonal_weight(model: nn.Module, run) -> np.ndarray:
    """[GKA layers, heads]: mean weight of each token on itself over the inputs of `run()`."""
    modules = gka_modules(model)
    out = []
    for attn, x in zip(modules, _inputs_of(modules, run)):
        w = attn.attention_weights(x)  # [B, H, N, N]
        rows = attn.allowed(x.shape[1], x.device).sum(-1) > 1
        diag = torch.diagonal(w, dim1=-2, dim2=-1)[..., rows]  # [B, H, rows]
        out.append(diag.double().mean(dim=(0, 2)).cpu().numpy())
    return np.stack(out)


def gradient_norms(model: nn.Module, loss_fn) -> list[dict]:
    """Per GKA layer: |d loss / d log sigma| per head and its norm, and the norm of d loss / d W_O,
    for `loss_fn()` (a scalar loss of `model`). Gradients of the model are cleared before and after."""
    modules = gka_modules(model)
    model.zero_grad(set_to_none=True)
    loss_fn().backward()
    out = []
    for attn in modules:
        g_sigma = attn.log_sigma.grad
        g_out = attn.proj_out.weight.grad
        g_sigma = torch.zeros_like(attn.log_sigma) if g_sigma is None else g_sigma.detach()
        out.append({"log_sigma": g_sigma.abs().double().cpu().numpy(), "log_sigma_norm": float(g_sigma.norm()),
                    "w_o_norm": 0.0 if g_out is None else float(g_out.norm())})
    model.zero_grad(set_to_none=True)
    return out


def median_distance(f: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """[H]: per head the median of ||f_i - f_j|| over batch rows and the pairs i != j with
    allowed[i, j], for head features f [B, H, N, d]; float64 (the rule GKA's init_sigma=median
    applies: kernattn.attention.gka.median_distance, every row)."""
    return gka.median_distance(f, allowed)


def data_driven_log_sigma(model: nn.Module, run, apply: bool = True) -> list[torch.Tensor]:
    """Per GKA layer [H]: log of the median feature distance on the inputs of `run()` (the first
    batch), layer by layer (module docstring); written into log_sigma when `apply`."""
    modules = gka_modules(model)
    saved = [m.log_sigma.detach().clone() for m in modules]
    values = []
    for i, attn in enumerate(modules):
        x = _inputs_of(modules, run)[i]
        with torch.no_grad():
            f = attn.prepare(x).f
            med = median_distance(f, attn.allowed(x.shape[1], x.device))
        if not bool((med > 0).all()):
            raise ValueError(f"GKA layer {i + 1}: a head's median feature distance is 0 (identical features)")
        values.append(med.log().to(attn.log_sigma.dtype))
        with torch.no_grad():
            attn.log_sigma.copy_(values[-1])
    if not apply:
        with torch.no_grad():
            for m, s in zip(modules, saved):
                m.log_sigma.copy_(s)
    return values


def named_log_sigma(name: str, d_head: int) -> float:
    """log sigma of a named init of the ablation at construction (kernattn.attention.options'
    rules: "sqrt_d_half", "sqrt_d"; "median" is data-driven, above, and starts at sqrt(d))."""
    return initial_log_sigma(name, d_head)
