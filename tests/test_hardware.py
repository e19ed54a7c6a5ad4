"""kernattn.hardware: which dtype a device computes natively, and the environment variables
that make a CPU with bf16 instructions stand in for one without (issue 47)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kernattn import hardware

CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
PROBE = ("import json, torch; from kernattn import hardware as h; print(json.dumps([h.cpu_capability(), "
         "h.cpu_has_native_bf16(), str(h.compute_dtype('cpu')), str(h.compute_dtype('cuda'))]))")


def probe(**env: str) -> list:
    """hardware's answers in a fresh interpreter with only `env` of the cap variables set:
    ATen reads its own at start-up, so no process can change it for itself."""
    clean = {k: v for k, v in os.environ.items() if k not in CAPS}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.fixture()
def fresh_answer():
    """cpu_has_native_bf16 asked anew, and its cached answer dropped again afterwards."""
    hardware.cpu_has_native_bf16.cache_clear()
    yield
    hardware.cpu_has_native_bf16.cache_clear()


def test_the_avx2_stand_in_has_no_native_bf16():
    """Both caps (issue 47's stand-in for an AVX2-only CPU): ATen's level below AVX512, no
    native bf16 on the CPU, so Muon there computes in float32; CUDA keeps bfloat16."""
    capability, native, cpu, cuda = probe(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    assert capability in ("AVX2", "DEFAULT") and native is False
    assert (cpu, cuda) == ("torch.float32", "torch.bfloat16")


def test_atens_cap_alone_is_honoured():
    """ATen's cap alone says "no bf16" too, though oneDNN could still do it: the stand-in must
    not claim bf16 anywhere."""
    capability, native, cpu, _ = probe(ATEN_CPU_CAPABILITY="avx2")
    assert capability != "AVX512" and native is False and cpu == "torch.float32"


@pytest.mark.parametrize("cap, capped", [("AVX2", True), ("avx512_core", True), ("AVX512_CORE_VNNI", True),
                                         ("AVX512_CORE_BF16", False), ("avx512_core_amx", False), ("ALL", False)])
def test_onednns_cap_is_honoured(monkeypatch, fresh_answer, cap, capped):
    """ONEDNN_MAX_CPU_ISA (any case) below AVX512_CORE_BF16 rules bf16 out; at or above it the
    answer is the hardware's. Read in this process: hardware looks the variable up itself."""
    for name in CAPS[1:]:
        monkeypatch.delenv(name, raising=False)
    uncapped = hardware.cpu_has_native_bf16()
    hardware.cpu_has_native_bf16.cache_clear()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert hardware.cpu_has_native_bf16() is (False if capped else uncapped)


def test_dnnls_older_name_is_honoured(monkeypatch, fresh_answer):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    assert hardware.cpu_has_native_bf16() is False


def test_uncapped_answer_is_the_hardwares(monkeypatch, fresh_answer):
    """Without caps: bf16 native exactly where the CPU has AVX512-BF16 or AMX tiles and ATen
    runs at AVX512 (a run of this suite under the caps still asks the capped ATen)."""
    for name in CAPS[1:]:
        monkeypatch.delenv(name, raising=False)
    has = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    want = has and hardware.cpu_capability() == "AVX512" and torch.backends.mkldnn.is_available()
    assert hardware.cpu_has_native_bf16() is bool(want)
    assert hardware.compute_dtype("cpu") == (torch.bfloat16 if want else torch.float32)


def test_full_precision_is_never_changed_and_float16_on_a_cpu_is_float32():
    for device in ("cpu", "cuda", torch.device("cpu")):
        assert hardware.compute_dtype(device, torch.float32) == torch.float32
        assert hardware.compute_dtype(device, torch.float64) == torch.float64
    assert hardware.compute_dtype("cpu", torch.float16) == torch.float32
    assert hardware.compute_dtype("cuda", torch.float16) == torch.float16


def test_the_answer_is_cached():
    """Asked once per process: every Muon step asks it."""
    hardware.cpu_has_native_bf16()
    before = hardware.cpu_has_native_bf16.cache_info().hits
    hardware.cpu_has_native_bf16()
    assert hardware.cpu_has_native_bf16.cache_info().hits == before + 1
