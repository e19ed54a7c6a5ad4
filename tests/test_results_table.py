"""The README's results table is generated from the claims CSV it names (report.results_table)."""

from pathlib import Path

import pandas as pd
import pytest

from kernattn import cli
from kernattn.errors import UsageError
from kernattn.report import results_table

REPO = Path(__file__).resolve().parents[1]

CSV = '''claim,paper,where,statement,paper_value,ours,estimate,ci_lo,ci_hi,interval,verdict,scale,section,detail
000-x,000,Fig 2,"a < b (validation MCE)",—,"a − b: -0.02 [-0.03, -0.01]",-0.02,-0.03,-0.01,95% t,consistent at small,small,claims,
001-y,001,Sec 3,"one | two",—,,,,,,not run,small,claims,
'''


def test_the_table_of_a_claims_csv(tmp_path):
    """One line a claim: its document's key, the statement, the verdict's badge (its head, not
    its reasons), the effect with its interval, or else what was measured, shortened."""
    long = "x" * 100
    (tmp_path / "c.csv").write_text(CSV + f"003-z,003,T5,{long},—,{long},,,,,"
                                          f"at scale small: not judged (gap not stable: ...),small,claims,\n")
    head = ("| claim | document | what the paper says | verdict (papers' recipe) | other recipe "
            "| effect [95% interval] or what we measured |\n|---|---|---|---|---|---|\n")
    assert results_table.table(tmp_path / "c.csv") == (
        "*From `c.csv` (scale small). One recipe: every parameter at the papers' one learning rate; no other arm "
        "trained at this scale.*\n\n" + head +
        "| 000-x | gpa-short | a < b (validation MCE) | consistent | — | -0.0200 [-0.0300, -0.0100] |\n"
        "| 001-y | gpa-long | one \\| two | not run | — | — |\n"
        f"| 003-z | gka-paper | {'x' * 89}… | not judged | — | {'x' * 59}… |\n")


def test_the_other_recipe_arm_is_its_own_column(tmp_path):
    """A char claim judged on the papers' recipe prints the other lr factor's verdict after "; ":
    the table shows both, and says when the two arms' intervals exclude 0 on opposite sides."""
    arm = ("at scale small: holds at this budget, shrinking toward zero (a + b/L over 200–800 steps); the ×10 arm "
           "(variant-owned parameters at 10 × the lr, not the papers' one lr): reverses with budget (crosses near "
           "900 steps; a + b/L over 200–800 steps) — the verdict depends on the recipe")
    (tmp_path / "c.csv").write_text(CSV + f'000-w,000,Fig 2,"a < rope",—,,,,,,"{arm}",small,claims,\n')
    lines = results_table.table(tmp_path / "c.csv").splitlines()
    assert lines[0] == "*From `c.csv` (scale small).*"
    assert lines[-1] == ("| 000-w | gpa-short | a < rope | holds, shrinking | ×10: reverses (depends on the recipe) "
                         "| — |")
    assert lines[4].split(" | ")[4] == "—"     # a claim without an arm


def test_latest_is_the_newest_published_csv_by_its_date(tmp_path):
    for name in ("small-2026-11-25.csv", "small-2026-11-27-eb4a0b9.csv", "small-2026-11-28-pairs.csv", "notes.csv"):
        (tmp_path / name).write_text(CSV)
    assert results_table.latest(tmp_path).name == "small-2026-11-27-eb4a0b9.csv"
    (tmp_path / "small-2026-11-27.csv").write_text(CSV)
    with pytest.raises(UsageError, match="share the newest date"):
        results_table.latest(tmp_path)
    with pytest.raises(UsageError, match="no published claims CSV"):
        results_table.latest(tmp_path / "none")


def test_sync_writes_the_block_and_check_sees_a_stale_one(tmp_path, capsys):
    (tmp_path / "c.csv").write_text(CSV)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- results-table: c.csv -->\nold\n<!-- /results-table -->\nafter\n")
    args = ["results-table", "--readme", str(readme)]
    assert cli.main([*args, "--check"]) == 1 and "differs from its CSV" in capsys.readouterr().out
    assert cli.main(args) == 0
    text = readme.read_text()
    assert text.startswith("# x\n<!-- results-table: c.csv -->\n*From `c.csv`") and text.endswith("<!-- /results-table -->\nafter\n")
    assert cli.main([*args, "--check"]) == 0
    readme.write_text("no block\n")
    with pytest.raises(UsageError, match="no '<!-- results-table: CSV -->'"):
        results_table.sync(readme, check=True)


def test_the_readme_table_is_its_csvs():
    # the newest published runs: `latest`, or the published CSVs it names (several of one date:
    # the documents' claims at one scale, the reviewers' controls at another)
    _, _, named = results_table.block((REPO / "README.md").read_text(), "README.md")
    dates = {m.group("date") for f in (REPO / "results" / "claims").glob("*.csv")
             if (m := results_table.PUBLISHED.fullmatch(f.name))}
    assert named == "latest" or all(
        (m := results_table.PUBLISHED.fullmatch(Path(c).name)) and m.group("date") == max(dates) and (REPO / c).is_file()
        for c in named.split()), named
    assert results_table.sync(REPO / "README.md", check=True), "run: kernattn results-table"


def test_version(capsys):
    from kernattn import __version__

    assert cli.main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"kernattn {__version__}"


def test_several_csvs_give_each_claim_from_the_run_that_judged_it(tmp_path):
    """The documents' claims from one scale, the reviewers' from another (issue 50): a claim's
    line is the last CSV's that ran it, else the first's; a column names the scale."""
    def csv(name, rows):
        path = tmp_path / name
        pd.DataFrame([{"claim": c, "paper": p, "statement": f"s {c}", "verdict": v, "ours": "o", "estimate": "",
                       "ci_lo": "", "ci_hi": "", "scale": name.split("-")[0]} for c, p, v in rows]).to_csv(path, index=False)
        return path
    a = csv("small_long-2026-12-02.csv", [("000-x", "000", "at scale small_long: inconclusive"),
                                          ("rev-y", "reviewers", "at scale small_long: not run")])
    b = csv("controls-2026-12-02.csv", [("000-x", "000", "at scale controls: not run"),
                                        ("rev-y", "reviewers", "consistent at controls")])
    lines = results_table.table([a, b]).splitlines()
    assert lines[0] == ("*From `small_long-2026-12-02.csv`, `controls-2026-12-02.csv` (scale small_long, controls; "
                        "each claim from the run that judged it). One recipe: every parameter at the papers' one "
                        "learning rate; no other arm trained at this scale.*")
    assert lines[4].startswith("| 000-x | gpa-short |") and "| inconclusive |" in lines[4] and lines[4].endswith(" small_long |")
    assert lines[5].startswith("| rev-y | reviewers |") and "| consistent |" in lines[5] and lines[5].endswith(" controls |")
