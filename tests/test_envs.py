"""envs/kernattn.yaml, the by-hand conda environment: it parses, its Python satisfies
pyproject.toml, its pip section installs this checkout (conda runs pip from the env file's
folder) and pins torch as pyproject.toml does. Conda itself is not run (the test machines have
none); no rule names the file, so Snakemake never uses it."""

from __future__ import annotations

import re
import tomllib

import yaml

from tests.paths import REPO

ENV = REPO / "envs" / "kernattn.yaml"


def _env() -> tuple[list, list[str]]:
    deps = yaml.safe_load(ENV.read_text())["dependencies"]
    pip = [item for dep in deps if isinstance(dep, dict) for item in dep["pip"]]
    return deps, pip


def test_env_file_installs_this_checkout_with_pyprojects_pins():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps, pip = _env()
    (python,) = [d for d in deps if isinstance(d, str) and d.startswith("python=")]
    minimum = tuple(int(x) for x in re.fullmatch(r">=(\d+)\.(\d+)", project["requires-python"]).groups())
    assert tuple(int(x) for x in python.removeprefix("python=").split(".")) >= minimum
    assert "pip" in deps
    (editable,) = [p for p in pip if p.startswith("-e ")]
    target = (ENV.parent / editable.removeprefix("-e ").strip()).resolve()
    assert target == REPO and tomllib.loads((target / "pyproject.toml").read_text())["project"]["name"] == "kernattn"
    torch = [d for d in project["dependencies"] if d.startswith("torch")]
    assert [p for p in pip if p.startswith("torch")] == torch


def test_no_rule_claims_the_env():
    """The env file's header says Snakemake does not use it: no rule has a `conda:` directive
    (wiring one in means changing that header, and making the tests' workspaces copy envs/)."""
    snakefile = (REPO / "Snakefile").read_text()
    assert "rule:" in snakefile and not re.search(r"^\s+conda:", snakefile, re.M)
    assert not (REPO / "rules").exists() or not list((REPO / "rules").glob("*.smk"))
