"""kernattn.io: atomic files and folders are complete or absent; temporaries never remain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernattn.io import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_text


def names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_helpers_create_parents_and_leave_no_temporaries(tmp_path):
    out = tmp_path / "a" / "b"
    atomic_write_bytes(out / "x.bin", b"\x00\x01")
    atomic_write_text(out / "x.txt", "caf\u00e9\n")
    atomic_write_json(out / "x.json", {"k": [1, 2], "s": "\u00e9"})
    assert (out / "x.bin").read_bytes() == b"\x00\x01"
    assert (out / "x.txt").read_bytes() == "caf\u00e9\n".encode()
    assert json.loads((out / "x.json").read_text(encoding="utf-8")) == {"k": [1, 2], "s": "\u00e9"}
    assert (out / "x.json").read_text(encoding="utf-8").endswith("\n")
    assert names(out) == ["x.bin", "x.json", "x.txt"]


def test_overwrite_replaces_content(tmp_path):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "old")
    atomic_write_text(p, "new")
    assert p.read_text() == "new"
    assert names(tmp_path) == ["f.txt"]


def test_atomic_path_keeps_suffix_so_np_save_writes_the_named_file(tmp_path):
    target = tmp_path / "ids.npy"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".npy" and tmp.name.startswith(".")
        assert not tmp.exists()
        np.save(tmp, np.arange(5, dtype=np.uint8))
    assert np.load(target).tolist() == [0, 1, 2, 3, 4]
    assert names(tmp_path) == ["ids.npy"]


def test_atomic_path_failure_keeps_old_file_and_removes_temporary(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("good")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "good"
    assert names(tmp_path) == ["f.txt"]


def test_atomic_path_body_that_writes_nothing_fails_cleanly(tmp_path):
    with pytest.raises(FileNotFoundError):
        with atomic_path(tmp_path / "f.txt"):
            pass
    assert names(tmp_path) == []


def test_unserialisable_json_writes_nothing(tmp_path):
    p = tmp_path / "m.json"
    atomic_write_json(p, {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(p, {"bad": object()})
    assert json.loads(p.read_text()) == {"ok": 1}
    assert names(tmp_path) == ["m.json"]


def test_atomic_dir_creates_then_replaces_whole_folder(tmp_path):
    out = tmp_path / "data"
    with atomic_dir(out) as tmp:
        assert tmp.parent == tmp_path and tmp.is_dir() and tmp != out and not out.exists()
        (tmp / "a.txt").write_text("1")
        (tmp / "only_old.txt").write_text("x")
    assert names(out) == ["a.txt", "only_old.txt"]
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("2")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.txt").write_text("3")
    assert names(out) == ["a.txt", "sub"]  # the old folder is replaced, not merged
    assert (out / "a.txt").read_text() == "2" and (out / "sub" / "b.txt").read_text() == "3"
    assert names(tmp_path) == ["data"]


@pytest.mark.parametrize("exc", [ValueError("bad"), KeyboardInterrupt()])
def test_atomic_dir_failure_leaves_previous_output_intact(tmp_path, exc):
    out = tmp_path / "data"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("good")
    with pytest.raises(type(exc)):
        with atomic_dir(out) as tmp:
            (tmp / "a.txt").write_text("partial")
            raise exc
    assert names(out) == ["a.txt"] and (out / "a.txt").read_text() == "good"
    assert names(tmp_path) == ["data"]


def test_atomic_dir_failure_on_first_run_leaves_nothing(tmp_path):
    with pytest.raises(ValueError):
        with atomic_dir(tmp_path / "new" / "data") as tmp:
            (tmp / "a.txt").write_text("partial")
            raise ValueError("bad")
    assert names(tmp_path / "new") == []


def test_atomic_dir_replaces_a_file_at_the_path(tmp_path):
    out = tmp_path / "data"
    out.write_text("stale file")
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    assert out.is_dir() and names(out) == ["a.txt"]
    assert names(tmp_path) == ["data"]
