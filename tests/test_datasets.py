"""The data catalogue and how a file is found: the mirror, the cache, a verified download.

A local HTTP server (tests/dataserver.py) stands in for the public sources, rebuilt from the
data mirror; KERNATTN_DATA_BASE_URL points every catalogue URL at it."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kernattn.config import load_params
from kernattn.datasets import Where, dataset, locate, needed
from kernattn.datasets.catalogue import load
from kernattn.fetch import DataError, sha256_bytes
from tests import paths
from tests.dataserver import DataServer, served_files

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def files() -> dict:
    assert paths.DICKENS.is_file(), (f"no data at {paths.DATA}: set KERNATTN_DATA_MIRROR, or run "
                                     f"`kernattn data pull --scale micro` (make test does)")
    return served_files(paths.DATA)


@pytest.fixture()
def server(files):
    srv = DataServer(dict(files))
    with srv.running():
        yield srv


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch):
    monkeypatch.setenv("KERNATTN_DOWNLOAD_RETRIES", "1")
    monkeypatch.setenv("KERNATTN_DOWNLOAD_BACKOFF_S", "0")


def where_of(home: Path, server: DataServer | None, mirror: Path | None = None) -> Where:
    return Where(mirror, home, server.url if server else "http://127.0.0.1:9", "micro", progress=False)


def copa():
    return next(f for f in dataset("core-tasks").files if f.path == "eval/copa.jsonl")


# ------------------------------------------------------------------ the catalogue itself
def test_every_catalogued_mirror_file_matches_its_sha256s():
    checked = 0
    for ds in load().values():
        for f in ds.files:
            path = paths.DATA / f.path
            if not path.is_file():
                continue
            data = path.read_bytes()
            content = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
            assert sha256_bytes(content) == f.content_sha256 and len(content) == f.content_bytes, f.path
            assert f.stored_sha256 in (None, sha256_bytes(data)), f.path
            checked += 1
    assert checked == 12  # the reference mirror's twelve files


def test_no_params_or_source_names_the_neighbour_folder():
    root = paths.REPO
    offenders = [str(p.relative_to(root)) for p in [root / "params.yaml", *(root / "src" / "kernattn").rglob("*.py"),
                                                    *(root / "src" / "kernattn").rglob("*.yaml")]
                 if "../shared" in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_every_scale_needs_only_catalogued_data_sets():
    for scale in ("micro", "tiny", "small", "paper"):
        needs = needed(load_params(paths.REPO / "params.yaml", scale))
        assert {n.key for n in needs} >= {"data.dataset", "lm.dataset", "lm.eval_set"}, scale
    tiny = needed(load_params(paths.REPO / "params.yaml", "tiny"))
    assert sum(f.size for n in tiny for f in n.files) < 150e6  # the README's figure: ~40 MB


def test_an_unknown_data_set_name_is_one_line_naming_the_key(tmp_path):
    from kernattn.errors import ParamsError

    doc = yaml.safe_load((paths.REPO / "params.yaml").read_text())
    doc["scales"]["micro"]["lm"]["dataset"] = "c4-smaple"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError, match=r"lm\.dataset: unknown data set 'c4-smaple'; the catalogue has .*c4-sample"):
        load_params(tmp_path / "p.yaml", "micro")


# ------------------------------------------------------------------ mirror, cache, download
def test_mirror_first_then_cache_then_a_verified_download(server, tmp_path):
    f = dataset("silesia-dickens").files[0]
    assert locate(f, where_of(tmp_path / "c", server, paths.DATA)) == paths.DATA / f.path
    assert server.requests == []
    got = locate(f, where_of(tmp_path / "c", server))  # no mirror: the bz2 source is 404 here, the raw one serves
    assert got == tmp_path / "c" / f.path
    assert sha256_bytes(gzip.decompress(got.read_bytes())) == f.content_sha256  # stored as the path's .gz form
    n = len(server.requests)
    assert locate(f, where_of(tmp_path / "c", server)) == got and len(server.requests) == n  # the cache
    assert list((tmp_path / "c" / ".downloads").iterdir()) == []


def test_a_damaged_mirror_file_is_one_line_naming_both_sha256(tmp_path):
    f = copa()
    (tmp_path / "m/eval").mkdir(parents=True)
    (tmp_path / "m/eval/copa.jsonl").write_bytes((paths.DATA / f.path).read_bytes()[:-5])
    with pytest.raises(DataError, match=rf"copa\.jsonl: sha256 of its content is [0-9a-f]{{64}}, the catalogue's is "
                                        rf"{f.content_sha256}; .*replace it, or unset KERNATTN_DATA_MIRROR"):
        locate(f, where_of(tmp_path / "c", None, tmp_path / "m"))


def _nothing_complete(home: Path, f) -> None:
    assert not (home / f.path).exists()
    assert [p.name for p in (home / ".downloads").iterdir() if not p.name.endswith(".part")] == []


@pytest.mark.parametrize("fault", ["truncate", "midfile"])
def test_an_interrupted_download_fails_in_one_line_and_the_next_run_resumes(server, tmp_path, fault):
    f = copa()
    url_path = server.path_of(f.sources[0].url)
    server.faults[url_path] = fault
    with pytest.raises(DataError) as info:
        locate(f, where_of(tmp_path, server))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("eval/copa.jsonl: cannot download: http://127.0.0.1:")
    assert re.search(r"(incomplete body|connection lost|HTTP 503)", msg) and "kernattn data pull --scale micro" in msg
    _nothing_complete(tmp_path, f)
    assert any(p.name.endswith(".part") for p in (tmp_path / ".downloads").iterdir())  # kept to resume
    server.faults.clear()
    server.requests.clear()
    got = locate(f, where_of(tmp_path, server))
    assert sha256_bytes(got.read_bytes()) == f.content_sha256 and len(server.requests) == 1
    assert list((tmp_path / ".downloads").iterdir()) == []


def test_a_corrupted_byte_is_discarded_with_both_sha256(server, tmp_path):
    f = copa()
    server.faults[server.path_of(f.sources[0].url)] = "corrupt"
    with pytest.raises(DataError) as info:
        locate(f, where_of(tmp_path, server))
    msg = str(info.value)
    assert "\n" not in msg and f"sha256 mismatch: expected {f.sources[0].sha256}, got " in msg
    assert "the download was discarded" in msg
    assert not (tmp_path / f.path).exists() and list((tmp_path / ".downloads").iterdir()) == []
    server.faults.clear()
    assert sha256_bytes(locate(f, where_of(tmp_path, server)).read_bytes()) == f.content_sha256


def test_a_missing_file_and_no_network_name_the_url_and_the_ways_out(server, tmp_path):
    f = copa()
    server.faults[server.path_of(f.sources[0].url)] = "missing"
    with pytest.raises(DataError, match=r"copa\.jsonl: HTTP 404 .*set KERNATTN_DATA_MIRROR to a folder holding "
                                        r"eval/copa\.jsonl, or run `kernattn data pull --scale micro`"):
        locate(f, where_of(tmp_path, server))
    with pytest.raises(DataError, match=r"http://127\.0\.0\.1:9/mosaicml/.*copa\.jsonl: failed after 2 attempts: "
                                        r"cannot connect .*KERNATTN_DATA_MIRROR"):
        locate(f, where_of(tmp_path, None))
    assert not (tmp_path / f.path).exists()


# ------------------------------------------------------------------ the commands, a user's machine
def user_env(home: Path, server: DataServer) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("KERNATTN_")}
    e.update(PATH=f"{BIN}{os.pathsep}{e.get('PATH', '')}", KERNATTN_DATA_HOME=str(home),
             KERNATTN_DATA_BASE_URL=server.url, KERNATTN_DOWNLOAD_BACKOFF_S="0",
             MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING="false")
    return e


@pytest.mark.e2e
def test_data_list_and_pull_against_the_server(server, tmp_path):
    env = user_env(tmp_path / "cache", server)
    listed = subprocess.run([str(BIN / "kernattn"), "data", "list", "--scale", "micro"], cwd=paths.REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "silesia-dickens" in listed.stdout and "missing 6/6" in listed.stdout
    pulled = subprocess.run([str(BIN / "kernattn"), "data", "pull", "--scale", "micro"], cwd=paths.REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert pulled.returncode == 0, pulled.stderr
    assert "core-tasks: cache 6/6" in pulled.stdout and "fashion-mnist: cache 4/4" in pulled.stdout
    listed = subprocess.run([str(BIN / "kernattn"), "data", "list", "--scale", "micro"], cwd=paths.REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "missing" not in listed.stdout and listed.stdout.count(" cache ") == 4


@pytest.mark.e2e
def test_a_users_machine_runs_the_data_stages_through_downloads_once(server, tmp_path):
    """A workspace with nothing beside it and no mirror variable: the micro DAG's data stages
    download into an empty cache; a second pull downloads nothing."""
    ws = tmp_path / "user" / "ws"
    ws.mkdir(parents=True)
    shutil.copy(paths.REPO / "Snakefile", ws / "Snakefile")
    (ws / "src").symlink_to(paths.REPO / "src")
    doc = yaml.safe_load((paths.REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    (ws / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert not (ws.parent / "shared").exists()
    env = user_env(tmp_path / "cache", server)
    targets = ["results/micro/data/dickens/meta.json", "results/micro/lm/data/meta.json",
               "results/micro/vision/data/meta.json"]
    proc = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *targets], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all((ws / t).is_file() for t in targets)
    assert len(server.requests) >= 12
    server.requests.clear()
    again = subprocess.run([str(BIN / "kernattn"), "data", "pull", "--scale", "micro"], cwd=ws, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and server.requests == []
