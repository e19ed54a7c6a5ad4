"""The attention configurations `kernattn bench-attention` measures, and which reference rows run.

Each configuration is `attention.build(variant, **options)` under a short label. The
reference impl materialises B x H x N x N tensors, often several per kernel, and dominates
the run time, so each configuration caps the N of its reference rows (`reference_max_n`,
ignored with --full-reference) on top of the run's --max-reference-n:
- no cap below the default N (2048) for a representative subset: gka (the GKA speed and
  memory ratios the issue asks for), softmax-rope (the baseline) and gpa-mult-decay-M8
  (a GPA kernel bank);
- 1024 for the other configurations: at N=2048 a reference step costs 1-3 s (0.9-1.6 GB)
  each on the 2-core CPU, 8 steps per row; for all of them that would triple the run
  (about 2 minutes with these caps);
- 256 for the two GPA banks with M=64 (gpa-add-dp-M64, gpa-add-dp-rope-M64): the explicit
  bank of eq. 5 keeps several [H, N, N] tensors per kernel for backward, about 1.7 GiB and
  5 s per step at N=512, 6.6 GiB and 18 s at N=1024, and would need about 26 GiB at N=2048.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..errors import UsageError


@dataclass(frozen=True)
class BenchConfig:
    """One attention configuration: `attention.build(variant, **options)` under `label`."""

    label: str
    variant: str
    options: dict[str, Any] = field(default_factory=dict)
    causal: bool = True
    window: int | None = None
    lag_bias: bool = False             # in the lag-bias-vs-rope comparison
    max_len_option: bool = False       # set options["max_len"] to the largest N of the run
    reference_max_n: int | None = 1024  # None: only --max-reference-n applies

    def build_options(self, max_n: int) -> dict[str, Any]:
        opts = dict(self.options)
        if self.max_len_option:
            opts["max_len"] = max(max_n, int(opts.get("max_len", 0)))
        return opts


def _gpa(label, combine, kernel, m, rope=False, reference_max_n=1024):
    opts = {"combine": combine, "kernel": kernel, "n_kernels": m}
    if rope:
        opts["rope"] = True
    return BenchConfig(label, "gpa", opts, lag_bias=True, reference_max_n=reference_max_n)


DEFAULT_CONFIGS: tuple[BenchConfig, ...] = (
    BenchConfig("softmax-none", "softmax", {"position": "none"}),
    BenchConfig("softmax-rope", "softmax", {"position": "rope"}, reference_max_n=None),
    BenchConfig("softmax-learned_rope", "softmax", {"position": "learned_rope"}),
    BenchConfig("softmax-alibi", "softmax", {"position": "alibi"}, lag_bias=True),
    BenchConfig("softmax-t5", "softmax", {"position": "t5"}, lag_bias=True),
    BenchConfig("softmax-lag_table", "softmax", {"position": "lag_table"}, lag_bias=True, max_len_option=True),
    BenchConfig("valueless", "valueless", {}),
    _gpa("gpa-add-dp-M64", "add", "decay_periodic", 64, reference_max_n=256),
    _gpa("gpa-add-dp-rope-M64", "add", "decay_periodic", 64, rope=True, reference_max_n=256),
    _gpa("gpa-mult-dp-M8", "mult", "decay_periodic", 8),
    _gpa("gpa-mult-decay-M8", "mult", "decay", 8, reference_max_n=None),
    BenchConfig("gka", "gka", {}, reference_max_n=None),
    BenchConfig("gka-lm", "gka", {"rope": True, "qk_norm": True}),
    BenchConfig("nw-gaussian", "nw", {"kernel": "gaussian"}),
    BenchConfig("nw-yat", "nw", {"kernel": "yat"}),
    BenchConfig("nw-linear", "nw", {"kernel": "linear"}),
    BenchConfig("favor-m256", "favor", {"n_features": 256}),
    # the controls the documents lack (issue 50), timed beside the built-ins
    BenchConfig("softmax-kerple_log", "softmax", {"position": "kerple_log"}, lag_bias=True),
    BenchConfig("softmax-kerple_power", "softmax", {"position": "kerple_power"}, lag_bias=True),
    BenchConfig("fire", "fire", {}),
    BenchConfig("sigmoid", "sigmoid", {}),
    BenchConfig("differential", "differential", {}),
    BenchConfig("rbf", "rbf", {}),
    BenchConfig("fox", "fox", {}),
    BenchConfig("cope", "cope", {}),
)
BASELINE_LABEL = "softmax-rope"
GKA_LABELS = ("gka", "gka-lm")


def labels(configs: Iterable[BenchConfig] = DEFAULT_CONFIGS) -> list[str]:
    return [c.label for c in configs]


def select_configs(wanted: Sequence[str] | None) -> list[BenchConfig]:
    """The default configurations named in `wanted` (all when None), in the default order."""
    if not wanted:
        return list(DEFAULT_CONFIGS)
    known = labels()
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise UsageError(
            f"unknown variant label(s) {', '.join(map(repr, unknown))}; valid labels: {', '.join(known)}"
        )
    return [c for c in DEFAULT_CONFIGS if c.label in set(wanted)]


def reference_allowed(cfg: BenchConfig, n: int, max_reference_n: int, full_reference: bool) -> bool:
    if n > max_reference_n:
        return False
    return full_reference or cfg.reference_max_n is None or n <= cfg.reference_max_n
