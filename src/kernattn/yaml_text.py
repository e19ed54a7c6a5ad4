"""YAML read and written with libyaml's C parser and emitter where PyYAML was built with it
(its wheels are), the pure-Python ones otherwise.

PyYAML's `safe_load` and `safe_dump` use the pure-Python scanner and emitter, about ten times
slower: params.yaml parses in 5 ms instead of 49, and the report alone reads
paper_numbers.yaml (907 lines) several times. The documents read are the same (the same
constructor and resolver); only a syntax error's wording differs. The emitter's output is valid
YAML of the same document, but not always the same bytes as the Python emitter's: a file whose
bytes are compared (dvc.yaml) is written with `yaml.safe_dump`.
"""

from __future__ import annotations

from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def safe_load(text: str | bytes) -> Any:
    """`yaml.safe_load`, parsed by libyaml."""
    return yaml.load(text, Loader=SAFE_LOADER)


def safe_dump(doc: Any, stream=None, **options) -> str | None:
    """`yaml.safe_dump`, emitted by libyaml (same options)."""
    return yaml.dump(doc, stream, Dumper=SAFE_DUMPER, **options)
