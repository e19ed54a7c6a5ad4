"""The params sections units keep in their own folders (a new track's or study's keys), found
by the loader beside its built-in sections."""

from __future__ import annotations

from typing import Any

from ..errors import ParamsError


def unit_sections(taken: dict) -> dict[str, tuple[type, Any]]:
    """The params sections the units declare in their own packages: a unit whose package has a
    `config` module (kernattn.units.UNITS; a new track or study keeps its keys in its folder)
    names there SECTION (the key in params.yaml), Section (its dataclass, built and checked by
    schema.py's rules like every section) and optionally check(section, where) (its cross-key
    checks); a section named in `taken` (the built-in ones) or twice is an error. The units
    are named by string: this floor imports none of them, and a unit's config module imports
    nothing above config."""
    from ..units import UNITS

    out = {}
    for unit in UNITS:
        if unit.has_module("config"):
            module = unit.module("config")
            if module.SECTION in taken or module.SECTION in out:
                raise ParamsError(f"{module.__name__}.SECTION is {module.SECTION!r}, a section another owns; "
                                  f"name the unit's section after the unit")
            out[module.SECTION] = (module.Section, getattr(module, "check", None))
    return out
