"""A dataclass's resolved annotations, worked out once per class in a process.

The params schema and the attention registry check every value against its field's annotation.
With `from __future__ import annotations` those are strings, and `typing.get_type_hints`
compiles and evaluates each of them on every call: loading params.yaml asked for them about 830
times, two thirds of `load_params`'s time (77 ms a load; the fast test job loads params 561
times). A class's annotations do not change once it is defined, so one answer per class holds.
"""

from __future__ import annotations

import functools
import typing


@functools.cache
def type_hints(cls: type) -> dict[str, typing.Any]:
    """`typing.get_type_hints(cls)`, computed on the first call for `cls`. Shared: do not mutate."""
    return typing.get_type_hints(cls)
