"""nanochat c7ba252's MuonAdamW, one device: Muon for the blocks' matrices, AdamW for the rest.

Muon, per group of same-shaped matrices stacked into one [K, m, n] tensor (each matrix is
treated alone: every reduction below is per matrix, so the math does not depend on how the
K matrices are split among ranks, which is what a sharded version needs):
1. Nesterov momentum: buf <- lerp(buf, g, 1 - mu); u = lerp(g, buf, mu).
2. Polar Express (Amsel et al. 2025, arXiv 2505.16932): u / (1.02 ||u||_F + 1e-6), then five
   odd quintic steps X <- a X + (b A + c A^2) X with A = X X^T (X^T X, right-multiplied, for
   tall matrices) and the coefficients below: X approaches the polar factor U V^T of u.
3. NorMuon (arXiv 2510.05491): a factored second moment per row (m >= n) or per column,
   v <- lerp(v, mean(X^2 over the other dim), 1 - beta2); X is scaled by v^-1/2 and then
   rescaled to keep its Frobenius norm.
4. Cautious weight decay: W <- W - lr' X - lr' wd W [X W >= 0] with lr' = lr sqrt(max(1, m/n)),
   decaying only the entries the update moves toward zero.
AdamW: decoupled decay, lerp moments, bias corrections, eps added to the root (nanochat's
fused kernel written out).

Precision. nanochat runs steps 2-4 in bfloat16, and so does this code wherever bfloat16 is
native (CUDA; CPUs with AVX512-BF16 or AMX): there it is nanochat's arithmetic, rounding
included (tests/test_nanochat_golden.py). A CPU without bf16 instructions would run those
matmuls in a generic kernel 40 to 60 times slower than float32 (issue 47: 45 s against 1 s
for one 1280 x 1280 Polar Express), so there steps 2-4 run in float32 (hardware.compute_dtype).
That is a numerical change, not a different algorithm: float32 lands nearer the exact
iteration, whose bfloat16 rounding moves a Muon update by a few percent (the golden test
measures and bounds it). MuonAdamW(polar_dtype=...) fixes the dtype instead, for tests.

The step per parameter group reads the group's `lr`, `momentum` and `weight_decay`, which
the LM track sets every step (schedule(), below), as nanochat's base_train does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...hardware import compute_dtype

# Polar Express coefficients for 5 iterations, safety factor 2e-2, cushion 2 (the paper's).
POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
B_REF = 2**19  # nanochat's reference batch in tokens (tuned at depth 12)
D_MODEL_REF = 768  # the model width nanochat's AdamW learning rates were tuned at
MOMENTUM_WARMUP = (0.85, 0.95, 300)  # Muon momentum from 0.85 to 0.95 over the first 300 steps


def polar_express(g: Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> Tensor:
    """The approximate polar factor of each matrix of g [..., m, n], computed in `dtype`
    (None: bfloat16 where g's device has it natively, float32 elsewhere)."""
    x = g.to(dtype or compute_dtype(g.device))
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-6)
    tall = g.size(-2) > g.size(-1)
    for a, b, c in POLAR_EXPRESS[:steps]:
        gram = x.mT @ x if tall else x @ x.mT  # the smaller Gram matrix
        poly = b * gram + c * (gram @ gram)
        x = a * x + (x @ poly if tall else poly @ x)
    return x


def normuon_scale(x: Tensor, second: Tensor, beta2: float, dim: int) -> Tensor:
    """NorMuon: x scaled per row/column by the running second moment (updated in place),
    then rescaled to its own Frobenius norm."""
    beta2_t = torch.tensor(beta2, dtype=torch.float32).to(x.dtype)  # nanochat: beta2 in x's dtype
    mean_sq = x.float().square().mean(dim=dim, keepdim=True)
    size = x.size(dim)
    norm_before = (mean_sq.sum(dim=(-2, -1), keepdim=True) * size).sqrt()
    second.lerp_(mean_sq.to(second.dtype), 1 - beta2_t)
    inv = second.clamp_min(1e-10).rsqrt()
    norm_after = ((mean_sq * size) * inv.float().square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return x * (inv * (norm_before / norm_after.clamp_min(1e-10))).to(x.dtype)


def muon_update(grads: Tensor, params: Tensor, buf: Tensor, second: Tensor, *, lr: float, momentum: float,
                weight_decay: float, beta2: float, ns_steps: int, dtype: torch.dtype | None = None) -> None:
    """One Muon step on stacked matrices (params, buf and second updated in place); the
    Polar Express, NorMuon and the update in `dtype` (None: polar_express's choice)."""
    mu = torch.tensor(momentum, dtype=torch.float32).to(grads.dtype)
    buf.lerp_(grads, 1 - mu)
    u = grads.lerp(buf, mu)
    x = polar_express(u, ns_steps, dtype)
    x = normuon_scale(x, second, beta2, -1 if grads.size(-2) >= grads.size(-1) else -2)
    # nanochat rounds lr and wd to the update's dtype (bfloat16 there) before using them.
    lr_t = torch.tensor(lr, dtype=torch.float32).to(x.dtype)
    wd_t = torch.tensor(weight_decay, dtype=torch.float32).to(x.dtype)
    toward_zero = (x * params) >= 0
    params.sub_(lr_t * x + lr_t * wd_t * params * toward_zero)


def adamw_update(p: Tensor, g: Tensor, state: dict, *, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float) -> None:
    """One AdamW step in place (float32 scalars, nanochat's order of operations)."""
    state["step"] += 1
    f32 = {"dtype": torch.float32}
    lr_t, b1, b2 = torch.tensor(lr, **f32), torch.tensor(betas[0], **f32), torch.tensor(betas[1], **f32)
    p.mul_(1 - lr_t * torch.tensor(weight_decay, **f32))
    state["exp_avg"].lerp_(g, 1 - b1)
    state["exp_avg_sq"].lerp_(g.square(), 1 - b2)
    step = torch.tensor(float(state["step"]), **f32)
    denom = (state["exp_avg_sq"] / (1 - b2 ** step)).sqrt() + torch.tensor(eps, **f32)
    p.add_(state["exp_avg"] / denom, alpha=-(lr_t / (1 - b1 ** step)))


def matrices(group: dict, of) -> list[Tensor]:
    """The group's matrices: each parameter's `of` (itself or its grad) cut into its `chunks`
    equal row blocks (a fused W_Q|W_K|W_V is three matrices, as nanochat's c_q, c_k, c_v)."""
    chunks = group.get("chunks") or [1] * len(group["params"])
    return [m for p, c in zip(group["params"], chunks) for m in of(p).chunk(c, dim=0)]


class MuonAdamW(torch.optim.Optimizer):
    """Groups of kind 'adamw' (lr, betas, eps, weight_decay) or 'muon' (lr, momentum,
    weight_decay, beta2, ns_steps, optionally chunks: row blocks per parameter; all its
    matrices of one shape). `polar_dtype`: Muon's working dtype (None: by the device)."""

    def __init__(self, param_groups: list[dict], polar_dtype: torch.dtype | None = None):
        super().__init__(param_groups, defaults={})
        self.polar_dtype = polar_dtype
        for g in self.param_groups:
            if g["kind"] == "muon" and len({m.shape for m in matrices(g, lambda p: p)}) > 1:
                raise ValueError("a muon group holds matrices of one shape")

    def _adamw(self, group: dict) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            adamw_update(p, p.grad, state, lr=group["lr"], betas=group["betas"], eps=group["eps"],
                         weight_decay=group["weight_decay"])

    def _muon(self, group: dict) -> None:
        views = matrices(group, lambda p: p.detach())
        first = group["params"][0]
        state = self.state[first]  # the group's stacked buffers live with its first parameter
        k, (m, n) = len(views), views[0].shape
        if not state:
            state["momentum_buffer"] = torch.zeros(k, m, n, dtype=first.dtype, device=first.device)
            shape = (k, m, 1) if m >= n else (k, 1, n)
            state["second_momentum_buffer"] = torch.zeros(shape, dtype=first.dtype, device=first.device)
        stacked = torch.stack(views)
        muon_update(torch.stack(matrices(group, lambda p: p.grad)), stacked, state["momentum_buffer"],
                    state["second_momentum_buffer"], lr=group["lr"] * max(1.0, m / n) ** 0.5,
                    momentum=group["momentum"], weight_decay=group["weight_decay"], beta2=group["beta2"],
                    ns_steps=group["ns_steps"], dtype=self.polar_dtype)
        torch._foreach_copy_(views, list(stacked.unbind(0)))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            if group["kind"] == "adamw":
                self._adamw(group)
            elif group["kind"] == "muon":
                if group["params"]:
                    self._muon(group)
            else:
                raise ValueError(f"unknown optimizer group kind {group['kind']!r}; valid: adamw, muon")


def muon_momentum(step: int) -> float:
    """nanochat's Muon momentum warm-up: 0.85 -> 0.95 linearly over the first 300 steps."""
    lo, hi, steps = MOMENTUM_WARMUP
    frac = min(step / steps, 1.0)
    return (1 - frac) * lo + frac * hi


def weight_decay_at(step: int, total: int, weight_decay: float) -> float:
    """nanochat's Muon weight decay: linear from its (scaled) value to 0 at the last step."""
    return weight_decay * (1 - step / total)
