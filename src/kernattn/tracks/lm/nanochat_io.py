"""nanochat c7ba252 checkpoints <-> kernattn LM weights (`kernattn import-lm`, `export-lm`).

A nanochat base checkpoint folder holds model_<step:06d>.pt (the GPT's state dict, keys
possibly prefixed `_orig_mod.` by torch.compile, embeddings in bfloat16 when trained on a GPU)
and meta_<step:06d>.json (its `model_config`: sequence_len, vocab_size, n_layer, n_head,
n_kv_head, n_embd, window_pattern). The weights map one to one onto kernattn's `base` GPT:

    transformer.wte.weight                      wte.weight
    transformer.h.{i}.attn.c_q|c_k|c_v.weight   blocks.{i}.attn.inner.proj_in.weight (rows q|k|v)
    transformer.h.{i}.attn.c_proj.weight        blocks.{i}.attn.inner.proj_out.weight
    transformer.h.{i}.attn.ve_gate.weight       blocks.{i}.attn.ve_gate.weight
    transformer.h.{i}.mlp.c_fc|c_proj.weight    blocks.{i}.mlp.c_fc|c_proj.weight
    value_embeds.{i}.weight, lm_head.weight, resid_lambdas, x0_lambdas   (the same names)

nanochat pads the vocabulary rows of wte, value_embeds and lm_head to a multiple of 64 (its
logits drop them): import drops the padding, export pads with zeros.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ...errors import UsageError

VOCAB_PAD = 64
PADDED = re.compile(r"^(transformer\.wte|value_embeds\.\d+|lm_head)\.weight$")
QKV = ("c_q", "c_k", "c_v")


def padded_vocab(vocab: int) -> int:
    return -(-vocab // VOCAB_PAD) * VOCAB_PAD


def _kernattn_name(name: str) -> str:
    m = re.match(r"^transformer\.h\.(\d+)\.(attn|mlp)\.(\w+)\.weight$", name)
    if name.startswith("transformer.wte."):
        return name.removeprefix("transformer.")
    if m is None:
        return name  # value_embeds, lm_head, resid_lambdas, x0_lambdas
    layer, part, leaf = m.groups()
    inner = {"c_proj": "inner.proj_out"}.get(leaf, leaf) if part == "attn" else leaf
    return f"blocks.{layer}.{part}.{inner}.weight"


def from_nanochat(state: dict[str, torch.Tensor], vocab: int) -> dict[str, torch.Tensor]:
    """nanochat's state dict -> kernattn's (float32, vocabulary padding dropped)."""
    state = {k.removeprefix("_orig_mod."): v.float() for k, v in state.items()}
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        leaf = name.split(".")[-2] if name.endswith(".weight") else ""
        if ".attn." in name and leaf in QKV:
            if leaf == "c_q":  # the three matrices, stacked as kernattn's fused proj_in
                stem = name[: -len("c_q.weight")]
                out[_kernattn_name(stem + "c_q.weight").replace("c_q", "inner.proj_in")] = torch.cat(
                    [state[f"{stem}{q}.weight"] for q in QKV])
            continue
        out[_kernattn_name(name)] = value[:vocab] if PADDED.match(name) else value
    return out


def to_nanochat(state: dict[str, torch.Tensor], vocab: int) -> dict[str, torch.Tensor]:
    """kernattn's state dict -> nanochat's (vocabulary rows zero-padded to a multiple of 64)."""
    out: dict[str, torch.Tensor] = {}
    pad = padded_vocab(vocab) - vocab
    for name, value in state.items():
        value = value.detach().float().cpu()
        m = re.match(r"^blocks\.(\d+)\.(attn|mlp)\.(?:inner\.)?(\w+)\.weight$", name)
        if name == "wte.weight":
            name = "transformer.wte.weight"
        elif m:
            layer, part, leaf = m.groups()
            stem = f"transformer.h.{layer}.{part}."
            if leaf == "proj_in":
                out.update({f"{stem}{q}.weight": w.clone() for q, w in zip(QKV, value.chunk(3))})
                continue
            name = stem + ("c_proj" if leaf == "proj_out" else leaf) + ".weight"
        if PADDED.match(name) and pad:
            value = torch.cat([value, value.new_zeros(pad, value.shape[1])])
        out[name] = value
    return out


def nanochat_config(cfg) -> dict:
    """meta.json's model_config for a kernattn GPTConfig."""
    return {"sequence_len": cfg.context, "vocab_size": cfg.vocab_size, "n_layer": cfg.depth, "n_head": cfg.n_head,
            "n_kv_head": cfg.n_head, "n_embd": cfg.dim, "window_pattern": cfg.window_pattern}


def check_config(model_config: dict, cfg, where: str) -> None:
    """The checkpoint's architecture must be the run's; else one line naming both keys."""
    mine = nanochat_config(cfg)
    lm_key = {"sequence_len": "context", "vocab_size": "vocab_size (lm.data_dir's tokenizer)", "n_layer": "depth",
              "n_head": "head_dim", "n_kv_head": "head_dim (nanochat GQA is not supported)",
              "n_embd": "aspect_ratio x depth", "window_pattern": "window_pattern"}
    for key, value in mine.items():
        theirs = model_config.get(key, "L" if key == "window_pattern" else None)
        if theirs != value:
            raise UsageError(f"{where}: model_config.{key}={theirs!r}, but the run's lm.{lm_key[key]} gives "
                             f"{value!r}; set the lm section to the checkpoint's shape")


def checkpoint_files(folder: Path, step: int | None) -> tuple[Path, Path, int]:
    """(model_<step>.pt, meta_<step>.json, step): the given step or the last one."""
    steps = sorted(int(p.stem.split("_")[1]) for p in folder.glob("model_*.pt"))
    if not steps:
        raise UsageError(f"{folder}: no model_<step>.pt; point --nanochat at a nanochat base checkpoint folder")
    step = steps[-1] if step is None else step
    model, meta = folder / f"model_{step:06d}.pt", folder / f"meta_{step:06d}.json"
    for path in (model, meta):
        if not path.is_file():
            raise UsageError(f"{path}: no such file (steps here: {', '.join(map(str, steps))}); pass one of them as --step")
    return model, meta, step


def read_checkpoint(folder: Path, step: int | None) -> tuple[dict, dict, int]:
    """(state dict, meta, step) of a nanochat checkpoint folder."""
    model, meta, step = checkpoint_files(Path(folder), step)
    try:
        state = torch.load(model, map_location="cpu", weights_only=True)
        info = json.loads(meta.read_text())
    except (OSError, ValueError, RuntimeError) as exc:
        raise UsageError(f"{model.parent}: unreadable nanochat checkpoint ({type(exc).__name__}: {exc})") from None
    if "model_config" not in info:
        raise UsageError(f"{meta}: no model_config; not a nanochat base checkpoint's meta file")
    return state, info, step


def load_nanochat(folder: Path, step: int | None, cfg) -> tuple[dict, dict, int]:
    """(kernattn state dict, meta, step) of a nanochat checkpoint checked against `cfg`."""
    state, meta, step = read_checkpoint(folder, step)
    check_config(meta["model_config"], cfg, str(Path(folder) / f"meta_{step:06d}.json"))
    return from_nanochat(state, cfg.vocab_size), meta, step


# What nanochat c7ba252 fixes in code, as the lm fields and GPTConfig values that reproduce it.
NANOCHAT_FIXED = {"rope_base": 10000.0, "qk_gain": 1.0, "softcap": 15.0, "rope_bf16": True, "value_embeds": True,
                  "short_window": None}


def check_nanochat_function(cfg, where: str) -> None:
    """The run must compute nanochat's forward: the base attention and c7ba252's constants."""
    if cfg.attention != ("softmax", {"position": "rope", "qk_norm": True, "rope_base": 10000.0, "qk_gain": 1.0}):
        raise UsageError(f"{where}: row variant {cfg.variant!r} with {dict(cfg.attention_options)} is not nanochat's "
                         f"attention; use a row of variant base without options")
    for key, value in NANOCHAT_FIXED.items():
        if getattr(cfg, key) != value:
            raise UsageError(f"{where}: lm.{key}={getattr(cfg, key)!r}, nanochat c7ba252 has {value!r}; set lm.{key}: "
                             f"{'null' if value is None else str(value).lower()}")
