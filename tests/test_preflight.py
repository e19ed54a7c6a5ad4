"""`kernattn preflight`: the memory estimate and the SLURM comparison on constructed cases with
known answers, the saved-tensors count on a hand-computed model, and the micro version of the
paper preflight end to end (every row of every track stepped, checkpointed and resumed on stand-in
data, nothing written beside the params file)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from kernattn.preflight import memory, slurm_check
from kernattn.preflight.items import FAIL, OK, WARN
from kernattn.preflight.rowcheck import SavedBytes

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
