"""The conformance suite of `kernattn check-variant` on every built-in variant and each option
set that changes what it computes (registry.variations): the same checks a plugin must pass
(kernattn.attention.conformance), one implementation. A new built-in or option is covered
without editing this file."""

from __future__ import annotations

import pytest

from kernattn.attention import conformance
from kernattn.attention.options import SPECS
from kernattn.attention.registry import variations

# Small banks, features and blocks: the same code paths at a fraction of the time.
SMALL = {"gpa": {"n_kernels": 4}, "favor": {"n_features": 32, "chunk": 8}, "nw": {"block": 7}}
CASES = [(name, {**SMALL.get(name, {}), **v}) for name in sorted(SPECS) for v in variations(name)]


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'default'}"
                                                     for n, o in CASES])
def test_every_builtin_conforms(name, options):
    problems = {c.name: conformance.run_check(c, name, options) for c in conformance.CHECKS}
    assert not any(problems.values()), {k: v for k, v in problems.items() if v}
