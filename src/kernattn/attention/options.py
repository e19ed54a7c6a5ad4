"""Every attention variant's options and its entry in the catalogue, without torch.

Loading params.yaml validates every row's variant and options (config/rows.py), and the
Snakefile loads params.yaml each time Snakemake parses it: once per `snakemake` command and
twice per SLURM job (the job script and its job step). What validation needs is here, so it
costs no `import torch` (about 1.2 s of a 2.7 s parse); the modules that compute attention
(softmax.py, gpa.py, gka.py, kernels.py, linear.py) import their options from here and are
imported by the registry only when a variant is built.

SPECS: variant name -> (options dataclass, one-line summary, module that registers its class).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


def choice(default: Any, choices: tuple, doc: str = ""):
    """A dataclass field restricted to `choices`."""
    return dataclasses.field(default=default, metadata={"choices": choices, "doc": doc})


def positive(default: Any, doc: str = ""):
    """A numeric dataclass field that must be > 0."""
    return dataclasses.field(
        default=default,
        metadata={"check": lambda v: None if v > 0 else "must be > 0", "doc": doc},
    )


class VariantOptions:
    """What a variant's options alone decide about it (no module built)."""

    def position_scheme(self) -> str | None:
        """The relative-position form applied along the 1-D token order (None: none), as the
        built module's KernelAttention.position_scheme says it."""
        return None

    def allows_window(self, causal: bool) -> bool:
        """Whether the variant has a sliding-window form with these options."""
        return True

    def allows_bidirectional(self) -> bool:
        """Whether the variant has a bidirectional form (the ViT's): a gate or a position
        count summed from the sequence start (FoX, CoPE, FIRE) has only a causal one."""
        return True


# softmax.py: softmax and the value-less ablation
POSITIONS = ("none", "rope", "learned_rope", "alibi", "t5", "lag_table", "kerple_log", "kerple_power")


@dataclass(frozen=True)
class SoftmaxOptions(VariantOptions):
    position: str = choice("rope", POSITIONS, "relative-position scheme")
    rope_base: float = positive(10000.0, "RoPE base (rope, learned_rope)")
    bias: bool = False  # biases on W_Q, W_K, W_V (the blog's routing head needs them)
    max_len: int = positive(2048, "longest sequence (lag_table)")
    t5_buckets: int = positive(32, "number of T5 buckets")
    t5_max_distance: int = positive(128, "distance of the last T5 bucket")
    qk_norm: bool = False  # parameter-free RMS norm of each head's q and k, after RoPE (nanochat)
    qk_gain: float = positive(1.0, "q and k are multiplied by it after qk_norm (nanochat a825e63: 1.2)")

    def position_scheme(self) -> str | None:
        return None if self.position == "none" else self.position


# gpa.py: the kernel bank
def _tau_range_ok(v):
    return None if 0 < v[0] <= v[1] else "must be (low, high) with 0 < low <= high"


@dataclass(frozen=True)
class GPAOptions(VariantOptions):
    n_kernels: int = positive(64, "kernels per head (M)")
    kernel: str = choice("decay_periodic", ("decay", "decay_periodic"), "bank components")
    combine: str = choice("add", ("add", "mult"), "add: softmax(G + logits), mult: G * exp(logits)")
    rope: bool = False
    rope_base: float = positive(10000.0)
    bias: bool = False
    init_alpha: float = 1.0
    init_sigma: float = positive(1.0)
    init_length: float = positive(150.0)
    init_tau: tuple[float, float] = field(default=(4.0, 192.0), metadata={"check": _tau_range_ok})
    qk_norm: bool = False  # nanochat's RMS norm of q and k after RoPE (softmax.py)
    qk_gain: float = positive(1.0, "q and k are multiplied by it after qk_norm")

    def position_scheme(self) -> str | None:
        return f"kernel bank ({self.combine})" + (" + rope" if self.rope else "")


# gka.py: the initial bandwidth (gka.py's docstring says why each rule)
SIGMA_RULES = ("paper", "sqrt_d_half", "sqrt_d", "median")
DEFAULT_INIT_SIGMA = "sqrt_d"  # the GKA-init study's choice
DATA_DRIVEN = "median"


def _check_init_sigma(value) -> str | None:
    if isinstance(value, str):
        return None if value in SIGMA_RULES else f"must be a number > 0 or one of {', '.join(SIGMA_RULES)}"
    return None if value > 0 else "must be > 0"


@dataclass(frozen=True)
class GKAOptions(VariantOptions):
    rope: bool = False      # rotate the per-head features (nanochat flavour)
    qk_norm: bool = False   # parameter-free RMS norm of the per-head features (nanochat flavour)
    # initial bandwidth, sigma = exp(log_sigma): a number, or a rule of SIGMA_RULES
    init_sigma: float | str = field(default=DEFAULT_INIT_SIGMA, metadata={"check": _check_init_sigma,
                                                            "doc": "initial bandwidth or a rule: " + ", ".join(SIGMA_RULES)})
    rope_base: float = positive(10000.0)

    def position_scheme(self) -> str | None:
        return "rope" if self.rope else None


def initial_log_sigma(init_sigma: float | str, d_head: int) -> float:
    """log sigma at construction: the number, or the rule's value (the median rule's
    placeholder until its first training batch is sqrt(d))."""
    if isinstance(init_sigma, str):
        if init_sigma not in SIGMA_RULES:
            raise ValueError(f"unknown init_sigma {init_sigma!r}; allowed: a number > 0, {', '.join(SIGMA_RULES)}")
        if init_sigma == "paper":
            return 0.0
        return math.log(math.sqrt(d_head) / (2 if init_sigma == "sqrt_d_half" else 1))
    return math.log(init_sigma)


# kernels.py: the blog's kernels in the Nadaraya-Watson slot
KERNELS = ("exp_dot", "gaussian", "yat", "linear")


@dataclass(frozen=True)
class NWOptions(VariantOptions):
    kernel: str = choice("exp_dot", KERNELS, "the kernel in the Nadaraya-Watson slot")
    bias: bool = False
    yat_eps: float = positive(1e-3)
    block: int = positive(256, "query block of the yat fast path")

    def allows_window(self, causal: bool) -> bool:
        return self.kernel != "linear"  # associativity needs every key: no window form


# linear.py: FAVOR+
@dataclass(frozen=True)
class FavorOptions(VariantOptions):
    n_features: int = positive(256, "number of positive random features m")
    feature_seed: int = 0
    bias: bool = False
    chunk: int = field(default=64, metadata={"check": lambda v: None if v > 0 else "must be > 0"})

    def allows_window(self, causal: bool) -> bool:
        return causal  # the chunked causal form takes a window; the bidirectional one has none


# The controls of issue 50: one module each (sigmoid.py, fire.py, differential.py, rbf.py, fox.py, cope.py)
ROPE_OR_NONE = ("rope", "none")


@dataclass(frozen=True)
class SigmoidOptions(VariantOptions):
    position: str = choice("rope", ROPE_OR_NONE, "RoPE on q and k, or none")
    rope_base: float = positive(10000.0)
    bias: bool = False  # biases on W_Q, W_K, W_V

    def position_scheme(self) -> str | None:
        return None if self.position == "none" else self.position


@dataclass(frozen=True)
class FireOptions(VariantOptions):
    hidden: int = positive(32, "width of FIRE's MLP f (one hidden ReLU layer)")
    init_c: float = positive(1.0, "initial c of psi(x) = log(c x + 1)")
    init_threshold: float = positive(512.0, "initial L of the normaliser psi(max(i, L))")
    bias: bool = False

    def position_scheme(self) -> str | None:
        return "fire"

    def allows_bidirectional(self) -> bool:
        return False  # the normaliser is the query's distance from the sequence start


@dataclass(frozen=True)
class DifferentialOptions(VariantOptions):
    lambda_init: float = field(default=0.8, metadata={
        "check": lambda v: None if 0 <= v < 1 else "must be in [0, 1)", "doc": "lambda's constant part"})
    position: str = choice("rope", ROPE_OR_NONE, "RoPE on each half of q and k, or none")
    rope_base: float = positive(10000.0)
    bias: bool = False

    def position_scheme(self) -> str | None:
        return None if self.position == "none" else self.position


def _check_rbf_sigma(value) -> str | None:
    if isinstance(value, str):  # the median rule is GKA's alone: the projections move from step 0
        return None if value in ("paper", "sqrt_d_half", "sqrt_d") else "must be > 0 or paper, sqrt_d_half, sqrt_d"
    return None if value > 0 else "must be > 0"


@dataclass(frozen=True)
class RBFOptions(VariantOptions):
    init_sigma: float | str = field(default="sqrt_d", metadata={"check": _check_rbf_sigma,
                                                                 "doc": "initial bandwidth, or paper/sqrt_d_half/sqrt_d"})
    rope: bool = False
    rope_base: float = positive(10000.0)
    bias: bool = False

    def position_scheme(self) -> str | None:
        return "rope" if self.rope else None


@dataclass(frozen=True)
class FoxOptions(VariantOptions):
    rope: bool = False  # FoX's own runs use none: the forget gate is its position signal
    rope_base: float = positive(10000.0)
    bias: bool = False

    def position_scheme(self) -> str | None:
        return "forget gate" + (" + rope" if self.rope else "")

    def allows_bidirectional(self) -> bool:
        return False


@dataclass(frozen=True)
class CopeOptions(VariantOptions):
    n_positions: int = positive(64, "learned position embeddings; larger counts are clamped to the last")
    bias: bool = False

    def position_scheme(self) -> str | None:
        return "cope"

    def allows_bidirectional(self) -> bool:
        return False


SPECS: dict[str, tuple[type, str, str]] = {
    "softmax": (SoftmaxOptions, "multi-head softmax attention; position none/rope/learned_rope/alibi/t5/lag_table/"
                "kerple_log/kerple_power", "softmax"),
    "valueless": (SoftmaxOptions, "softmax attention with W_Q, W_K and no W_V (gka-paper's VLT)", "softmax"),
    "gpa": (GPAOptions, "softmax attention times/plus a bank of M decaying(-periodic) lag kernels per head", "gpa"),
    "gka": (GKAOptions, "projection-free Gaussian kernel attention with a learnable bandwidth per head", "gka"),
    "nw": (NWOptions, "explicit Nadaraya-Watson attention with kernel exp_dot/gaussian/yat/linear", "kernels"),
    "favor": (FavorOptions, "FAVOR+ linear attention with m positive random features (approximates softmax)", "linear"),
    "sigmoid": (SigmoidOptions, "sigmoid attention, sigmoid(q.k / sqrt(d) - log(keys seen)), unnormalised", "sigmoid"),
    "fire": (FireOptions, "softmax attention plus FIRE's learned MLP of the log-normalised lag (causal)", "fire"),
    "differential": (DifferentialOptions, "differential attention: two softmax maps subtracted, per-head RMSNorm",
                     "differential"),
    "rbf": (RBFOptions, "projected Gaussian (RBF) kernel on W_Q x and W_K x, learnable bandwidth per head", "rbf"),
    "fox": (FoxOptions, "Forgetting Transformer: softmax plus the summed log forget gates (causal)", "fox"),
    "cope": (CopeOptions, "contextual position encoding: gated position counts, interpolated embeddings (causal)",
             "cope"),
}
