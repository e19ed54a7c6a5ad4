"""Gaussian process attention: a bank of M positional kernels per head (gpa-short and gpa-long).

G(lag) = sum_m D_m(lag) P_m(lag), lag = |n - i|, with
    D_m = sigma_m^2 exp(-lag / l_m)                 (decay, eq. 4)
    P_m = exp(-2 alpha_m^2 sin^2(lag / tau_m))      (periodic, eq. 3; its period is pi tau_m)
combined with the dot-product logits either
    mult (gpa-short, eq. 6): weights proportional to G(lag) exp(q.k / sqrt(d)),  i.e. logits + log G
    add  (gpa-long, eq. 6): softmax(G(lag) + q.k / sqrt(d)).

Parametrisation: sigma, l and tau are stored as logs (sigma = exp(log_sigma) etc.), so they
stay positive under any gradient step and log G is a logsumexp over m of
2 log_sigma - lag / l - 2 alpha^2 sin^2(lag / tau), never the log of a sum that can underflow.
alpha enters squared and is stored as is. Extra parameters: 4M per head (decay_periodic) or
2M per head (decay). Defaults are gpa-long's: alpha = 1, sigma = 1, l = 150, tau evenly
spaced in [4, 192].
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from . import reference
from .base import KernelAttention, sdpa_flops
from .fused import attend
from .positions import LagBias, Rope, lag_index, normalise_qk
from .options import GPAOptions
from .registry import register


class KernelBank(LagBias):
    """The per-head bank G_h(lag); `bias` returns G (add) or log G (mult)."""

    def __init__(self, n_head: int, opts: GPAOptions):
        super().__init__()
        m = opts.n_kernels
        self.periodic = opts.kernel == "decay_periodic"
        self.log_domain = opts.combine == "mult"
        self.log_sigma = nn.Parameter(torch.full((n_head, m), math.log(opts.init_sigma)))
        self.log_length = nn.Parameter(torch.full((n_head, m), math.log(opts.init_length)))
        if self.periodic:
            self.alpha = nn.Parameter(torch.full((n_head, m), float(opts.init_alpha)))
            tau = torch.linspace(opts.init_tau[0], opts.init_tau[1], m)
            self.log_tau = nn.Parameter(tau.log().expand(n_head, m).clone())

    def log_terms(self, lag: torch.Tensor) -> torch.Tensor:
        """[H, M, L]: log of sigma_m^2 exp(-lag/l_m) P_m(lag) on a flat lag vector."""
        work = torch.promote_types(self.log_sigma.dtype, torch.float32)  # never evaluate in bf16
        lag = lag.abs().to(work)[None, None, :]
        log_sigma, log_length = self.log_sigma.to(work), self.log_length.to(work)
        t = 2 * log_sigma[..., None] - lag / log_length.exp()[..., None]
        if self.periodic:
            alpha, tau = self.alpha.to(work), self.log_tau.to(work).exp()
            t = t - 2 * alpha[..., None] ** 2 * torch.sin(lag / tau[..., None]) ** 2
        return t

    def table(self, n, device):
        # G depends on |lag|: evaluate lags 0..n-1 once and mirror them onto -(n-1)..-1.
        half = self.bias(torch.arange(n, device=device))
        return torch.cat((half[:, 1:].flip(-1), half), dim=-1)

    def bias(self, lag):
        # Reduce over m on the [H, M, L] table, never on an [H, M, n, n] grid.
        terms = self.log_terms(lag.reshape(-1))
        flat = torch.logsumexp(terms, dim=1) if self.log_domain else terms.exp().sum(1)
        return flat.reshape(-1, *lag.shape)

    def bank(self, lag: torch.Tensor) -> torch.Tensor:
        """G on any lag tensor, written as the explicit sum of eq. 5 (the reference)."""
        lag = lag.abs().to(self.log_sigma.dtype)
        total = 0.0
        for m in range(self.log_sigma.shape[1]):
            sigma = self.log_sigma[:, m].exp().view(-1, *([1] * lag.dim()))
            length = self.log_length[:, m].exp().view_as(sigma)
            term = sigma**2 * torch.exp(-lag / length)
            if self.periodic:
                alpha = self.alpha[:, m].view_as(sigma)
                tau = self.log_tau[:, m].exp().view_as(sigma)
                term = term * torch.exp(-2 * alpha**2 * torch.sin(lag / tau) ** 2)
            total = total + term
        return total

    def parameters_table(self) -> dict[str, torch.Tensor]:
        """Per-kernel parameters in natural units ([H, M] each), for analysis."""
        out = {"sigma": self.log_sigma.exp(), "length": self.log_length.exp()}
        if self.periodic:
            out |= {"alpha": self.alpha, "tau": self.log_tau.exp(), "period": math.pi * self.log_tau.exp()}
        return {k: v.detach() for k, v in out.items()}


@register("gpa", GPAOptions)
class GPAAttention(KernelAttention):
    bias_backend = "auto"

    def __init__(self, d_model, n_head, causal, window, impl, options):
        super().__init__(d_model, n_head, causal, window, impl, options)
        self.proj_in = nn.Linear(d_model, 3 * d_model, bias=options.bias)
        self.rope = Rope(self.d_head, options.rope_base) if options.rope else None
        self.bank = KernelBank(n_head, options)

    def prepare(self, x, offset: int = 0):
        """q, k, v of x; `offset` is the position of x's first token (cached decoding feeds
        new tokens alone: kernattn.tracks.char.analysis.sampling)."""
        q, k, v = self.split_qkv(x)
        if self.rope is not None:
            q, k = self.rope(q, offset), self.rope(k, offset)
        q, k = normalise_qk(q, k, self.options.qk_norm, self.options.qk_gain)
        return SimpleNamespace(q=q, k=k, v=v, n=x.shape[1])

    def mixing_flops(self, n, keys):
        # The bank adds a bias to the logits: elementwise work, no matmul.
        return sdpa_flops(n, keys, self.n_head, self.d_head, self.d_head)

    def fast(self, p):
        table = self.bank.table(p.n, p.q.device)
        return attend(p.q, p.k, p.v, causal=self.causal, window=self.window,
                      bias_table=table, backend=self.bias_backend)

    def kernel(self, p, allowed):
        logits = p.q @ p.k.transpose(-1, -2) / math.sqrt(self.d_head)
        G = self.bank.bank(reference.lag_grid(p.n, p.q.device)).to(logits.dtype)  # [H, n, n]
        if self.options.combine == "add":
            return reference.exp_kernel(logits + G, allowed)
        return G * reference.exp_kernel(logits, allowed)
