"""Every bad input of the char pipeline (issue 9), run through the real CLI in a subprocess:
a non-zero exit, exactly one line on stderr (no traceback) naming the file or key and the
fix, and no partial output (the output folder absent or exactly as before, no temp files).

Cases of the other tracks live with them: an image folder with no classes (vision helper's
tests), an eval file with a malformed line reported by its number (LM helper's tests).
Downloads (pinned / recorded sha256, truncated and wrong bodies over real HTTP) are in
tests/test_downloads.py.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml

from kernattn import cli
from tests import paths
from tests.workspace import command_env

REPO = Path(__file__).resolve().parents[1]
MIRROR = paths.DICKENS


def micro_doc(tmp: Path, **data) -> dict:
    """params.yaml at micro scale, every output under `tmp`, tracking off."""
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    micro = doc["scales"]["micro"]
    micro["data"] |= {"mirror": str(MIRROR), "out_dir": str(tmp / "data"), **data}
    micro["train"]["out_dir"] = str(tmp / "runs")
    micro["tracking"] = {"enabled": False}
    return doc


def write(tmp: Path, doc: dict) -> Path:
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A prepared corpus and rope-s0 stopped at step 2 (ckpt.pt, no final.json)."""
    tmp = tmp_path_factory.mktemp("trained")
    params = write(tmp, micro_doc(tmp))
    threads = torch.get_num_threads()  # the stage sets train.threads: give it back
    assert cli.main(["prepare", "--params", str(params)]) == 0
    assert cli.main(["train", "--params", str(params), "--run", "rope-s0", "--stop-after", "2", "--no-progress"]) == 0
    torch.set_num_threads(threads)
    return tmp


@dataclass
class Case:
    """setup(tmp, trained) -> argv of `kernattn`; the stderr line must contain every `expect`
    (str.format'ed with tmp); `outputs` (relative to tmp) must be absent afterwards, or
    byte-identical to before when they existed."""

    id: str
    setup: Callable[[Path, Path], list[str]]
    expect: tuple[str, ...]
    outputs: tuple[str, ...] = ("data",)
    needs_trained: bool = False
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- params.yaml
def params_case(mutate: Callable[[dict], None]) -> Callable[[Path, Path], list[str]]:
    def setup(tmp: Path, _trained: Path) -> list[str]:
        doc = micro_doc(tmp)
        mutate(doc)
        return ["prepare", "--params", str(write(tmp, doc))]
    return setup


def yaml_syntax(tmp: Path, _trained: Path) -> list[str]:
    text = yaml.safe_dump(micro_doc(tmp), sort_keys=False).replace("n_layer: 4", "n_layer: [4", 1)
    (tmp / "params.yaml").write_text(text)
    return ["prepare", "--params", str(tmp / "params.yaml")]


def row(doc: dict, name: str) -> dict:
    return next(r for r in doc["matrix"]["rows"] if r["name"] == name)


# ---------------------------------------------------------------- data mirrors
def mirror_case(make: Callable[[Path], Path | str], **data) -> Callable[[Path, Path], list[str]]:
    def setup(tmp: Path, _trained: Path) -> list[str]:
        return ["prepare", "--params", str(write(tmp, micro_doc(tmp, mirror=str(make(tmp)), **data)))]
    return setup


def empty_file(tmp: Path) -> Path:
    (tmp / "empty.txt").write_bytes(b"")
    return tmp / "empty.txt"


def truncated_gzip(tmp: Path) -> Path:
    blob = gzip.compress(("It was the best of times, it was the worst of times.\n" * 2000).encode())
    (tmp / "cut.txt.gz").write_bytes(blob[: len(blob) // 2])
    return tmp / "cut.txt.gz"


def latin1_text(tmp: Path) -> Path:
    (tmp / "latin1.txt").write_bytes("Mr. Pickwick's caf\u00e9 was full.\n".encode("latin-1") * 50)
    return tmp / "latin1.txt"


def plain_text(tmp: Path) -> Path:
    """A text that is not from Project Gutenberg (no START/END markers)."""
    (tmp / "plain.txt").write_text("Lines of a corpus that never saw Gutenberg.\n" * 50)
    return tmp / "plain.txt"


def a_folder(tmp: Path) -> Path:
    (tmp / "corpus_dir").mkdir()
    return tmp / "corpus_dir"


# ---------------------------------------------------------------- checkpoints
def run_copy(tmp: Path, trained: Path, run_id: str = "rope-s0") -> Path:
    """The trained corpus and run folder copied under tmp; returns the copied run folder."""
    shutil.copytree(trained / "data", tmp / "data")
    shutil.copytree(trained / "runs" / "rope-s0", tmp / "runs" / run_id)
    return tmp / "runs" / run_id


def ckpt_case(damage: Callable[[Path], None], run_id: str = "rope-s0", **train) -> Callable[[Path, Path], list[str]]:
    def setup(tmp: Path, trained: Path) -> list[str]:
        damage(run_copy(tmp, trained, run_id) / "ckpt.pt")
        doc = micro_doc(tmp)
        doc["scales"]["micro"]["train"] |= train
        return ["train", "--params", str(write(tmp, doc)), "--run", run_id, "--no-progress"]
    return setup


def truncate(path: Path) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 3])


class Payload:
    """A pickled object that would run code when unpickled without weights_only."""

    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def with_pickled_object(path: Path) -> None:
    ckpt = torch.load(path, weights_only=True)
    ckpt["extra"] = Payload()
    torch.save(ckpt, path)


def corpus_case(damage: Callable[[Path], None], stage: str = "train") -> Callable[[Path, Path], list[str]]:
    def setup(tmp: Path, trained: Path) -> list[str]:
        shutil.copytree(trained / "data", tmp / "data")
        damage(tmp / "data" / "train.npy")
        doc = micro_doc(tmp)
        doc["scales"]["micro"]["analysis"]["out_dir"] = str(tmp / "analysis")
        args = ["--run", "rope-s0", "--no-progress"] if stage == "train" else []
        return [stage, "--params", str(write(tmp, doc)), *args]
    return setup


def no_data(tmp: Path, _trained: Path) -> list[str]:
    return ["train", "--params", str(write(tmp, micro_doc(tmp))), "--run", "rope-s0", "--no-progress"]


CASES = [
    # params.yaml
    Case("params-yaml-syntax", yaml_syntax, ("{tmp}/params.yaml: line ", "YAML syntax error")),
    Case("params-unknown-key", params_case(lambda d: d["train"].update(lr_max=1)),
         ("{tmp}/params.yaml: unknown key 'train.lr_max'; allowed: batch_size",)),
    Case("params-wrong-type", params_case(lambda d: d["scales"]["micro"]["train"].update(max_steps="ten")),
         ("{tmp}/params.yaml", "scales.micro -> train.max_steps must be int, got 'ten'")),
    Case("params-unknown-variant", params_case(lambda d: row(d, "rope").update(variant="softmaxx")),
         ("{tmp}/params.yaml", "matrix.rows[0] (rope)", "unknown attention variant 'softmaxx'", "valid names:")),
    Case("params-unknown-option", params_case(lambda d: row(d, "rope")["options"].update(positon="rope")),
         ("{tmp}/params.yaml", "(rope)", "unknown option 'positon'", "valid options:")),
    Case("params-bad-choice", params_case(lambda d: row(d, "rope")["options"].update(position="sinusoid")),
         ("{tmp}/params.yaml", "(rope)", "'position'", "must be one of")),
    Case("params-negative-lr", params_case(lambda d: d["scales"]["micro"]["train"].update(lr=-0.001)),
         ("{tmp}/params.yaml", "train.lr must be > 0; got -0.001")),
    # (micro's lm section is a YAML anchor the controls scale shares; scales are checked in name order)
    Case("params-lm-qk-gain", params_case(lambda d: d["scales"]["micro"]["lm"].update(qk_gain=0)),
         ("{tmp}/params.yaml", "scales.controls -> lm.qk_gain must be > 0; got 0.0")),
    Case("params-lm-warmdown", params_case(lambda d: d["scales"]["micro"]["lm"].update(warmdown_frac=1.5)),
         ("{tmp}/params.yaml", "scales.controls -> lm.warmdown_frac must be between 0 and 1; got 1.5")),
    Case("params-context-too-long", params_case(lambda d: d["scales"]["micro"]["model"].update(context=512)),
         ("{tmp}/params.yaml", "(lag_table)", "max_len=256 is shorter than model.context=512",
          "raise max_len or lower the context")),
    Case("params-unknown-scale", lambda tmp, _t: ["prepare", "--params", str(write(tmp, micro_doc(tmp))),
                                                  "--scale", "huge"],
         ("{tmp}/params.yaml", "unknown scale 'huge'", "allowed: controls, micro, paper, small, small_long, tiny")),
    Case("params-missing-file", lambda tmp, _t: ["prepare", "--params", str(tmp / "nope.yaml")],
         ("{tmp}/nope.yaml: no such params file",)),
    Case("params-corpus-name", params_case(lambda d: d["scales"]["micro"]["data"].update(corpus="my corpus")),
         ("{tmp}/params.yaml", "scales.micro -> data.corpus must be a name of letters, digits, '_' and '-'",
          "got 'my corpus'")),
    Case("params-url-pin", params_case(lambda d: d["data"].update(
        urls=[{"url": "https://www.gutenberg.org/cache/epub/98/pg98.txt", "sha256": "abc"}])),
         ("{tmp}/params.yaml: data.urls[0].sha256 must be a sha256: 64 hexadecimal digits", "got 'abc'")),
    # data mirrors
    Case("mirror-missing", mirror_case(lambda tmp: tmp / "absent.txt.gz"),
         ("{tmp}/absent.txt.gz: no such file", "fix data.mirror in")),
    Case("mirror-empty", mirror_case(empty_file), ("{tmp}/empty.txt: file is empty (0 bytes)",)),
    Case("mirror-directory", mirror_case(a_folder), ("{tmp}/corpus_dir: is a directory", "point it to the corpus file")),
    Case("mirror-truncated-gzip", mirror_case(truncated_gzip), ("{tmp}/cut.txt.gz: truncated gzip file", "again")),
    Case("mirror-not-utf8", mirror_case(latin1_text),
         ("{tmp}/latin1.txt: not valid UTF-8 at byte offset 18", "iconv")),
    Case("mirror-checksum", mirror_case(lambda tmp: MIRROR, sha256="0" * 64),
         (f"{MIRROR}: sha256 mismatch: expected {'0' * 64}", "update data.sha256")),
    Case("mirror-not-gutenberg", mirror_case(plain_text, clean="gutenberg"),
         ("{tmp}/plain.txt: data.clean is 'gutenberg' but the text has no Project Gutenberg START/END markers",
          "set data.clean: none")),
    # the training stage's inputs
    Case("train-no-corpus", no_data, ("{tmp}/data/train.npy: no such file", "kernattn prepare"), outputs=("runs",)),
    Case("corpus-truncated-npy", corpus_case(truncate),
         ("{tmp}/data/train.npy: unreadable token array, truncated or corrupt", "rerun kernattn prepare"),
         outputs=("runs", "data"), needs_trained=True),
    Case("analyze-corpus-truncated-npy", corpus_case(truncate, "analyze-corpus"),
         ("{tmp}/data: cannot read the train split", "run kernattn prepare"),
         outputs=("data", "analysis"), needs_trained=True),
    Case("ckpt-truncated", ckpt_case(truncate),
         ("{tmp}/runs/rope-s0/ckpt.pt: unreadable checkpoint, truncated or corrupt", "--fresh"),
         outputs=("runs",), needs_trained=True),
    Case("ckpt-empty", ckpt_case(lambda p: p.write_bytes(b"")),
         ("{tmp}/runs/rope-s0/ckpt.pt: empty checkpoint file", "--fresh"), outputs=("runs",), needs_trained=True),
    Case("ckpt-other-config", ckpt_case(lambda p: None, lr=5e-4),
         ("{tmp}/runs/rope-s0/ckpt.pt: checkpoint from another configuration", "train.lr (0.001 -> 0.0005)",
          "--fresh"), outputs=("runs",), needs_trained=True),
    Case("ckpt-other-variant", ckpt_case(lambda p: None, run_id="gpa_dp_m8-s0"),
         ("{tmp}/runs/gpa_dp_m8-s0/ckpt.pt: checkpoint from another configuration",
          "a 'softmax' model (run rope-s0), not this run's 'gpa'", "--fresh"),
         outputs=("runs",), needs_trained=True),
    Case("ckpt-pickled-object", ckpt_case(with_pickled_object),
         ("{tmp}/runs/rope-s0/ckpt.pt: refused: holds a pickled Python object (it references posix.system)",
          "weights_only=True"), outputs=("runs",), needs_trained=True),
]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.exists() else {}


@pytest.mark.e2e
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_nonzero_and_leaves_no_output(case: Case, tmp_path: Path, request):
    trained = request.getfixturevalue("trained") if case.needs_trained else None
    argv = case.setup(tmp_path, trained)
    before = {name: snapshot(tmp_path / name) for name in case.outputs}
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", *argv], cwd=tmp_path, env=command_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith(f"kernattn {argv[0]}: error: "), line
    for text in case.expect:
        assert text.format(tmp=tmp_path) in line, (text, line)
    for name in case.outputs:
        assert snapshot(tmp_path / name) == before[name], f"{name} changed"
    leftovers = [p for p in tmp_path.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]
    assert not leftovers
    assert not (tmp_path / "PWNED").exists()


def test_every_torch_load_in_the_package_is_weights_only():
    """No pickle from a file is ever executed: each torch.load call passes weights_only=True."""
    import re

    calls = []
    for path in (REPO / "src").rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(", text):
            end = text.index(")", m.end())
            calls.append((path.name, text[m.start():end + 1]))
    assert calls, "no torch.load found: the scan is broken"
    assert all("weights_only=True" in call for _, call in calls), calls


def test_mlflow_server_binds_loopback_unless_told_otherwise(tmp_path):
    """The default interface is 127.0.0.1 in our options and in the mlflow command we run
    (tests/infra/test_mlflow_server.py checks the listening socket of a real server)."""
    from kernattn.tracking import server as tracking_server

    parser = cli.build_parser("mlflow-server")
    args = parser.parse_args(["mlflow-server", "--params", str(write(tmp_path, micro_doc(tmp_path)))])
    cfg = tracking_server.settings(args)
    assert cfg["host"] == "127.0.0.1"
    command = tracking_server.server_command(cfg)
    assert command[command.index("--host") + 1] == "127.0.0.1"
