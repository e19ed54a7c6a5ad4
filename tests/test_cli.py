"""The `kernattn` command line: the grouped command list, --overrides in every command's help,
the renamed commands' old names, --version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kernattn
from kernattn import cli
from kernattn.cli import GROUPS, RENAMED, STAGES, main
from kernattn.config import load_params
from kernattn.dag.stages import stage_table
from kernattn.stage import command_name

from .paths import REPO

BIN = Path(sys.executable).parent


def listed(help_text: str) -> dict[str, list[str]]:
    """{group title: the commands listed under it} of `kernattn --help` (its epilog)."""
    groups: dict[str, list[str]] = {}
    current = None
    for line in help_text.split("\ncommands:\n", 1)[1].splitlines():
        if m := re.match(r"^(\S.*):$", line):
            current = groups.setdefault(m.group(1), [])
        elif current is not None and (m := re.match(r"^  (\S+)( |$)", line)) and m.group(1) != "COMMAND":
            current.append(m.group(1))
    return groups


@pytest.mark.parametrize("columns", ["60", "100", "200"])
def test_help_lists_every_command_once_under_its_group(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    groups = listed(out)
    assert list(groups) == list(GROUPS)
    names = [name for names in groups.values() for name in names]
    assert sorted(names) == sorted(STAGES) and len(names) == len(set(names)), names
    assert groups["LM track"] == ["prepare-lm", "train-lm", "eval-lm", "import-lm", "export-lm"]
    assert not set(RENAMED) & set(names)  # the old names run, they are not listed
    assert all(len(line) <= int(columns) - 2 for line in out.splitlines() if line.startswith("  ")), out
    # each command's one-line help, wrapped beside it
    text = " ".join(out.split())
    assert all(" ".join(STAGES[name][1].split()) in text for name in STAGES)


def test_every_commands_help_documents_overrides(capsys):
    for name in STAGES:
        assert main([name, "--help"]) == 0, name
        out = " ".join(capsys.readouterr().out.split())
        assert f"usage: kernattn {name} " in out and "--overrides FILE" in out, (name, out[:600])
        assert "YAML file of params overrides" in out, name


def test_overrides_is_an_option_of_every_command_before_or_after_its_name(capsys):
    parser = cli.build_parser("prepare")
    assert parser.parse_args(["prepare", "--overrides", "b.yaml"]).overrides == "b.yaml"
    before = parser.parse_args(["--overrides", "a.yaml", "prepare"])
    assert before.overrides == "a.yaml" and not hasattr(before, cli.BEFORE_COMMAND)
    assert parser.parse_args(["prepare"]).overrides is None
    assert parser.parse_args(["--overrides", "a.yaml", "prepare", "--overrides", "a.yaml"]).overrides == "a.yaml"
    with pytest.raises(SystemExit) as stop:  # two files: which one would be meant?
        parser.parse_args(["--overrides", "a.yaml", "prepare", "--overrides", "b.yaml"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "a.yaml" in err and "b.yaml" in err, err
    # nothing of it is left in the environment for another load_params or a child process
    assert not [k for k, v in os.environ.items() if v in ("a.yaml", "b.yaml")]
    # a command that reads no params file says so, and so does one that measures fixed shapes;
    # install-profile reads params only for its plan (--plan-params at --plan-scale)
    help_text = " ".join(cli.build_parser("results-table").stages["results-table"].format_help().split())
    assert "results-table reads no params file, so they change nothing" in help_text
    help_text = " ".join(cli.build_parser("install-profile").stages["install-profile"].format_help().split())
    assert "applied over --plan-params at --plan-scale" in help_text
    help_text = " ".join(cli.build_parser("gpu-check").stages["gpu-check"].format_help().split())
    assert "gpu-check measures fixed shapes at its own scales, so they change nothing" in help_text


@pytest.mark.parametrize("where", ["before", "after"])
def test_overrides_change_what_the_command_reads_before_or_after_its_name(tmp_path, capsys, where):
    """`kernattn --overrides F data list` and `kernattn data list --overrides F` both list the data
    set F names; without F the command reads the file alone; a missing F is one line naming it."""
    over = tmp_path / "over.yaml"
    over.write_text("data: {dataset: gutenberg-dickens}\n")
    argv = ["data", "list", "--params", str(REPO / "params.yaml"), "--scale", "micro"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert "silesia-dickens" in plain and "gutenberg-dickens" not in plain, plain
    with_file = ["--overrides", str(over), *argv] if where == "before" else [*argv, "--overrides", str(over)]
    assert main(with_file) == 0
    shown = capsys.readouterr().out
    assert "gutenberg-dickens" in shown and "silesia-dickens" not in shown, shown
    assert main(argv) == 0 and capsys.readouterr().out == plain  # the file applied to that command only
    gone = str(tmp_path / "gone.yaml")
    assert main(["--overrides", gone, *argv] if where == "before" else [*argv, "--overrides", gone]) == 2
    err = capsys.readouterr().err
    assert err == f"kernattn data: error: {gone}: no such overrides file (--overrides)\n", err


def test_a_renamed_commands_old_name_runs_it_after_a_hint(capsys, monkeypatch):
    from kernattn.tracks.lm import export_nanochat, import_nanochat

    ran = []
    for module in (import_nanochat, export_nanochat):
        monkeypatch.setattr(module, "run", lambda args: ran.append(args) or 7)
    assert main(["lm-import", "--nanochat", "some/dir", "--run", "base-s0"]) == 7
    assert ran[-1].command == "import-lm" and str(ran[-1].nanochat) == "some/dir"
    assert capsys.readouterr().err == "kernattn lm-import: renamed to import-lm; the old name still works\n"
    assert main(["lm-export", "--run", "base-s0", "--out", "x"]) == 7 and ran[-1].command == "export-lm"
    assert capsys.readouterr().err == "kernattn lm-export: renamed to export-lm; the old name still works\n"
    assert main(["import-lm", "--nanochat", "d", "--run", "base-s0"]) == 7
    assert capsys.readouterr().err == ""  # the new name: no hint
    # a usage error under the old name names the command it runs
    assert main(["lm-export", "--run", "base-s0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("kernattn lm-export: renamed") and err[1].startswith("kernattn export-lm: error:"), err


def test_the_old_name_through_the_installed_command():
    proc = subprocess.run([str(BIN / "kernattn"), "lm-export", "--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "kernattn lm-export: renamed to export-lm; the old name still works\n"
    assert proc.stdout.startswith("usage: kernattn export-lm ")


def test_no_pipeline_stage_is_renamed():
    """A stage's command name is its rule, DVC stage and profile key: renaming one would orphan
    them. Every stage of every scale has its command, and none of RENAMED's names is a stage's."""
    stages = {command_name(s) for scale in ("micro", "tiny", "small", "paper")
              for s in stage_table(load_params(REPO / "params.yaml", scale))}
    assert stages <= set(STAGES), sorted(stages - set(STAGES))
    assert not (set(RENAMED) | set(RENAMED.values())) & stages
    assert set(RENAMED.values()) <= set(STAGES) and not set(RENAMED) & set(STAGES)


def test_version_prints_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kernattn {kernattn.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", kernattn.__version__)
