"""`kernattn preflight`: the memory estimate and the SLURM comparison on constructed cases with
known answers, the saved-tensors count on a hand-computed model, and the micro version of the
paper preflight end to end (every row of every track stepped, checkpointed and resumed on stand-in
data, nothing written beside the params file)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from kernattn.preflight import memory, slices, slurm_check, steps, watch
from kernattn.preflight.items import FAIL, OK, WARN
from kernattn.preflight.rowcheck import NoGraphEval, SavedBytes

from . import paths

BIN = Path(sys.executable).parent
GIB = memory.GIB


# ----------------------------------------------------------------------------- memory
def test_the_estimate_is_held_plus_micro_batch_times_activations_plus_the_allowance():
    fp = memory.Footprint(held=10 * GIB, saved_float=GIB, saved_other=GIB // 4)
    assert fp.gpu_bytes(8, bf16=False) == 10 * GIB + 8 * (GIB + GIB // 4) + memory.CUDA_OVERHEAD
    assert fp.gpu_bytes(8, bf16=True) == 10 * GIB + 8 * (GIB // 2 + GIB // 4) + memory.CUDA_OVERHEAD


def test_the_largest_fitting_micro_batch_divides_the_ranks_share():
    fp = memory.Footprint(held=10 * GIB, saved_float=GIB)
    # 80 GiB x 0.95 = 76 GiB; 76 - 10 held - 2 allowance = 64 GiB of activations
    assert memory.largest_fit(fp, 256, 80, bf16=False) == 64   # 1 GiB a sample
    assert memory.largest_fit(fp, 256, 80, bf16=True) == 128   # 0.5 GiB a sample
    assert memory.largest_fit(fp, 96, 80, bf16=False) == 48    # 64 fits, but does not divide 96
    assert memory.largest_fit(memory.Footprint(held=80 * GIB, saved_float=1), 8, 80, bf16=True) == 0
    got = memory.fit(fp, 256, 256, 80, bf16=False)
    assert not got.ok and got.largest == 64 and got.need_gib == pytest.approx(10 + 256 + 2)
    assert memory.fit(fp, 32, 256, 80, bf16=False).ok


def test_what_the_estimate_can_decide():
    """Held bytes are certain; eager activations are the estimate without torch.compile and an
    upper bound with it."""
    fp = memory.Footprint(held=10 * GIB, saved_float=GIB)
    fits, too_big = memory.fit(fp, 32, 256, 80, bf16=False), memory.fit(fp, 256, 256, 80, bf16=False)
    assert memory.verdict(fp, fits, compiled=False) == memory.verdict(fp, fits, compiled=True) == OK
    assert memory.verdict(fp, too_big, compiled=False) == FAIL
    assert memory.verdict(fp, too_big, compiled=True) == WARN
    huge = memory.Footprint(held=79 * GIB, saved_float=GIB)
    assert memory.verdict(huge, memory.fit(huge, 1, 8, 80, bf16=True), compiled=True) == FAIL


def test_the_saved_tensor_count_matches_a_hand_count():
    """y = relu(x W^T + b), loss = y.sum(): autograd keeps x (2 x 4 float32: 32 bytes) for W's
    gradient and relu's output (2 x 3: 24 bytes); W is a parameter (held, not counted)."""
    class Tiny:
        def __init__(self):
            self.model = torch.nn.Linear(4, 3)

        def loss(self, fwd, batch):
            return torch.relu(fwd(batch)).sum()

    probe = type("Probe", (SavedBytes, Tiny), {})()
    probe.loss(probe.model, torch.randn(2, 4)).backward()
    assert (probe.saved_float, probe.saved_other) == (32 + 24, 0)


# ----------------------------------------------------------------------------- the memory ceiling
ALLOCATE = "import os, signal, time\nheld = []\n"  # children that hold real, touched pages


def _child(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(ALLOCATE + body)
    return [sys.executable, str(script)]


def test_a_row_killed_by_the_os_says_so_with_the_memory_it_reached(tmp_path, monkeypatch):
    """A row's process that takes ~200 MB and is then SIGKILLed (as the OOM killer does): the
    row fails naming the signal, the likely cause and the peak the kernel counted."""
    fake = tmp_path / "python"  # run_row starts `python -m kernattn.preflight.rowcheck ...`: this ignores it
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'child.py'}\n")
    fake.chmod(0o755)
    _child(tmp_path, "held.append(b'x' * (200 << 20))\ntime.sleep(1)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.setattr(steps.sys, "executable", str(fake))
    row = steps.Row("lm", "base", "base-s0", "base")
    result = steps.run_row(row, {}, tmp_path, watch.Ceiling(8 * GIB, 8 * GIB, 20 * GIB))
    item = steps.step_item(row, result)
    assert item.status == FAIL and result["exit"] == -9, item.line()
    assert 200 << 20 <= result["peak_rss"] < 400 << 20
    assert f"killed by the OS (SIGKILL, likely out of memory) after reaching {result['peak_rss'] / GIB:.2f} GiB " \
           f"resident (20.00 GiB were available at the start)" in item.text, item.text


def test_a_process_past_the_ceiling_is_stopped_and_says_why(tmp_path):
    argv = _child(tmp_path, "for _ in range(40):\n    held.append(b'x' * (50 << 20))\n    time.sleep(0.05)\n")
    ceiling = watch.Ceiling(300 << 20, 300 << 20, None)
    end = watch.run_capped(argv, tmp_path / "log", ceiling.limit)
    assert end.stopped and end.code == -9 and 300 << 20 < end.peak < 1 << 30, end
    text = watch.ended_text(end, ceiling, tmp_path / "log")
    assert text.startswith("stopped by the preflight after reaching") and "larger --max-memory" in text, text
    fine = watch.run_capped(_child(tmp_path, "held.append(b'x' * (50 << 20))\ntime.sleep(0.5)\n"), tmp_path / "log",
                            ceiling.limit)
    assert (fine.code, fine.stopped) == (0, False) and fine.peak >= 50 << 20


def test_the_ceiling_is_the_asked_memory_at_most_90_percent_of_what_is_available():
    small = watch.Ceiling.here(12, meminfo="MemTotal: 9000000 kB\nMemAvailable: 8388608 kB\n")
    assert small.available == 8 * GIB and small.limit == int(0.9 * 8 * GIB)
    assert "90% of the memory available here, 8.00 GiB; --max-memory asked 12.00 GiB" in small.text()
    big = watch.Ceiling.here(12, meminfo="MemAvailable: 67108864 kB\n")
    assert big.limit == 12 * GIB and big.text() == "12.00 GiB (--max-memory; 64.00 GiB available here)"
    assert watch.Ceiling.here(12, meminfo="").limit == 12 * GIB  # no MemAvailable: the asked memory


# ----------------------------------------------------------------------------- slices
def test_the_paper_lm_slices_repeat_its_layers_exactly():
    """Depth 20 steps slices of 4 and 8 layers at the full width; for every LM variant the
    parameter count is linear over them (what the extrapolation assumes), on the meta device."""
    from kernattn.config import load_params
    from kernattn.tracks import track_recipe
    from kernattn.tracks.lm.model import GPTConfig, build_model

    p = load_params(paths.REPO / "params.yaml", "paper")
    cut = slices.slicing(track_recipe("lm"), p)
    assert (cut.depth, cut.period, cut.depths) == (20, 4, (4, 8))
    assert cut.overrides(4) == {"lm": {"depth": 4, "aspect_ratio": 320}}
    assert slices.slicing(track_recipe("lm"), load_params(paths.REPO / "params.yaml", "micro")) is None
    assert slices.slicing(track_recipe("char"), p) is None
    plan = steps.memory_plan([steps.Row("lm", "base", "base-s0", "base")], p, watch.Ceiling(12 * GIB, 12 * GIB, None))
    assert plan == ("memory: each row's check process is held under 12.00 GiB (--max-memory); lm rows (20 layers) "
                    "step slices of 4 and 8 layers, extrapolated to 20, and whole too where that fits")
    for row in p.lm.rows:
        counts = {}
        for depth in (4, 8, 20):
            lm = dataclasses.replace(p.lm, depth=depth, aspect_ratio=cut.dim // depth)
            cfg = GPTConfig.from_params(lm, p.lm.vocab_size, row.variant, row.options)
            counts[depth] = sum(q.numel() for q in build_model(cfg, "meta").parameters())
        assert counts[20] == counts[4] + 4 * (counts[8] - counts[4]), row.name


def _slice(params, peak, held, step_s=10.0):
    return {"params": params, "planned_params": 896, "held": held, "saved_float": 2 * held, "saved_other": 8,
            "checkpoint_bytes": held // 2, "peak_rss": peak, "step_s": step_s, "resume_s": 1.0,
            "resumed_from_step": 1, "same_weights": True, "eval_grad": False}


def test_two_slices_extrapolate_to_the_full_depth_and_the_row_says_what_it_proved():
    cut = slices.Slicing("lm", 20, 4, 1280)
    small, large = _slice(256, 4 * GIB, 100), _slice(416, 6 * GIB, 140)
    large.pop("resume_s")
    out = steps.sliced(cut, {4: small, 8: large})
    assert out["extrapolated"] == {"params": 896, "held": 260, "saved_float": 520, "saved_other": 8,
                                   "checkpoint_bytes": 130, "peak_rss": 12 * GIB}
    assert out["peak_rss"] == 6 * GIB and out["peaks"] == {"4": 4 * GIB, "8": 6 * GIB} and "error" not in out
    item = steps.step_item(steps.Row("lm", "base", "base-s0", "base"), out)
    assert item.status == OK and "896 params over 20 layers, stepped as slices of 4 and 8 layers" in item.text
    assert "peak memory 4.00 GiB and 6.00 GiB" in item.text and "--max-memory 14 steps it whole" in item.text
    wrong = steps.sliced(cut, {4: small, 8: _slice(400, 6 * GIB, 140)})
    assert "do not repeat" in wrong["error"], wrong


# ----------------------------------------------------------------------------- evaluation without autograd
class _Eval:
    """A track's evaluate as the LM's: per batch, its loss summed into one tensor."""
    def __init__(self):
        self.model = torch.nn.Linear(4, 3)

    def evaluate(self, fwd, autocast):
        total = torch.zeros(())
        for x in torch.randn(3, 2, 4):
            total += fwd(x).square().sum()
        return {"loss": total}


def test_an_evaluation_that_leaves_autograd_on_is_caught_and_kept_from_holding_graphs():
    probe = type("Probe", (NoGraphEval, _Eval), {})()
    out = probe.evaluate(probe.model, None)
    assert probe.eval_grad and out["loss"].grad_fn is None and torch.is_grad_enabled()
    quiet = type("Quiet", (_Eval,), {"evaluate": torch.no_grad()(_Eval.evaluate)})  # as a fixed track's
    fine = type("Probe", (NoGraphEval, quiet), {})()
    fine.evaluate(fine.model, None)
    assert not fine.eval_grad
    row = steps.Row("lm", "base", "base-s0", "base")
    item = steps.step_item(row, {**_slice(1, GIB, 1), "eval_grad": True, "evaluate": "m.T.evaluate"})
    assert item.status == FAIL and "m.T.evaluate has no @torch.no_grad()" in item.text


# ----------------------------------------------------------------------------- SLURM
def test_slurm_times_and_gres_parse_as_sinfo_prints_them():
    assert slurm_check.minutes("infinite") == math.inf
    assert [slurm_check.minutes(t) for t in ("30", "30:00", "2:00:00", "1-12", "1-00:30:00")] == [30, 30, 120, 2160, 1470]
    assert slurm_check.gres_gpus("gpu:h100:8(S:0-1),shard:4") == (8, {"h100"})
    assert slurm_check.gres_gpus("gpu:4") == (4, set())
    assert slurm_check.gres_gpus("(null)") == (0, set())
    parts = slurm_check.parse_sinfo("gpu*|2-00:00:00|gpu:h100:8(S:0-1)|3\ngpu*|2-00:00:00|gpu:a100:4|2\n"
                                    "cpu|1:00:00|(null)|10\n")
    assert parts["gpu"].limit_min == 2880 and parts["gpu"].gpus_per_node == 8 and parts["gpu"].nodes == 5
    assert parts["gpu"].gpu_types == {"h100", "a100"} and parts["cpu"].gpus_per_node == 0
    assert slurm_check.runtime_minutes("2h") == 120 and slurm_check.runtime_minutes(90) == 90


@pytest.mark.parametrize("res, status, words", [
    ({"slurm_partition": "gpu", "runtime": 600, "gpu": 8, "nodes": 2, "gpu_model": "h100"}, OK, "fit"),
    ({"slurm_partition": "gpu", "runtime": 3000}, FAIL, "exceeds the partition's limit of 2880"),
    ({"slurm_partition": "gpu", "runtime": 60, "gres": "gpu:h100:16"}, FAIL, "16 GPUs per node asked"),
    ({"slurm_partition": "gpu", "runtime": 60, "nodes": 9}, FAIL, "9 nodes asked, it has 5"),
    ({"slurm_partition": "gpu", "runtime": 60, "gpu": 1, "gpu_model": "v100"}, WARN, "not among its GPU types"),
    ({"slurm_partition": "SITE_GPU_PARTITION", "runtime": 60}, FAIL, "kernattn install-profile"),
    ({"slurm_partition": "big", "runtime": 60}, FAIL, "no partition 'big' here (sinfo: cpu, gpu)"),
])
def test_a_stage_is_judged_against_its_partition(res, status, words):
    parts = slurm_check.parse_sinfo("gpu*|2-00:00:00|gpu:h100:8(S:0-1)|3\ngpu*|2-00:00:00|gpu:a100:4|2\n"
                                    "cpu|1:00:00|(null)|10\n")
    item = slurm_check.check_stage("train_lm", res, parts)
    assert item.status == status and words in item.text, item.line()


# ----------------------------------------------------------------------------- end to end, micro
def _preflight(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`kernattn preflight --scale micro` with a copy of params.yaml in `tmp_path` (its relative
    outputs would land there), the data found as the suite finds them (the mirror or the cache)."""
    shutil.copy(paths.REPO / "params.yaml", tmp_path / "params.yaml")
    out = tmp_path / "preflight.json"
    proc = subprocess.run([str(BIN / "kernattn"), "preflight", "--params", str(tmp_path / "params.yaml"), "--scale",
                           "micro", "--json", str(out), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    return proc, (json.loads(out.read_text()) if out.is_file() else {})


@pytest.mark.e2e
def test_micro_preflight_steps_checkpoints_and_resumes_every_row_and_judges_the_profile(tmp_path):
    """Char and vision: every row built, stepped, checkpointed and resumed to the same weights;
    the profile asks 2 GPUs for a char run (its batch 4 divides: ok) and 3 for a vision run
    (32 does not: the memory item fails, so does the preflight)."""
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump({"set-resources": {"train": {"ranks": 2}, "train_vision": {"ranks": 3}}}))
    proc, doc = _preflight(tmp_path, "--tracks", "char,vision", "--skip", "slurm", "--profile", str(profile))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    from kernattn.config import load_params
    from kernattn.tracks.char.stages import runs as char_runs
    from kernattn.tracks.vision.stages import runs as vision_runs

    p = load_params(paths.REPO / "params.yaml", "micro")
    rows = {f"char/{r.row}" for r in char_runs(p)} | {f"vision/{r.row}" for r in vision_runs(p)}
    steps = {i["subject"]: i for i in doc["items"] if i["check"] == "step"}
    assert set(steps) == rows
    for item in steps.values():
        v = item["values"]
        assert item["status"] == OK and v["resumed_from_step"] == 1 and v["same_weights"], item
        assert v["held"] > 0 and v["saved_float"] > 0 and v["peak_rss"] > 0 and v["checkpoint_bytes"] > 0
    mem = {i["subject"]: i for i in doc["items"] if i["check"] == "memory"}
    assert all(mem[r]["status"] == OK and mem[r]["values"]["per_rank"] == p.train.batch_size // 2
               for r in rows if r.startswith("char/"))
    assert all(mem[r]["status"] == FAIL and "does not divide over the profile's 3 GPUs" in mem[r]["text"]
               for r in rows if r.startswith("vision/"))
    data = {i["subject"]: i["status"] for i in doc["items"] if i["check"] == "data"}
    assert data and set(data.values()) == {OK}, data
    assert "failed" in proc.stdout.splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml", "preflight.json", "profile.yaml"]


@pytest.mark.e2e
def test_micro_preflight_of_the_lm_passes_and_shares_a_step_between_rows_of_one_model(tmp_path):
    proc, doc = _preflight(tmp_path, "--tracks", "lm", "--skip", "slurm,data")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("ready to launch")
    steps = {i["subject"]: i for i in doc["items"] if i["check"] == "step"}
    assert all(i["status"] == OK for i in steps.values())
    shared = [s for s, i in steps.items() if "whose step covers it" in i["text"]]
    assert shared == ["lm/gka_flops"], steps.keys()  # gka_tokens' model, matched in FLOPs
    assert all(i["status"] == OK for i in doc["items"] if i["check"] == "memory")


@pytest.mark.e2e
def test_the_row_checks_read_the_commands_overrides_file(tmp_path):
    """`kernattn preflight --overrides FILE`: each row's check process (rowcheck.py) is given the
    file (nothing in the environment carries it), under the preflight's own stand-ins."""
    over = tmp_path / "over.yaml"
    over.write_text(yaml.safe_dump({"train": {"batch_size": 6, "micro_batch": 3}}))
    proc, doc = _preflight(tmp_path, "--tracks", "char", "--rows", "rope", "--skip", "slurm,data", "--overrides",
                           str(over))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [step] = [i for i in doc["items"] if i["check"] == "step"]
    assert step["status"] == OK and step["values"]["same_weights"], step
    assert (step["values"]["global_batch"], step["values"]["micro_batch"]) == (6, 3), step  # micro: 4, none


@pytest.mark.e2e
def test_paper_vit_preflight_reads_an_imagefolder_stand_in_and_pairs_images_for_mixup(tmp_path):
    """The paper ViT: ImageNet's form (an ImageFolder of 1,000 classes, prepared by the track's
    own prepare-vision code) at 224 px, and Mixup/CutMix on, which needs an even batch: the
    smallest step trains two images, and the activations are counted per image."""
    shutil.copy(paths.REPO / "params.yaml", tmp_path / "params.yaml")
    out = tmp_path / "preflight.json"
    proc = subprocess.run([str(BIN / "kernattn"), "preflight", "--params", str(tmp_path / "params.yaml"), "--scale",
                           "paper", "--tracks", "vision", "--rows", "deit", "--skip", "data,slurm", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [step] = [i for i in json.loads(out.read_text())["items"] if i["check"] == "step"]
    assert step["subject"] == "vision/deit" and step["values"]["step_micro_batch"] == 2, step
    assert step["values"]["same_weights"] and step["values"]["global_batch"] == 256


@pytest.mark.e2e
def test_the_snakefile_target_runs_the_preflight_here_with_the_dags_params(tmp_path):
    """`snakemake preflight`: a local rule (never a SLURM job) running `kernattn preflight` with
    the options every stage gets."""
    shutil.copy(paths.REPO / "params.yaml", tmp_path / "params.yaml")
    proc = subprocess.run([str(BIN / "snakemake"), "-s", str(paths.REPO / "Snakefile"), "-n", "-p", "--cores", "1",
                           "preflight", "--config", "scale=paper"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rule preflight:" in proc.stdout and "neither input nor output" in proc.stdout  # runs whenever asked
    assert "kernattn preflight --params params.yaml --scale paper" in proc.stdout
    local = subprocess.run([sys.executable, "-c", LOCAL_RULES.format(snakefile=paths.REPO / "Snakefile")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr[-2000:]
    assert "preflight" in json.loads(local.stdout.strip().splitlines()[-1])


# The workflow's local rules, as Snakemake's API parses them (the rules no executor submits).
LOCAL_RULES = """
import json
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={{Quietness.ALL}})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path("{snakefile}"), workdir=Path("."))
    print(json.dumps(sorted(wf._workflow._localrules)))
"""


def test_a_track_without_a_global_batch_gets_a_memory_warning_not_a_crash():
    """The engine's protocol lets a track train in one process without declaring its global
    batch; the preflight cannot size its batch then, and says so."""
    row = steps.Row("toy", "softmax", "softmax-s0", "softmax")
    item = steps.memory_item(row, {"global_batch": None, "stage_command": "train-toy"},
                             {"held": 1, "saved_float": 1, "saved_other": 0}, lambda stage: 1, None, None)
    assert item.status == steps.WARN and "declares no global batch" in item.text
