"""The models `kernattn bench` measures, as bench.models.Case objects, one builder per family.

`size` picks the shapes: "paper" is the papers' (DeiT-Ti/S/B at 224 px, the char GPT of seeds
000/001 at ctx 256, the nanochat LM at depth 12 and sequence 2048); "small" shrinks the same
models so that the stage runs on a CPU in the tiny DAG (and in CI) in well under two minutes.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ..config import Params, Row
from ..models.gpt import GPT
from .models import Case

CHAR_VOCAB = 93  # the Dickens symbol set (data/dickens.py); the bench needs no prepared data
CHAR_BASELINE = "rope"


def char_gpt_cases(params: Params, rows: tuple[str, ...], size: str) -> list[Case]:
    """The char-level GPT of seeds 000/001 with each requested matrix row's attention: the model
    section of params.yaml's paper defaults at size "paper", the chosen scale's at "small"."""
    model = params.model if size == "small" else _paper_model(params)
    specs = {r.name: r for r in params.matrix.rows}
    missing = [r for r in rows if r not in specs]
    if missing:
        raise ValueError(f"bench.char_rows: unknown matrix row(s) {', '.join(missing)}; "
                         f"rows: {', '.join(specs)}")
    ctx = model.context
    shape = f"ctx{ctx} d{model.d_model} {model.n_layer}x{model.n_head}"

    def case(spec: Row) -> Case:
        def batch(b: int, device: torch.device) -> tuple:
            g = torch.Generator().manual_seed(b)
            seq = torch.randint(0, CHAR_VOCAB, (b, ctx + 1), generator=g).to(device)
            return seq[:, :-1], seq[:, 1:]
        return Case(family="char_gpt", model=f"char-{spec.name}", variant=spec.label or spec.name, shape=shape, unit="tok",
                    items_per_sample=ctx, build=lambda: GPT(CHAR_VOCAB, model, spec.variant, spec.options),
                    batch=batch, loss=lambda m, xy: m.loss(*xy), forward=lambda m, xy: m(xy[0]),
                    baseline=None if spec.name == CHAR_BASELINE else f"char-{CHAR_BASELINE}")
    ordered = sorted(rows, key=lambda r: r != CHAR_BASELINE)  # the baseline first
    return [case(specs[r]) for r in ordered]


def _paper_model(params: Params):
    """The paper defaults of the model section (params.yaml without the scale's overrides)."""
    from ..config import load_params
    return load_params(params.path, "paper").model
