"""params.yaml: the scales merge as documented and every bad value fails in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kernattn.config import ParamsError, load_params, run_matrix

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"


def write(tmp_path, doc) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


def base():
    return yaml.safe_load(PARAMS.read_text())


def test_shipped_scales():
    paper = load_params(PARAMS, "paper")
    assert (paper.model.n_layer, paper.model.n_head, paper.model.d_model, paper.model.context) == (4, 4, 512, 256)
    assert (paper.train.batch_size, paper.train.max_steps, paper.data.val_fraction) == (256, 200_000, 0.1)
    assert len(run_matrix(paper)) == 14 * 3
    tiny = load_params(PARAMS)  # the file's own scale
    assert tiny.scale == "tiny" and tiny.train.device == "cpu"
    assert len(run_matrix(tiny)) == 11 * 2  # every row but the bank-size ablation's M = 1, 4, 16
    assert tiny.data.val_fraction == 0.1  # not overridden: inherited from the defaults
    micro = load_params(PARAMS, "micro")
    assert [r.run_id for r in run_matrix(micro)] == ["rope-s0", "gpa_dp_m8-s0"]
    assert paper.digest() != tiny.digest()


def test_matrix_has_the_rows_the_papers_need():
    rows = {r.name: r for r in load_params(PARAMS, "paper").matrix.rows}
    assert rows["gpa_decay_m8"].options == {"n_kernels": 8, "kernel": "decay", "combine": "mult"}
    assert rows["gpa_dp_m8"].options == {"n_kernels": 8, "kernel": "decay_periodic", "combine": "mult"}
    assert rows["gpa_m64"].options["combine"] == "add" and rows["gpa_m64"].options["n_kernels"] == 64
    assert rows["gpa_m64_rope"].options["rope"] is True
    assert {rows[n].options.get("position") for n in ("rope", "learned_rope", "alibi", "t5", "lag_table")} == {
        "rope", "learned_rope", "alibi", "t5", "lag_table"}
    assert rows["gka"].variant == "gka"
    # the bank-size ablation: seed 001's GPA (add, no RoPE) at every M; tiny keeps M = 8 and 64
    for m in (1, 4, 8, 16, 64):
        name = f"gpa_m{m}"
        assert rows[name].options == {"n_kernels": m, "kernel": "decay_periodic", "combine": "add"}, name
    tiny_rows = {r.row for r in run_matrix(load_params(PARAMS, "tiny"))}
    assert {"gpa_m8", "gpa_m64"} <= tiny_rows and not {"gpa_m1", "gpa_m4", "gpa_m16"} & tiny_rows


def test_analysis_section():
    paper, micro = load_params(PARAMS, "paper"), load_params(PARAMS, "micro")
    a = paper.analysis
    assert (a.sample_chars, a.streams, a.temperature, a.bump_min_lag) == (50_000, 50, 1.0, 10)
    assert a.out_dir == "results/paper/analysis" and micro.analysis.out_dir == "results/micro/analysis"
    assert micro.analysis.sample_chars < a.sample_chars  # tests keep the micro analysis fast
    assert micro.analysis.temperature == 1.0  # not overridden: inherited


def test_environment_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNATTN_SCALE", "micro")
    assert load_params(PARAMS).scale == "micro"
    monkeypatch.setenv("KERNATTN_DATA_MIRROR", str(tmp_path / "x.txt"))
    assert load_params(PARAMS).data.mirror == str(tmp_path / "x.txt")


def mutate(fn):
    doc = base()
    fn(doc)
    return doc


BAD = [
    ("yaml syntax", "scale: tiny\nmodel: {n_layer: 2\n", "YAML syntax error"),
    ("unknown top key", mutate(lambda d: d.update(modle={})), "unknown key 'modle'"),
    ("unknown section key", mutate(lambda d: d["train"].update(learning_rate=1)), "unknown key 'train.learning_rate'"),
    ("unknown scale key", mutate(lambda d: d["scales"]["tiny"]["train"].update(lrr=1)), "unknown key 'scales.tiny.train.lrr'"),
    ("wrong type", mutate(lambda d: d["model"].update(n_layer="four")), "model.n_layer must be int"),
    ("bool is not int", mutate(lambda d: d["model"].update(n_head=True)), "model.n_head must be int"),
    ("negative lr", mutate(lambda d: d["train"].update(lr=-1e-3)), "train.lr must be > 0"),
    ("bad choice", mutate(lambda d: d["train"].update(dtype="fp8")), "train.dtype must be one of bfloat16, float32"),
    ("bad fraction", mutate(lambda d: d["data"].update(val_fraction=1.5)), "data.val_fraction must be between 0 and 1"),
    ("unknown scale", mutate(lambda d: d.update(scale="huge")), "unknown scale 'huge'; allowed: micro, paper, tiny"),
    ("unknown variant", mutate(lambda d: d["matrix"]["rows"].append({"name": "x", "variant": "flash"})),
     "unknown attention variant 'flash'; valid names: favor, gka, gpa, nw, softmax, valueless"),
    ("unknown option", mutate(lambda d: d["matrix"]["rows"][0]["options"].update(positon="rope")),
     "unknown option 'positon'"),
    ("bad option value", mutate(lambda d: d["matrix"]["rows"][2]["options"].update(combine="sum")),
     "must be one of add, mult"),
    ("duplicate row", mutate(lambda d: d["matrix"]["rows"].append(dict(d["matrix"]["rows"][0]))), "two rows named 'rope'"),
    ("only unknown row", mutate(lambda d: d["scales"]["micro"]["matrix"].update(only=["ropee"])), "unknown row 'ropee'"),
    ("context longer than lag table", mutate(lambda d: d["model"].update(context=512)), "max_len=256 is shorter than model.context=512"),
    ("heads do not divide width", mutate(lambda d: d["model"].update(n_head=3)), "multiple of model.n_head=3"),
    ("bad value in another scale", mutate(lambda d: d["scales"]["micro"]["train"].update(max_steps=0)),
     "scales.micro -> train.max_steps must be > 0"),
    ("section not a mapping", mutate(lambda d: d.update(train=[1, 2])), "train must be a mapping"),
    ("zero temperature", mutate(lambda d: d["analysis"].update(temperature=0)), "analysis.temperature must be > 0"),
    ("unknown analysis key", mutate(lambda d: d["analysis"].update(samples=10)), "unknown key 'analysis.samples'"),
]


@pytest.mark.parametrize("case,doc,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_params_fail_in_one_line(tmp_path, case, doc, needle):
    path = write(tmp_path, doc)
    scale = "micro" if case == "only unknown row" else ("paper" if case != "unknown scale" else None)
    with pytest.raises(ParamsError) as err:
        load_params(path, scale)
    msg = str(err.value)
    assert needle in msg, msg
    assert msg.startswith(str(path)) and "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(ParamsError, match="no such params file"):
        load_params(tmp_path / "nope.yaml")


def test_each_scale_writes_its_own_outputs():
    tiny, micro = load_params(PARAMS, "tiny"), load_params(PARAMS, "micro")
    assert tiny.data.out_dir == "results/tiny/data/dickens" and micro.data.out_dir == "results/micro/data/dickens"
    assert tiny.train.out_dir != micro.train.out_dir
    assert tiny.tracking.experiment == "kernattn-dickens-tiny"
