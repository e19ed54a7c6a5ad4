"""The docs site builds with warnings as errors (broken links and anchors included), with its
generated parts filled from the code: the params reference, the CLI reference, the CSVs under
results/ and the worked plugin example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernattn.config.loader import SECTIONS
from kernattn.docgen import render_marker
from kernattn.docgen.config_reference import config_reference
from kernattn.docgen.csv_table import csv_table
from kernattn.errors import UsageError

from . import paths

BIN = Path(sys.executable).parent


@pytest.mark.e2e
def test_the_site_builds_strictly_with_its_generated_parts(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(site)], cwd=paths.REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    configuration = (site / "configuration" / "index.html").read_text()
    assert "train.lr" in configuration and "matrix.rows.variant" in configuration
    assert "generated:" not in configuration  # every marker replaced
    cli = (site / "cli" / "index.html").read_text()
    assert "kernattn check-variant" in cli and "--overrides" in cli
    extending = (site / "extending" / "index.html").read_text()
    assert "CosineAttention" in extending  # the worked example, included from examples/plugins
    assert "From <code>results/claims/" in (site / "results" / "index.html").read_text()


def test_every_params_key_has_a_type_a_default_and_a_meaning():
    text = config_reference()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 200
    assert [r.split("|")[1].strip() for r in rows if r.rstrip().endswith("| — |")] == []
    assert all(f"### `{name}`" in text for name in SECTIONS)


def test_a_meaning_keeps_its_angle_brackets_and_pipes():
    from kernattn.docgen.config_reference import escape

    assert escape("runs/<run_id> or `<row>-s<seed>` | none") == "runs/&lt;run_id> or `<row>-s<seed>` \\| none"


def test_a_csv_part_renders_its_columns_and_names_a_bad_one():
    path = "results/claims/small-2026-11-28.csv"
    table = csv_table(path, ["claim", "verdict"])
    assert table.splitlines()[2] == "| claim | verdict |" and "000-gpa-beats-rope" in table
    with pytest.raises(UsageError, match="no column.*nope"):
        csv_table(path, ["claim", "nope"])
    with pytest.raises(UsageError, match="not a file"):
        csv_table("results/no-such.csv")
    with pytest.raises(UsageError, match="unknown generated part"):
        render_marker("figures", "x.md")


def test_the_variants_list_is_the_registry_and_the_equations_name_every_built_in():
    from kernattn.attention import available
    from kernattn.config.variants import describe_variant
    from kernattn.docgen.variants_reference import variants_reference

    table = render_marker("variants", "attention.md")
    names = [line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]]
    assert names == available()
    assert "| `gpa` |" in table and "`combine`: **add** / mult" in table and "gpa-long" in table
    # a variant given to it (a plugin's, as `kernattn variants --plugins` lists it) is a row like any
    plugin = {**describe_variant("softmax"), "name": "mine", "summary": "a | pipe", "kind": "plugin"}
    assert "| `mine` | a \\| pipe |" in variants_reference([plugin])
    page = (paths.REPO / "docs" / "attention.md").read_text()
    equations = page.split("### The equations", 1)[1].split("### What every variant takes", 1)[0]
    built_in = [n for n in available() if describe_variant(n)["kind"] == "built-in"]
    assert [n for n in built_in if f"`{n}`" not in equations] == []
    assert "<!-- generated: variants -->" in page
