"""`kernattn variants` lists every registered variant (built-ins and plugins) with its tracks,
options and source, as text or JSON; it and `kernattn check-variant --skip-training` run from a
folder without params.yaml. The commands run as a user runs them, in a process of their own
(a plugin's registration lasts as long as its process), with cwd a fresh tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys

from kernattn import attention

from . import paths

EXAMPLE = paths.REPO / "examples" / "plugins" / "cosine_attention.py"


def kernattn(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernattn.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_variants_lists_builtins_and_plugins_from_a_folder_without_params(tmp_path):
    assert not (tmp_path / "params.yaml").exists()
    done = kernattn("variants", "--json", "--plugins", str(EXAMPLE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert sorted(rows) == sorted([*attention.available(), "cosine"])
    assert rows["cosine"]["kind"] == "plugin" and rows["cosine"]["reference"] == str(EXAMPLE)
    for name in attention.available():
        row = rows[name]
        assert row["kind"] == "built-in" and row["summary"] and row["reference"], name
        assert {k: v["default"] for k, v in row["options"].items()} == {
            k: list(v) if isinstance(v, tuple) else v for k, v in attention.describe(name).items()}, name
    for name in ("fire", "fox", "cope", "gpa"):  # causal only, or a 1-D position scheme whatever its options
        assert rows[name]["tracks"] == ["char", "lm"], name
    for name in ("sigmoid", "differential", "rbf", "gka", "softmax"):
        assert rows[name]["tracks"] == ["char", "lm", "vision"], name
    assert {"kerple_log", "kerple_power"} <= set(rows["softmax"]["options"]["position"]["choices"])


def test_variants_text_names_each_variant_with_its_tracks(tmp_path):
    done = kernattn("variants", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in attention.available():
        assert f"\n{name} (built-in): " in "\n" + done.stdout, name
    assert "tracks: char, lm; from: Lin et al. 2025" in done.stdout


def test_check_variant_module_checks_need_no_params_file(tmp_path):
    done = kernattn("check-variant", "--skip-training", "fox", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "kernattn check-variant: fox: conforms" in done.stdout and "ok    reference" in done.stdout
    # the training checks do need one, and say so in a line
    done = kernattn("check-variant", "fox", cwd=tmp_path)
    assert done.returncode == 2 and "no params file params.yaml" in done.stderr and "--skip-training" in done.stderr
