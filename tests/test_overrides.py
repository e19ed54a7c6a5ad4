"""Overrides take everything params.yaml takes (issue 23 part 5): a full copy of the file as
--configfile changes nothing, a copy with one value changed changes that value, `scale`
selects the scale, `scales` merge over the file's; every unknown key of a source is named,
with the source; what reaches a Snakemake job (the overrides file) gives the same params."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernattn.config import Params, ParamsError, load_params, params_from_args
from kernattn.dag import snakemake as dag_smk
from kernattn.yaml_text import safe_dump, safe_load

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


def full_copy() -> dict:
    return safe_load(PARAMS.read_text())


def settings(tmp_path: Path, *docs: dict, config: dict | None = None) -> SimpleNamespace:
    """Snakemake's config settings for `--configfile` of each doc (written as c0.yaml, ...)
    and `--config` (its values strings, as Snakemake's parser leaves them)."""
    files = []
    for i, doc in enumerate(docs):
        files.append(tmp_path / f"c{i}.yaml")
        files[-1].write_text(safe_dump(doc, sort_keys=False))
    return SimpleNamespace(configfiles=files, config=config or {})


def differences(a: Params, b: Params) -> dict[str, tuple]:
    """{"section.key": (a's value, b's value)} for every field that differs."""
    out = {}
    for section in (f.name for f in dataclasses.fields(Params) if dataclasses.is_dataclass(getattr(a, f.name))):
        left, right = dataclasses.asdict(getattr(a, section)), dataclasses.asdict(getattr(b, section))
        out |= {f"{section}.{k}": (left[k], right[k]) for k in left if left[k] != right[k]}
    return out


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for name in ("KERNATTN_SCALE",):
        monkeypatch.delenv(name, raising=False)


def test_a_full_copy_of_params_yaml_changes_nothing(tmp_path):
    plain = load_params(PARAMS)
    for scale in (None, "paper", "micro"):
        assert load_params(PARAMS, scale, [("my.yaml", full_copy())]) == load_params(PARAMS, scale)
    smk = dag_smk.load(str(PARAMS), settings(tmp_path, full_copy()))
    assert smk == plain and smk.raw == plain.raw and smk.digest() == plain.digest()
    assert smk.changes == {} and dag_smk.overrides_file(smk, str(tmp_path / "o")) is None  # commands as without


def test_a_copy_with_one_value_changed_changes_that_value(tmp_path):
    """One top-level value and one under scales.tiny: at tiny both change, nothing else; the
    overrides file a job gets gives the same params; a top-level value the copy's own tiny
    scale sets changes the paper scale only (as the same edit of params.yaml would)."""
    doc = full_copy()
    doc["train"]["weight_decay"] = 0.2
    doc["scales"]["tiny"]["train"]["lr"] = 4.0e-3
    base, over = load_params(PARAMS, "tiny"), dag_smk.load(str(PARAMS), settings(tmp_path, doc))
    assert differences(base, over) == {"train.weight_decay": (0.1, 0.2), "train.lr": (2.0e-3, 4.0e-3)}
    assert over.changes == {"train": {"weight_decay": 0.2, "lr": 4.0e-3}}
    path = dag_smk.overrides_file(over, str(tmp_path / "o"))
    assert load_params(PARAMS, over.scale, [(path, safe_load(Path(path).read_text()))]) == over
    doc = full_copy()
    doc["train"]["lr"] = 5.0e-4  # tiny sets its own train.lr
    assert differences(load_params(PARAMS, "tiny"), load_params(PARAMS, "tiny", [("my.yaml", doc)])) == {}
    assert differences(load_params(PARAMS, "paper"), load_params(PARAMS, "paper", [("my.yaml", doc)])) == {
        "train.lr": (1.0e-3, 5.0e-4)}


def test_a_section_override_wins_over_the_files_scale():
    """A partial source's sections apply over the chosen scale (the file's scales.tiny sets
    train.lr); within one source, its scales.<scale> wins over its sections."""
    assert load_params(PARAMS, "tiny", {"train": {"lr": 0.5}}).train.lr == 0.5
    both = {"train": {"lr": 0.5}, "scales": {"tiny": {"train": {"lr": 0.25}}, "micro": {"train": {"lr": 0.125}}}}
    assert load_params(PARAMS, "tiny", both).train.lr == 0.25
    assert load_params(PARAMS, "micro", both).train.lr == 0.125
    assert load_params(PARAMS, "paper", both).train.lr == 0.5


def test_configfiles_in_order_then_config(tmp_path):
    first, second = {"train": {"lr": 0.1, "beta1": 0.8}}, {"scales": {"tiny": {"train": {"lr": 0.2}}}}
    p = dag_smk.load(str(PARAMS), settings(tmp_path, first, second))
    assert (p.train.lr, p.train.beta1) == (0.2, 0.8)
    p = dag_smk.load(str(PARAMS), settings(tmp_path, first, second, config={"train": {"lr": "0.3"}}))
    assert (p.train.lr, p.train.beta1) == (0.3, 0.8)


def test_scale_in_a_configfile_selects_the_scale(tmp_path, monkeypatch):
    doc = full_copy()
    doc["scale"] = "micro"
    assert dag_smk.load(str(PARAMS), settings(tmp_path, doc)) == load_params(PARAMS, "micro")
    # --config scale=... after a configfile's; the argument (kernattn --scale) before both
    assert dag_smk.load(str(PARAMS), settings(tmp_path, doc, config={"scale": "paper"})).scale == "paper"
    assert load_params(PARAMS, "tiny", [("my.yaml", doc)]).scale == "tiny"
    monkeypatch.setenv("KERNATTN_SCALE", "paper")  # a source's scale is the Snakemake config's: it wins
    assert load_params(PARAMS, None, [("my.yaml", doc)]).scale == "micro"
    with pytest.raises(ParamsError, match=r"^my\.yaml: unknown scale 'huge'; allowed: controls, micro, paper, small, small_long, tiny$"):
        load_params(PARAMS, None, [("my.yaml", {"scale": "huge"})])


def test_a_source_may_add_a_scale(tmp_path):
    """A scale named only in a source: the defaults (paper) with its overrides; the overrides
    file names it, so that a job's `--scale mine` loads."""
    doc = {"scale": "mine", "scales": {"mine": {"train": {"max_steps": 7}}}}
    p = dag_smk.load(str(PARAMS), settings(tmp_path, doc))
    assert (p.scale, p.train.max_steps, p.train.out_dir) == ("mine", 7, "results/mine/runs")
    renamed = {k: v for k, v in differences(load_params(PARAMS, "paper"), p).items()
               if str(v[0]).replace("paper", "mine") != str(v[1])}  # {scale} in paths and names aside
    assert renamed == {"train.max_steps": (200_000, 7)}
    path = dag_smk.overrides_file(p, str(tmp_path / "o"))
    assert load_params(PARAMS, "mine", [(path, safe_load(Path(path).read_text()))]) == p


def test_every_unknown_key_of_a_source_is_named_with_the_source(tmp_path):
    doc = {"trian": {"lr": 1}, "matrix": {"rowz": []}}
    with pytest.raises(SystemExit) as err:  # the Snakefile's parse stops with the one line
        dag_smk.load(str(PARAMS), settings(tmp_path, doc))
    assert str(err.value.code) == (
        f"kernattn: error: {tmp_path / 'c0.yaml'}: unknown keys 'trian', 'matrix.rowz'; allowed: at the top: data, model, train, "
        "tracking, matrix, report, analysis, bench, vision, lm, studies, datasets, scale, scales, plugins; in matrix: seeds, rows, only")
    with pytest.raises(ParamsError, match=r"^--config: unknown keys 'lm\.depht', 'scales\.tiny\.trian', "
                                          r"'scales\.tiny\.train\.lrr'; allowed: in lm: dataset, .*; "
                                          r"in scales\.tiny: data, model, .*; in scales\.tiny\.train: batch_size, "):
        load_params(PARAMS, None, [("--config", {"lm": {"depht": 3}, "scales": {"tiny": {"trian": 1, "train": {"lrr": 1}}}})])
    # in the params file itself too, nested entries included (a data.urls entry)
    doc = full_copy()
    doc["train"]["lr_max"], doc["data"]["urls"] = 1, [{"url": "https://x.org/a.txt", "sha": "0" * 64}]
    path = tmp_path / "params.yaml"
    path.write_text(safe_dump(doc))
    with pytest.raises(ParamsError, match=rf"^{path}: unknown keys 'data\.urls\[0\]\.sha', 'train\.lr_max'; "
                                          r"allowed: in data\.urls\[0\]: url, sha256; in train: batch_size"):
        load_params(path)


def test_a_bad_value_in_another_scale_of_a_source_names_it():
    with pytest.raises(ParamsError, match=r"^my\.yaml: scales\.micro -> train\.max_steps must be > 0"):
        load_params(PARAMS, "tiny", [("my.yaml", {"scales": {"micro": {"train": {"max_steps": 0}}}})])


def test_the_snakefile_helpers():
    from kernattn.dag.stages import stage_table

    stages = stage_table(load_params(PARAMS, "micro"))
    train, report = stages["train"], stages["report"]
    assert dag_smk.run_constraint(train) == "rope-s0|gpa_dp_m8-s0"
    assert dag_smk.shell_of(train).startswith("kernattn train {params.options} --run {wildcards.run}")
    assert dag_smk.shell_of(report).endswith(" > {log} 2>&1") and "{wildcards" not in dag_smk.shell_of(report)
    assert stages["bench"].threads == "all" and dag_smk.threads_of(stages["bench"], 6) == 6
    assert dag_smk.threads_of(train, 6) == train.threads == 1


@pytest.mark.e2e
def test_snakemake_takes_a_full_copy_as_configfile(tmp_path):
    """The real parse (about 3 s a dry run): a full copy schedules what no configfile does,
    with no --overrides; a copy with one micro value changed passes that value to the jobs."""
    from tests.test_pipeline import dry_run_jobs
    from tests.workspace import make_workspace

    ws = make_workspace(tmp_path / "ws")
    doc = safe_load((ws / "params.yaml").read_text())
    (ws / "full.yaml").write_text(safe_dump(doc, sort_keys=False))
    plain, _ = dry_run_jobs(ws, "--forceall")
    jobs, proc = dry_run_jobs(ws, "--forceall", "-p", "--configfile", "full.yaml")
    assert proc.returncode == 0 and jobs == plain and "--overrides" not in proc.stdout, proc.stderr[-2000:]
    variant = copy.deepcopy(doc)
    variant["scales"]["micro"]["train"]["max_steps"] = 7
    (ws / "variant.yaml").write_text(safe_dump(variant, sort_keys=False))
    jobs, proc = dry_run_jobs(ws, "-p", "--configfile", "variant.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "train@rope-s0" in jobs
    [path] = {line.split("--overrides ")[1].split()[0] for line in proc.stdout.splitlines() if "--overrides " in line}
    assert safe_load((ws / path).read_text()) == {"train": {"max_steps": 7}}


def test_kernattn_overrides_takes_a_full_copy(tmp_path):
    """`kernattn --overrides FILE` (a command's params_from_args) reads the same documents."""
    doc = full_copy()
    doc["scales"]["micro"]["train"]["max_steps"] = 9
    path = tmp_path / "my.yaml"
    path.write_text(safe_dump(doc))
    micro = params_from_args(SimpleNamespace(params=str(PARAMS), scale="micro", overrides=str(path)))
    assert micro.train.max_steps == 9 and micro.overrides == str(path)
    own = params_from_args(SimpleNamespace(params=str(PARAMS), scale=None, overrides=str(path)))
    assert own.scale == "tiny"  # the copy's own scale
    assert load_params(PARAMS, "micro").train.max_steps != 9  # a load without the file: the params file alone
