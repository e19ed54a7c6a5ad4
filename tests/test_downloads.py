"""Downloads are verified before use (issue 9), over real HTTP (a local http.server thread,
the real urllib code): the first fetch records each URL's sha256 in <out_dir>.downloads/
SHA256SUMS; later runs use the cached copy only while it matches, re-fetch a damaged one, and
refuse a server that now serves other bytes; a truncated body is never cached or used."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kernattn import cli
from kernattn.config import DataParams
from kernattn.config.char import UrlSource
from kernattn.tracks.char.corpus import prepare
from kernattn.fetch import SUMS_FILE, DataError, cache_name, read_sums
from tests.test_data import MODERN, _Handler, server  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parents[1]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.exists() else {}


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if ".tmp-" in p.name]


def test_first_fetch_records_the_sha256_and_later_runs_verify_the_cache(server, tmp_path):  # noqa: F811
    url = f"{server}/pg1.txt"
    served = _Handler.files["/pg1.txt"]
    data = DataParams(urls=(url,), out_dir=str(tmp_path / "out"))
    prepare(data)
    cache = tmp_path / "out.downloads"
    assert read_sums(cache / SUMS_FILE) == {cache_name(url): hashlib.sha256(served).hexdigest()}
    assert (cache / cache_name(url)).read_bytes() == served
    # the standard tool agrees with the sidecar
    check = subprocess.run(["sha256sum", "--check", "--strict", SUMS_FILE], cwd=cache, capture_output=True, text=True)
    assert check.returncode == 0 and ": OK" in check.stdout

    prepare(data)  # verified cached copy: no second request
    assert _Handler.hits["/pg1.txt"] == 1
    (cache / cache_name(url)).write_bytes(served[:-10] + b"garbage!!\n")  # damaged on disk
    prepare(data)  # does not match the recorded sha256: fetched again, and verified
    assert _Handler.hits["/pg1.txt"] == 2 and (cache / cache_name(url)).read_bytes() == served
    assert temp_files(tmp_path) == []


def test_a_server_serving_other_bytes_is_refused_in_one_line(server, tmp_path):  # noqa: F811
    url = f"{server}/pg1.txt"
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    doc["scales"]["micro"]["data"] = {"mirror": None, "urls": [url], "out_dir": str(tmp_path / "out")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc))
    assert cli.main(["prepare", "--params", str(tmp_path / "params.yaml")]) == 0
    cache = tmp_path / "out.downloads"
    recorded = hashlib.sha256(_Handler.files["/pg1.txt"]).hexdigest()
    (cache / cache_name(url)).unlink()  # e.g. a fresh cache, or a damaged copy
    _Handler.files["/pg1.txt"] = MODERN.replace("best", "BEST").encode()  # the server's file changed
    got = hashlib.sha256(_Handler.files["/pg1.txt"]).hexdigest()
    before = snapshot(tmp_path)

    e = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    e.pop("KERNATTN_DATA_MIRROR", None)
    proc = subprocess.run([sys.executable, "-m", "kernattn.cli", "prepare", "--params", str(tmp_path / "params.yaml")],
                          env=e, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"kernattn prepare: error: {url}: sha256 mismatch: expected {recorded} (recorded in {cache / SUMS_FILE} "
        f"on its first download), got {got}; the download was discarded: if the server's file changed on "
        f"purpose, delete the line for {cache_name(url)} from {cache / SUMS_FILE} and rerun"]
    assert snapshot(tmp_path) == before  # previous output, cache and sums untouched; no temp file


def test_a_truncated_download_is_never_cached_or_used(server, tmp_path):  # noqa: F811
    url = f"{server}/truncated/pg1.txt"  # Content-Length says 100 bytes more than it sends
    with pytest.raises(DataError, match="incomplete body"):
        prepare(DataParams(urls=(url,), out_dir=str(tmp_path / "out")))
    assert list(tmp_path.iterdir()) == []  # no output, no cache folder, no sums, no temp file


def _micro_params(tmp_path: Path, **data) -> Path:
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    doc["scales"]["micro"]["data"] = {"mirror": None, "out_dir": str(tmp_path / "out"), **data}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "params.yaml"


def test_a_pinned_sha256_that_differs_is_refused_before_any_output(server, tmp_path, capsys):  # noqa: F811
    url = f"{server}/pg1.txt"
    served = hashlib.sha256(_Handler.files["/pg1.txt"]).hexdigest()
    params = _micro_params(tmp_path, urls=[f"{server}/pg2.txt.gz", {"url": url, "sha256": "1" * 64}])
    assert cli.main(["prepare", "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"kernattn prepare: error: {url}: sha256 mismatch: expected {'1' * 64} (pinned in data.urls[1].sha256 "
        f"in {params}), got {served}; the download was discarded: fix the URL, or update "
        f"data.urls[1].sha256 in {params} if the server's file changed on purpose"]
    assert not (tmp_path / "out").exists()
    cache = tmp_path / "out.downloads"  # the unpinned first URL was fetched and recorded; nothing of the second
    assert not (cache / cache_name(url)).exists() and cache_name(url) not in read_sums(cache / SUMS_FILE)
    assert temp_files(tmp_path) == []


def test_a_pin_wins_over_an_older_record_and_is_recorded(server, tmp_path):  # noqa: F811
    url = f"{server}/pg1.txt"
    data = DataParams(urls=(url,), out_dir=str(tmp_path / "out"), clean="gutenberg")
    prepare(data)  # recorded on the first fetch
    _Handler.files["/pg1.txt"] = MODERN.replace("best", "BEST").encode()  # the server's file changed
    new = hashlib.sha256(_Handler.files["/pg1.txt"]).hexdigest()
    (tmp_path / "out.downloads" / cache_name(url)).unlink()
    with pytest.raises(DataError, match="recorded in"):  # unpinned: the record refuses the new bytes
        prepare(data)
    meta = prepare(DataParams(urls=(UrlSource(url, new),), out_dir=str(tmp_path / "out"), clean="gutenberg"))
    assert meta["sha256_checked"] and meta["sources"][0]["stored_sha256"] == new
    assert read_sums(tmp_path / "out.downloads" / SUMS_FILE) == {cache_name(url): new}
    assert "BEST" in (tmp_path / "out.downloads" / cache_name(url)).read_text()


def test_data_sha256_with_downloads_points_to_the_per_url_pin(server, tmp_path):  # noqa: F811
    with pytest.raises(DataError, match=r"data\.sha256 pins the local file data\.mirror, which is not set; "
                                        r"pin a download in its data\.urls entry"):
        prepare(DataParams(urls=(f"{server}/pg1.txt",), out_dir=str(tmp_path / "out"), sha256="1" * 64))
    assert list(tmp_path.iterdir()) == [] and _Handler.hits["/pg1.txt"] == 0
