"""Make tests/golden/nanochat/golden.npz from a nanochat checkout (README.md beside this file).

    git -C /path/to/nanochat checkout c7ba25214276d165eeefca7cb2060587975db189
    python tests/golden/nanochat/make_golden.py /path/to/nanochat tests/golden/nanochat/golden.npz

Runs nanochat's own GPT and MuonAdamW on CPU in float32. The one change to nanochat's code
is made here at run time, not in its files: torch.compile is replaced by the identity before
nanochat is imported, so its fused optimizer kernels run eagerly (their math as written; a
compiled kernel's result depends on the inductor version and the CPU). The learning-rate,
momentum and weight-decay schedules are nanochat's own functions, taken from
scripts/base_train.py's source with ast (running that script would start a training run).
Not a test: pytest collects test_*.py only.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

CONFIG = {"sequence_len": 16, "vocab_size": 300, "n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 128,
          "window_pattern": "SSSL"}
BATCH, STEPS, SEED = 2, 3, 0
SKETCH = 512  # entries sampled per large tensor (gradients, weights after the steps)
# base_train.py's defaults at c7ba252, with its batch-size and horizon scalings at 1 (a
# total batch of B_REF tokens at the reference horizon) so the three steps move the weights.
OPTIM = {"unembedding_lr": 0.004, "embedding_lr": 0.3, "matrix_lr": 0.02, "weight_decay": 0.2,
         "adam_betas": (0.8, 0.95), "scalar_lr": 0.5}
SCHEDULE_ARGS = {"warmup_ratio": 0.0, "warmdown_ratio": 0.5, "final_lr_frac": 0.0}


def schedule_functions(nanochat: Path, num_iterations: int, weight_decay: float) -> dict:
    """get_lr_multiplier, get_muon_momentum, get_weight_decay from base_train.py's source."""
    tree = ast.parse((nanochat / "scripts" / "base_train.py").read_text())
    wanted = {"get_lr_multiplier", "get_muon_momentum", "get_weight_decay"}
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {n.name for n in nodes} == wanted, "base_train.py lacks a schedule function"
    ns = {"args": SimpleNamespace(**SCHEDULE_ARGS), "num_iterations": num_iterations,
          "weight_decay_scaled": weight_decay}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "base_train.py", "exec"), ns)  # noqa: S102 (nanochat's own functions)
    return {k: ns[k] for k in wanted}


def perturb_zeros(model) -> None:
    """Random values in the matrices nanochat starts at zero (both c_proj, ve_gate: half c_q's
    uniform bound) and an lm_head of c_q's scale (nanochat's std 0.001 gives logits below
    0.05, where a 1e-5 tolerance would be loose). With the zeros every block is the identity,
    the residual scalars' gradients are zero up to rounding, and AdamW's eps of 1e-10 turns
    that rounding noise into full steps: the golden steps would compare noise."""
    gen = torch.Generator().manual_seed(SEED + 1)
    bound = 3 ** 0.5 * CONFIG["n_embd"] ** -0.5  # the uniform bound of c_q
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("c_proj.weight", "ve_gate.weight")):
                p.copy_(torch.empty_like(p).uniform_(-bound / 2, bound / 2, generator=gen))
            elif name == "lm_head.weight":
                p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=gen))


def quantise(state: dict) -> tuple[dict, dict]:
    """Each tensor on a per-tensor 4-bit grid (q in -7..7 times a float32 scale): the stored
    init, two values a byte (pack_nibbles); the test rebuilds it as q.float() * scale."""
    q, scale = {}, {}
    for k, v in state.items():
        s = (v.abs().max() / 7).float()
        s = s if s > 0 else torch.tensor(1.0)
        q[k] = torch.round(v / s).clamp(-7, 7).to(torch.int8)
        scale[k] = s
    return q, scale


def pack_nibbles(q: torch.Tensor) -> np.ndarray:
    """int8 values in -7..7 -> uint8 bytes holding two (q + 8), high nibble first."""
    flat = (q.reshape(-1).numpy().astype(np.int16) + 8).astype(np.uint8)
    flat = np.concatenate([flat, np.full(len(flat) % 2, 8, np.uint8)])
    return (flat[0::2] << 4) | flat[1::2]


def sketch(prefix: str, tensors: dict, out: dict) -> None:
    """Small tensors whole; large ones as SKETCH sampled entries, their sum and sum of squares.
    The vocabulary tables without nanochat's padding rows (kernattn has none)."""
    for k, v in tensors.items():
        if re.match(r"^(transformer\.wte|value_embeds\.\d+|lm_head)\.weight$", k):
            v = v[: CONFIG["vocab_size"]]
        flat = v.detach().reshape(-1).float().clone()  # a copy: the weights change later
        if flat.numel() <= SKETCH:
            out[f"{prefix}/{k}"] = flat.numpy()
            continue
        idx = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(7))[:SKETCH].sort().values
        out[f"{prefix}_idx/{k}"] = idx.numpy().astype(np.int32)
        out[f"{prefix}/{k}"] = flat[idx].numpy()
        out[f"{prefix}_sums/{k}"] = np.array([flat.double().sum().item(), flat.double().square().sum().item()])


def synthetic_grad(p: torch.Tensor, step: int) -> torch.Tensor:
    """A gradient that is a fixed elementwise function of the weights: two implementations
    given the same weights get bitwise the same gradients, so their optimisers can be
    compared without the model's float32 rounding (which the bfloat16 Polar Express amplifies)."""
    return torch.sin(p * 7.0 + step) * 1e-3


def train(model, fns, x, y, out: dict, model_grads: bool) -> tuple[np.ndarray, np.ndarray]:
    """STEPS steps of nanochat's MuonAdamW under base_train.py's schedules; (losses, schedule)."""
    opt = model.setup_optimizer(**OPTIM)
    names = {id(p): n for n, p in model.named_parameters()}
    out["groups"] = np.array(json.dumps([{**{k: v for k, v in g.items() if k != "params"},
                                          "params": [names[id(p)] for p in g["params"]]}
                                         for g in opt.param_groups]))
    losses, sched = [], []
    for step in range(STEPS):
        if model_grads:
            loss = model(x[step], y[step])
            loss.backward()
            losses.append(loss.item())
            if step == 0:
                sketch("grad", {n: p.grad for n, p in model.named_parameters()}, out)
        else:
            for p in model.parameters():
                p.grad = synthetic_grad(p.detach(), step)
        lrm, mom, wd = fns["get_lr_multiplier"](step), fns["get_muon_momentum"](step), fns["get_weight_decay"](step)
        sched.append((lrm, mom, wd))
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lrm
            if group["kind"] == "muon":
                group["momentum"], group["weight_decay"] = mom, wd
        opt.step()
        model.zero_grad(set_to_none=True)
    return np.array(losses), np.array(sched)


def main(nanochat: Path, out_path: Path) -> None:
    torch.compile = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)  # eager (see above)
    sys.path.insert(0, str(nanochat))
    from nanochat.gpt import GPT, GPTConfig

    torch.manual_seed(SEED)
    with torch.device("meta"):
        model = GPT(GPTConfig(**CONFIG))
    model.to_empty(device="cpu")
    model.init_weights()
    perturb_zeros(model)
    q, scale = quantise(model.state_dict())
    init = {k: q[k].float() * scale[k] for k in q}
    model.load_state_dict(init)
    out: dict = {"config": np.array(json.dumps(CONFIG))}
    for k in q:
        out[f"init/{k}"], out[f"scale/{k}"] = pack_nibbles(q[k]), scale[k].numpy()
        out[f"shape/{k}"] = np.array(q[k].shape)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, CONFIG["vocab_size"], (STEPS, BATCH, CONFIG["sequence_len"] + 1), generator=gen)
    x, y = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
    out["x"], out["y"] = x.numpy().astype(np.int16), y.numpy().astype(np.int16)
    with torch.no_grad():
        out["logits"] = model(x[0]).numpy()

    state0 = {k: v.clone() for k, v in model.state_dict().items()}
    fns = schedule_functions(nanochat, STEPS, OPTIM["weight_decay"])
    out["losses"], out["schedule"] = train(model, fns, x, y, out, model_grads=True)
    sketch("after", model.state_dict(), out)
    model.load_state_dict(state0)
    train(model, fns, x, y, out, model_grads=False)
    sketch("after_synthetic", model.state_dict(), out)
    np.savez_compressed(out_path, **out)
    print(f"wrote {out_path} ({out_path.stat().st_size:,} bytes); losses {out['losses']}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
