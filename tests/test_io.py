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


def test_line_appender_leaves_whole_lines_when_killed(tmp_path):
    """A real process appending long lines (over a page) as fast as it can, SIGKILLed
    mid-stream: every newline-terminated line is complete JSON in order (a buffered writer could
    leave half a line anywhere); at most a tail without its newline follows, the start of the
    next line (the kernel may stop a write at a page boundary on SIGKILL), and read_lines drops it."""
    from kernattn.io import read_lines

    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    path = tmp_path / "metrics.jsonl"
    src = Path(__file__).resolve().parents[1] / "src"
    code = ("import json, sys\nfrom kernattn.io import LineAppender\nout = LineAppender(sys.argv[1])\n"
            "i = 0\nwhile True:\n    out.write(json.dumps({'step': i, 'pad': 'x' * 5000}))\n    i += 1\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)],
                            env={**os.environ, "PYTHONPATH": str(src)})
    while not path.exists() or path.stat().st_size < 2_000_000:
        assert proc.poll() is None
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    text = path.read_text()
    whole, _, tail = text.rpartition("\n")
    steps = [json.loads(line)["step"] for line in whole.split("\n")]
    assert steps == list(range(len(steps))) and len(steps) >= 400
    assert json.dumps({"step": len(steps), "pad": "x" * 5000}).startswith(tail)
    assert read_lines(path) == whole.split("\n")


def test_read_lines_drops_an_unterminated_last_line(tmp_path):
    from kernattn.io import read_lines

    (tmp_path / "m.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a"')
    assert read_lines(tmp_path / "m.jsonl") == ['{"a": 1}', '{"a": 2}']
    (tmp_path / "m.jsonl").write_text("")
    assert read_lines(tmp_path / "m.jsonl") == []


def test_load_torch_is_weights_only_and_one_line(tmp_path):
    import os

    import torch

    from kernattn.io import LoadError, load_torch

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'PWNED'}",))

    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(3), "meta": {"step": 2, "names": ["a"], "t": (1, 2.5)}}, good)
    assert torch.equal(load_torch(good)["w"], torch.arange(3))
    torch.save({"w": torch.arange(3), "x": Payload()}, tmp_path / "evil.pt")
    (tmp_path / "cut.pt").write_bytes(good.read_bytes()[:100])
    for name, text in (("evil.pt", "refused: holds a pickled Python object (it references posix.system)"),
                       ("cut.pt", "unreadable checkpoint, truncated or corrupt"),
                       ("absent.pt", "no such checkpoint file")):
        with pytest.raises(LoadError) as info:
            load_torch(tmp_path / name, "retrain it")
        message = str(info.value)
        assert message.startswith(f"{tmp_path / name}: {text}") and message.endswith("; retrain it")
        assert "\n" not in message and "weights_only=False" not in message
    assert not (tmp_path / "PWNED").exists()


def test_atomic_torch_save_replaces_whole_or_not_at_all(tmp_path):
    """A checkpoint is the old one or the new one: a save that fails leaves the old file and
    no temporary beside it."""
    import pickle

    import torch

    from kernattn.io import atomic_torch_save, load_torch

    path = tmp_path / "ckpt.pt"
    atomic_torch_save(path, {"step": 1, "w": torch.arange(3)})
    atomic_torch_save(path, {"step": 2, "w": torch.arange(4)})
    got = load_torch(path)
    assert got["step"] == 2 and torch.equal(got["w"], torch.arange(4))
    with pytest.raises((pickle.PicklingError, AttributeError)):  # "can't pickle local object"
        atomic_torch_save(path, {"step": 3, "bad": lambda: None})  # a lambda cannot be pickled
    assert load_torch(path)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
