"""The registry's variants as a params row may name them: each one's summary, the tracks it is
defined on with its defaults, its options with their defaults and choices, and where it comes
from. The one list `kernattn variants` prints, the docs' variants page renders and the report's
variant legend shows (a plugin's variants join it once loaded)."""

from __future__ import annotations

import dataclasses

# Where each built-in comes from (the documents of docs/documents.md, or the paper).
PAPERS = {
    "softmax": "Vaswani et al. 2017; positions: RoPE (Su et al.), ALiBi (Press et al.), T5 (Raffel et al.), "
               "KERPLE (Chi et al. 2022); nanochat's attention in gka-paper",
    "valueless": "gka-paper (VLT)",
    "gpa": "gpa-short (combine mult), gpa-long (combine add)",
    "gka": "gka-paper",
    "nw": "kr-blog (swapping the kernel)",
    "favor": "Choromanski et al. 2021 (FAVOR+), via kr-blog",
    "sigmoid": "Ramapuram et al. 2024, sigmoid self-attention",
    "fire": "Li et al. 2023, FIRE",
    "differential": "Ye et al. 2024, Differential Transformer",
    "rbf": "the projected control of gka-paper's GKA (issue 50)",
    "fox": "Lin et al. 2025, Forgetting Transformer",
    "cope": "Golovneva et al. 2024, contextual position encoding",
}


def tracks_of(name: str) -> list[str]:
    """The tracks a variant is defined on with its defaults: char and LM (causal) always; the
    ViT where it has a bidirectional form and can run without a 1-D position scheme."""
    from ..attention import make_options, option_fields
    from .vision import VISION_DEFAULTS

    opts = make_options(name, {})
    fields = option_fields(name)
    vision = make_options(name, {k: v for k, v in VISION_DEFAULTS.items() if k in fields})
    return ["char", "lm"] + (["vision"] if opts.allows_bidirectional() and vision.position_scheme() is None else [])


def describe_variant(name: str) -> dict:
    from ..attention import option_fields
    from ..attention.registry import plugin_of, summary

    plugin = plugin_of(name)
    options = {}
    for key, f in option_fields(name).items():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        entry = {"default": list(default) if isinstance(default, tuple) else default}
        if f.metadata.get("choices") is not None:
            entry["choices"] = list(f.metadata["choices"])
        options[key] = entry
    return {"name": name, "summary": summary(name), "kind": "plugin" if plugin else "built-in",
            "tracks": tracks_of(name), "options": options,
            "reference": plugin.source if plugin else PAPERS.get(name, "")}
