"""The docs' list of attention variants, from the one list `kernattn variants` prints
(config.variants.describe_variant over the registry): every built-in with its summary,
the tracks it is defined on, its options with their defaults and choices, and its source. A
variant added to the registry appears here without an edit to the docs."""

from __future__ import annotations

from .csv_table import cell


def _option(key: str, spec: dict) -> str:
    default = spec["default"]
    if "choices" in spec:
        return f"`{key}`: " + " / ".join(f"**{c}**" if c == default else str(c) for c in spec["choices"])
    return f"`{key}` (**{default}**)"


def variants_reference(rows: list[dict] | None = None) -> str:
    """A markdown table of `rows` (describe_variant's dicts; default: every registered variant)."""
    if rows is None:
        from ..attention import available
        from ..config.variants import describe_variant

        rows = [describe_variant(name) for name in available()]
    lines = ["| variant | what it computes | tracks | options (**default**) | from |", "|---|---|---|---|---|"]
    for r in rows:
        options = "; ".join(_option(k, v) for k, v in r["options"].items()) or "(none)"
        lines.append(f"| `{r['name']}` | {cell(r['summary'])} | {', '.join(r['tracks'])} | {cell(options)} | "
                     f"{cell(r['reference'])} |")
    return "\n".join(lines) + "\n"
