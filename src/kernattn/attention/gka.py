"""Gaussian kernel attention (gka-paper): projection-free, one learnable bandwidth per head.

Per head h with features f_i (the head slice of x; optionally rotated by RoPE and RMS-normed,
the paper's nanochat flavour), the kernel is K_ij = exp(-||f_i - f_j||^2 / (2 sigma_h^2)) with
sigma_h = exp(log_sigma_h), masked, row-normalised, and applied to the values x_j^(h) (the
raw head slices: there is no W_V). Only W_O and H scalars are learned.

Fast path (shared/notes/attention-math.md): under row normalisation the factor
exp(-||f_i||^2 / 2 s^2) cancels, so the weights are
    softmax_j(f_i . f_j / s^2 - ||f_j||^2 / (2 s^2)),
i.e. SDPA with q' = [f / s^2, 1], k' = [f, -||f||^2 / (2 s^2)] and scale 1: flash attention,
nothing N x N materialised, causal and window masks unchanged. Two float32 details:
- distances are translation invariant, so f is first shifted by the first token's features
  (a constant of the sequence; detached, since the true derivative through it is zero).
  This removes the catastrophic cancellation of a large shared offset in ||f||^2;
- q', k', v are zero-padded to a common head dim that is a multiple of 8, which the CPU
  flash kernel requires (else SDPA falls back to the math path) and CUDA kernels prefer.
The paper's eps in the denominator is left out: the diagonal term exp(0) = 1 is always
allowed, so a row sum is never below 1.

The initial bandwidth (`init_sigma`; gka-paper gives none): a number, or a named rule
(issue 17). With sigma = 1 and features of unit RMS, squared distances between different
tokens are about 2d, so every off-diagonal kernel value is about exp(-d): GKA starts as the
identity and log sigma gets almost no gradient (kernattn.attention.gka_readings measures it).
The default is "sqrt_d", chosen from the GKA-init study (docs/studies.md): at tiny scale every
larger init beat sigma = 1 in all three tracks, sqrt(d) and the median about equally, and
sqrt(d) needs no data and keeps the fused path's numerics bound (sigma >= sqrt(d) / 2).
- "paper": sigma = 1 (log sigma = 0), the start the papers' rows use (gka-paper gives no value;
  this is the one its log-sigma parametrisation starts from at zero);
- "sqrt_d_half", "sqrt_d": sigma = sqrt(d) / 2, sqrt(d) (d = head dim), fixed at construction;
- "median": data-driven, per head: sigma = the median distance ||f_i - f_j|| between the
  features of different tokens that may attend to each other, measured on the first forward
  pass in training mode (the first training batch), layer by layer (a layer is set on the
  features its input has, which the layers below computed with their bandwidths already
  set). A persistent buffer `sigma_ready` records that it happened, so a run resumed from a
  checkpoint keeps its bandwidths. Before that pass (an evaluation at step 0, say) sigma is
  sqrt(d). At most MEDIAN_PAIRS distances per head are measured (the first batch rows that
  fit), which bounds the memory at long contexts.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .base import KernelAttention, sdpa_flops
from .fused import attend
from .positions import Rope
from .options import DATA_DRIVEN, GKAOptions, initial_log_sigma
from .registry import register

MEDIAN_PAIRS = 1 << 24  # distances per head measured by the median rule (rows of the first batch that fit)


def _keep_rank_0s(t: torch.Tensor) -> None:
    """Under data parallelism each rank measured the median on its own first micro-batch: rank
    0's is kept on every rank (a broadcast, in place), as DDP keeps rank 0's initial weights.
    Rank 0's first micro-batch is the one one process measures (engine/dist.py: shard 0), so
    N ranks start from the bandwidths of one; without it the ranks' bandwidths differ and so
    do their weights from then on. Every rank sets its layers in the same order (the first
    training forward), so the broadcasts pair up."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast(t, src=0)


def median_distance(f: torch.Tensor, allowed: torch.Tensor, max_pairs: int | None = None) -> torch.Tensor:
    """[H]: per head the median of ||f_i - f_j|| over batch rows and the pairs i != j with
    allowed[i, j], for head features f [B, H, N, d]; float64. With `max_pairs`, only the
    first batch rows whose pairs fit in it (at least one row)."""
    pairs = allowed & ~torch.eye(allowed.shape[-1], dtype=torch.bool, device=allowed.device)
    n_pairs = int(pairs.sum())
    if n_pairs == 0:
        raise ValueError("no pair of different tokens may attend to each other: no distance")
    if max_pairs is not None:
        f = f[: max(1, max_pairs // n_pairs)]
    f = f.detach().double()
    dist = torch.cdist(f, f, compute_mode="donot_use_mm_for_euclid_dist")  # exact differences
    per_head = dist[..., pairs].transpose(0, 1).reshape(f.shape[1], -1)  # [H, B * pairs]
    # numpy's median (the mean of the two middle values for an even count); torch.median
    # returns the lower one and torch.quantile refuses more than 2^24 values
    return torch.from_numpy(np.median(per_head.cpu().numpy(), axis=1))


def padded_width(d_head: int) -> int:
    """Head width of the fused call: d + 1 channels rounded up to a multiple of 8."""
    return 8 * math.ceil((d_head + 1) / 8)


def _pad_last(t: torch.Tensor, size: int) -> torch.Tensor:
    return F.pad(t, (0, size - t.shape[-1])) if t.shape[-1] < size else t


def gaussian_attend(q, k, v, log_sigma, *, causal: bool, window: int | None, backend: str = "auto"):
    """softmax_j(-||q_i - k_j||^2 / (2 s_h^2)) v, s_h = exp(log_sigma[h]), as one fused call: the
    identity of the module docstring on q and k shifted by the first key (detached: distances
    do not move, and float32 loses less), padded to padded_width channels. GKA (q = k = the
    input's head slices) and the projected RBF control (rbf.py) both attend through it."""
    d = q.shape[-1]
    origin = k[:, :, :1].detach()
    q, k = q - origin, k - origin
    inv_s2 = torch.exp(-2 * log_sigma).to(q.dtype)[None, :, None, None]
    q_aug = torch.cat((q * inv_s2, torch.ones_like(q[..., :1])), dim=-1)
    k_aug = torch.cat((k, -0.5 * k.pow(2).sum(-1, keepdim=True) * inv_s2), dim=-1)
    width = padded_width(d)
    out = attend(_pad_last(q_aug, width), _pad_last(k_aug, width), _pad_last(v, width),
                 causal=causal, window=window, scale=1.0, backend=backend)
    return out[..., :d]


@register("gka", GKAOptions)
class GKAAttention(KernelAttention):
    window_backend = "auto"
    has_value_projection = False  # the values are x's head slices

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.log_sigma = nn.Parameter(torch.full((n_head,), initial_log_sigma(options.init_sigma, self.d_head)))
        self.rope = Rope(self.d_head, options.rope_base) if options.rope else None
        if options.init_sigma == DATA_DRIVEN:  # only then: other GKA checkpoints keep their keys
            self.register_buffer("sigma_ready", torch.zeros((), dtype=torch.bool))

    def mixing_flops(self, n, keys):
        # Counted at the head width d (gka-paper's Table 8); the fused call runs at the padded width.
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head, width=padded_width(self.d_head))

    @property
    def sigma(self) -> torch.Tensor:
        return self.log_sigma.exp()

    def prepare(self, x):
        v = self.split_heads(x)
        f = v
        if self.rope is not None:
            f = self.rope(f)
        if self.options.qk_norm:
            f = F.rms_norm(f, (self.d_head,))
        if self.training and hasattr(self, "sigma_ready") and not bool(self.sigma_ready):
            self._set_sigma_from(f)
        return SimpleNamespace(f=f, v=v, n=x.shape[1])

    @torch.no_grad()
    def _set_sigma_from(self, f: torch.Tensor) -> None:
        """The median rule, on this forward pass's features (module docstring)."""
        med = median_distance(f, self.allowed(f.shape[2], f.device), MEDIAN_PAIRS)
        if not bool((med > 0).all()):
            raise ValueError("GKA init_sigma=median: a head's features are identical on the first batch "
                             "(median distance 0); give init_sigma a number")
        self.log_sigma.copy_(med.log().to(self.log_sigma))
        _keep_rank_0s(self.log_sigma)
        self.sigma_ready.fill_(True)

    def fast(self, p):
        return gaussian_attend(p.f, p.f, p.v, self.log_sigma, causal=self.causal, window=self.window,
                               backend=self.window_backend)

    def kernel(self, p, allowed):
        # Exact differences (no ||a||^2 + ||b||^2 - 2ab expansion): the reference must not
        # share the fast path's cancellation.
        sq = torch.cdist(p.f, p.f, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
        s2 = torch.exp(2 * self.log_sigma).to(sq.dtype)[None, :, None, None]
        return torch.exp(-sq / (2 * s2))
