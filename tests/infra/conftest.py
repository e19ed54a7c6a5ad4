"""Session fixtures of the infrastructure tests that stay in one worker: `chromium` (a headless
browser), `corpus`, and where measured durations go (<infra-out>/timings.json). The daemons
and the micro DAG every worker shares are tests/conftest.py's (`slurm_cluster`,
`mlflow_server`, `micro_dag`: tests/infra/services.py).

Skips happen only where the machine cannot run them (not root, no apt-get, a package that
cannot be installed), with the reason in pytest's summary (-ra).
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from .. import paths
from . import harness

MIRROR = paths.DICKENS
MICRO_RUNS = ("rope-s0", "gpa_dp_m8-s0")
LM_RUNS = ("base-s0", "gka_tokens-s0", "gka_flops-s0")  # the micro scale's LM track
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "{}")


# ============================================================================ fixtures
@pytest.fixture(scope="session")
def infra_out(tmp_path_factory) -> Path:
    """Where screenshots and timings.json go (pytest's tmp; printed by the tests)."""
    return tmp_path_factory.mktemp("infra-out")


@pytest.fixture(scope="session")
def timings(infra_out):
    data: dict[str, float] = {}
    yield data
    (infra_out / "timings.json").write_text(json.dumps(data, indent=2) + "\n")


@pytest.fixture(scope="session")
def chromium(timings):
    """Headless Debian chromium driven by playwright (no `playwright install`)."""
    reason, seconds = harness.ensure_packages(harness.CHROMIUM_PACKAGES, ("chromium",))
    timings["apt_install_chromium_s"] = round(seconds, 1)
    if reason:
        pytest.skip(f"Chromium unavailable: {reason}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    t0 = time.monotonic()
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=harness.which("chromium") or harness.CHROMIUM,
                                     args=CHROMIUM_ARGS, timeout=120_000)
        timings["chromium_launch_s"] = round(time.monotonic() - t0, 1)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()
        # Whatever the browser or the driver left behind (they are our descendants): by pid.
        leftovers = [p for p in me.children(recursive=True) if p.pid not in before]
        for p in leftovers:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(leftovers, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """train.npy / val.npy / vocab.json / meta.json from the first 200k characters of the mirror."""
    out = tmp_path_factory.mktemp("corpus")
    with gzip.open(MIRROR, "rt", encoding="utf-8", errors="replace") as fh:
        text = fh.read(200_000)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.array([lookup[c] for c in text], dtype=np.uint8)
    cut = int(0.9 * len(ids))
    np.save(out / "train.npy", ids[:cut])
    np.save(out / "val.npy", ids[cut:])
    (out / "vocab.json").write_text(json.dumps({"chars": chars, "size": len(chars)}))
    (out / "meta.json").write_text(json.dumps({"chars": len(ids)}))
    return out
