"""The `lm:` section of params.yaml, defined in kernattn.config.lm (the loader builds and
checks it with every other section); kept here under its old names."""

from __future__ import annotations

from ..config.lm import CORE_TASKS, MATCHED, LMParams

__all__ = ["CORE_TASKS", "MATCHED", "LMParams", "lm_params"]


def lm_params(params) -> LMParams:
    """params.lm (its cross-key checks already ran when the params were loaded)."""
    return params.lm
