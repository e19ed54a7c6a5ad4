"""What this machine computes natively, for code that picks a dtype by speed.

A CPU without bfloat16 instructions (AVX2 only) still runs bfloat16 matmuls, through a
generic kernel at about 1 GFLOP/s against float32's 60 (issue 47: one 1280 x 1280 Polar
Express took 45 s in bfloat16 and 1 s in float32). So a low-precision dtype is only worth its
rounding where the device has it natively; elsewhere float32 is both faster and closer.

The two environment variables that make a machine with bf16 instructions behave like one
without are honoured, so that such a stand-in also gives the answers of the real thing:
- ATEN_CPU_CAPABILITY caps PyTorch's own kernels; torch applies it itself, and
  `cpu_capability()` reports the capped level.
- ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA) caps oneDNN, which runs CPU
  matmuls; below AVX512_CORE_BF16 its bf16 matmul is the slow generic one.
It imports torch and nothing of kernattn's, so that light modules can ask it.
"""

from __future__ import annotations

import functools
import os

import torch

# oneDNN's ISA names (its dnnl_cpu_isa_t) below the first one with bf16 dot products.
# Any other value (AVX512_CORE_BF16, the AMX ones, ALL, DEFAULT, a typo oneDNN ignores) leaves
# bf16 to the hardware.
ONEDNN_ISAS_WITHOUT_BF16 = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"})
LOW_PRECISION = (torch.bfloat16, torch.float16)


def cpu_capability() -> str:
    """ATen's CPU kernel level, as torch reports it: AVX512, AVX2, DEFAULT, SVE256, ..."""
    return torch.backends.cpu.get_cpu_capability()


def onednn_isa_cap() -> str | None:
    """The ISA limit set for oneDNN in the environment (upper-cased), or None."""
    value = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return value.strip().upper() if value and value.strip() else None


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU runs bfloat16 matmuls in hardware: AVX512-BF16 or AMX, oneDNN there to
    use them, and neither ATen's nor oneDNN's ISA capped below them. Cached: the answer is
    fixed for the process (oneDNN reads its variable once, too)."""
    hardware = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    # ATen's cap is checked too: a stand-in for an AVX2-only CPU must not claim bf16 anywhere.
    aten = cpu_capability() == "AVX512"
    return bool(hardware and aten and torch.backends.mkldnn.is_available()
                and onednn_isa_cap() not in ONEDNN_ISAS_WITHOUT_BF16)


def compute_dtype(device: torch.device | str, preferred: torch.dtype = torch.bfloat16) -> torch.dtype:
    """`preferred` where `device` runs it natively, else float32. float32 and float64 are
    always themselves; accelerators (CUDA, ...) are taken to run their low precision natively;
    a CPU gets bfloat16 only per `cpu_has_native_bf16`, and float32 for float16 (nothing here
    asks a CPU for float16, so its CPU support is not looked into)."""
    if preferred not in LOW_PRECISION:
        return preferred
    if torch.device(device).type != "cpu":
        return preferred
    return preferred if preferred == torch.bfloat16 and cpu_has_native_bf16() else torch.float32
