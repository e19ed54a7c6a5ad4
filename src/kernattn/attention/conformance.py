"""The conformance suite every attention variant passes, built-in or plugin: one implementation,
run by `kernattn check-variant NAME` and by the suite's parametrised tests on every built-in.

Each check builds the variant small (d_model 32, 4 heads) and returns what it found wrong (an
empty list: it passes):

  reference     fast path == its own explicit kernel through the Nadaraya-Watson reference,
                forward and every gradient (x and each parameter), float64, causal and
                bidirectional (where the variant has that form), with a window where it has one, at N = 1, 17 (no block
                multiple) and 64, a batch of two
  padded        a causal batch of a 17-token sequence right-padded with noise to 32 beside a
                32-token one: the fast path's outputs and gradients at each sequence's own
                positions equal the reference run on that sequence alone (no leak across the
                batch, none from the padding), float64, with a window where the variant has one
  normalised    where the variant claims it: every query's weights sum to 1 over what it may see
  causal        no later position changes an earlier output (the fast path)
  finite        float32 outputs and gradients finite on inputs of scale 1 and 4 (FINITE_SCALES)
  determinism   two forward + backward passes give the same bits
  precision     float32, and bfloat16 autocast as training runs it, within the bounds the variant
                states (precision_bounds(): by default 1e-4 and 5e-2) of the float64 reference
                (relative RMS error of the outputs)
  state_dict    a state dict moves to a newly built module (and to the reference) unchanged
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from . import build
from .reference import allowed_mask
from .registry import make_options, variant

D_MODEL, N_HEAD = 32, 4
LENGTHS = (1, 17, 64)
MASKS = {"causal": (True, None), "causal-w5": (True, 5), "bidir": (False, None), "bidir-w5": (False, 5)}
# Input scales of the finite check: a pre-norm model's attention sees about 1. (FAVOR+'s
# positive random features overflow float32 from about 10: exp of |w.x| grows with it.)
FINITE_SCALES = (1.0, 4.0)


def masks_of(name: str, options: dict) -> dict[str, tuple[bool, int | None]]:
    """The masks the variant has with these options (a window only where it has one)."""
    made = make_options(name, options)
    return {k: (c, w) for k, (c, w) in MASKS.items()
            if (c or made.allows_bidirectional()) and (w is None or made.allows_window(c))}


def perturb(module: torch.nn.Module, seed: int = 0) -> None:
    """Move every parameter off its initial value so that each gradient is exercised (the
    built-ins' bandwidths and decay lengths into the range where they matter at N = 17)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.endswith("log_sigma") and "bank" not in name:  # GKA bandwidth: sigma ~ 2..4
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith("log_length"):  # decay lengths ~ 3..30
                p.copy_(2.3 + 0.5 * noise)
            elif name.endswith("log_tau"):
                p.add_(0.3 * noise)
            elif p.dim() == 2 and "proj" in name:
                p.add_(0.05 * noise)
            else:
                p.add_(0.5 * noise)


def build_pair(name: str, options: dict, causal: bool, window, dtype=torch.float64, d_model=D_MODEL,
               n_head=N_HEAD):
    """(fast, reference) modules of one variant sharing one perturbed state dict."""
    torch.manual_seed(0)
    fast = build(name, d_model=d_model, n_head=n_head, causal=causal, window=window, **options).to(dtype)
    perturb(fast)
    ref = build(name, d_model=d_model, n_head=n_head, causal=causal, window=window, impl="reference",
                **options).to(dtype)
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def grads(module, x, probe):
    """(output, {"x": dx, <param>: grad}) of (module(x) * probe).sum()."""
    x = x.clone().requires_grad_(True)
    module.zero_grad()
    y = module(x)
    (y * probe).sum().backward()
    out = {"x": x.grad}
    out |= {n: p.grad for n, p in module.named_parameters() if p.requires_grad}
    return y.detach(), out


def inputs(n: int, batch: int = 2, dtype=torch.float64, scale: float = 1.0, seed: int | None = None):
    g = torch.Generator().manual_seed(n if seed is None else seed)
    x = scale * torch.randn(batch, n, D_MODEL, generator=g, dtype=torch.float64)
    probe = torch.randn(batch, n, D_MODEL, generator=g, dtype=torch.float64)
    return x.to(dtype), probe.to(dtype)


def compare(a, b, what: str, rtol: float, atol: float) -> list[str]:
    if a is None or b is None:
        return [f"{what}: a gradient is missing on one path"]
    if not torch.isfinite(a).all():
        return [f"{what}: non-finite values in the fast path"]
    bad = (a - b).abs() > atol + rtol * b.abs()
    if bad.any():
        return [f"{what}: differs from the reference by up to {(a - b).abs().max().item():.3g} "
                f"(rtol {rtol:g}, atol {atol:g})"]
    return []


# ----------------------------------------------------------------------------- the checks
def check_reference(name: str, options: dict) -> list[str]:
    problems = []
    for mask, (causal, window) in masks_of(name, options).items():
        for n in LENGTHS:
            fast, ref = build_pair(name, options, causal, window)
            rtol, atol = fast.float64_tolerance()
            x, probe = inputs(n)
            y_fast, g_fast = grads(fast, x, probe)
            y_ref, g_ref = grads(ref, x, probe)
            where = f"{mask}, N={n}"
            problems += compare(y_fast, y_ref, f"output ({where})", rtol, atol)
            for key in sorted(set(g_fast) | set(g_ref)):
                problems += compare(g_fast.get(key), g_ref.get(key), f"gradient of {key} ({where})", rtol, atol)
            if problems:
                return problems  # the first failing shape says enough
    return problems


PADDED = (17, 32)  # the short sequence's length, the batch's


def check_padded(name: str, options: dict) -> list[str]:
    short, n = PADDED
    for mask, (causal, window) in masks_of(name, options).items():
        if not causal:  # no key mask in the interface: padding is invisible only to causal queries
            continue
        fast, ref = build_pair(name, options, causal, window)
        rtol, atol = fast.float64_tolerance()
        x, probe = inputs(n)
        probe[0, short:] = 0.0  # the padding's outputs are discarded, as a loss mask does
        y_batch, g_batch = grads(fast, x, probe)
        alone = []  # each sequence's reference gradients: x's compared here, the parameters' summed below
        for b, length in ((0, short), (1, n)):
            y_alone, g_alone = grads(ref, x[b:b + 1, :length], probe[b:b + 1, :length])
            where = f"{mask}, sequence {b} of {length} in a batch padded to {n}"
            problems = compare(y_batch[b:b + 1, :length], y_alone, f"output ({where})", rtol, atol)
            problems += compare(g_batch["x"][b:b + 1, :length], g_alone["x"], f"gradient of x ({where})", rtol, atol)
            if problems:
                return problems
            alone.append(g_alone)
        for key in sorted(k for k in g_batch if k != "x"):  # a parameter's gradient: the sum over both
            both = None if any(g.get(key) is None for g in alone) else alone[0][key] + alone[1][key]
            problems = compare(g_batch[key], both, f"gradient of {key} ({mask}, padded batch)", rtol, atol)
            if problems:
                return problems
    return []


def check_normalised(name: str, options: dict) -> list[str]:
    if not variant(name).module.normalised:
        return []
    out = []
    for causal in (True, False) if make_options(name, options).allows_bidirectional() else (True,):
        fast, _ = build_pair(name, options, causal, None)
        x, _ = inputs(17)
        with torch.no_grad():
            w = fast.attention_weights(x)
        allowed = allowed_mask(17, causal, None)
        sums = w.masked_fill(~allowed, 0.0).sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), rtol=0, atol=1e-9):
            out.append(f"{'causal' if causal else 'bidirectional'} weights sum to "
                       f"{sums.min().item():.6g}..{sums.max().item():.6g}, not 1 (normalised = True)")
        if (w.masked_select(~allowed.expand_as(w)).abs() > 0).any():
            out.append("weights on positions a query may not see are not 0")
    return out


def check_causal(name: str, options: dict) -> list[str]:
    fast, _ = build_pair(name, options, True, None)
    x, _ = inputs(17)
    t = 8
    later = x.clone()
    later[:, t + 1:] = torch.randn(later[:, t + 1:].shape, generator=torch.Generator().manual_seed(1),
                                   dtype=x.dtype)
    with torch.no_grad():
        a, b = fast(x)[:, : t + 1], fast(later)[:, : t + 1]
    changed = (a - b).abs().max().item()
    return [f"changing positions after {t} changes the outputs up to {t} by {changed:.3g}: a query sees the "
            f"future"] if changed > 1e-12 else []


def check_finite(name: str, options: dict) -> list[str]:
    out = []
    for scale in FINITE_SCALES:
        fast = build_pair(name, options, True, None)[0].float()
        x, probe = inputs(64, dtype=torch.float32, scale=scale)
        y, g = grads(fast, x, probe)
        bad = [k for k, v in g.items() if v is not None and not torch.isfinite(v).all()]
        if not torch.isfinite(y).all():
            out.append(f"non-finite outputs in float32 at input scale {scale:g}")
        if bad:
            out.append(f"non-finite gradient of {', '.join(bad[:3])} in float32 at input scale {scale:g}")
    return out


def check_determinism(name: str, options: dict) -> list[str]:
    fast, _ = build_pair(name, options, True, None)
    x, probe = inputs(17)
    y1, g1 = grads(fast, x, probe)
    y2, g2 = grads(fast, x, probe)
    same = torch.equal(y1, y2) and all(torch.equal(g1[k], g2[k]) for k in g1 if g1[k] is not None)
    return [] if same else ["two identical forward + backward passes differ"]


def check_precision(name: str, options: dict) -> list[str]:
    """float32 as is, bfloat16 as training runs it: float32 weights under autocast."""
    out = []
    fast, ref = build_pair(name, options, True, None)
    x, _ = inputs(64)
    fp32_bound, bf16_bound = fast.precision_bounds()
    with torch.no_grad():
        truth = ref(x)
        low = copy.deepcopy(fast).float()
        for label, bound, autocast in (("float32", fp32_bound, False), ("bfloat16", bf16_bound, True)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                y = low(x.float()).double()
            err = ((y - truth).norm() / truth.norm().clamp_min(1e-30)).item()
            if not err <= bound:
                out.append(f"{label}: relative RMS error {err:.3g} > {bound:g}")
    return out


def check_state_dict(name: str, options: dict) -> list[str]:
    fast, ref = build_pair(name, options, True, None)
    torch.manual_seed(123)
    again = build(name, d_model=D_MODEL, n_head=N_HEAD, causal=True, **options).to(torch.float64)
    again.load_state_dict(fast.state_dict())
    x, _ = inputs(17)
    with torch.no_grad():
        y = fast(x)
        same = torch.equal(y, again(x))
        close = torch.allclose(y, ref(x), rtol=1e-7, atol=1e-9)
    return ([] if same else ["a module loading the state dict computes something else"]) + \
        ([] if close else ["the reference module loading the fast one's state dict computes something else"])


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[str, dict], list[str]]


CHECKS = tuple(Check(n, f) for n, f in (
    ("reference", check_reference), ("padded", check_padded), ("normalised", check_normalised), ("causal", check_causal),
    ("finite", check_finite), ("determinism", check_determinism), ("precision", check_precision),
    ("state_dict", check_state_dict)))


def run_check(check: Check, name: str, options: dict) -> list[str]:
    """The check's problems; an exception it raises is one problem, not a traceback."""
    try:
        return check.run(name, options)
    except Exception as exc:  # noqa: BLE001 -- a variant that crashes fails the check, with its message
        line = next(iter(str(exc).strip().splitlines()), "")
        return [f"raised {type(exc).__name__}: {line}"]
