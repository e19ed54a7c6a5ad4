"""LM track stages at micro scale through the CLI: prepare-lm, train-lm (steps at matched
FLOPs, the final files), eval-lm (and its one-line errors); every registry variant as a row of
lm.rows trains, resumes and evaluates (parametrised over the registry), and issue 15's row
gpa8 goes through prepare, train and eval. Bit-exact resume, SIGTERM and divergence of
train-lm are test_engine.py's, shared by every track."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kernattn import attention
from kernattn.cli import main
from kernattn.yaml_text import safe_dump, safe_load
from tests import paths

REPO = Path(__file__).resolve().parents[1]
# the shared data beside the checkout (a worktree's parent may not hold it: then the workspace's)
SHARED = paths.DATA
pytestmark = pytest.mark.xdist_group("lm_stages")


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def write_params(folder: Path, **lm) -> Path:
    doc = safe_load((REPO / "params.yaml").read_text())
    doc["scale"] = "micro"
    micro = doc["scales"]["micro"]
    micro["lm"] = {**micro["lm"], "dataset": "c4-sample",  # through the data mirror
                   "eval_dir": str(SHARED / "eval"), "data_dir": str(folder / "lm/data"),
                   "out_dir": str(folder / "lm/runs"), **lm}
    doc["tracking"]["enabled"] = False
    path = folder / "params.yaml"
    path.write_text(safe_dump(doc, sort_keys=False))
    return path


# issue 15's "done when" row: gpa-long's GPA (M = 8, additive, with RoPE) on subword tokens
GPA8 = {"name": "gpa8", "variant": "gpa", "options": {"n_kernels": 8, "combine": "add", "rope": True}}


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """Micro scale's LM rows plus gpa8, prepared through the CLI."""
    folder = tmp_path_factory.mktemp("lm")
    micro_rows = safe_load((REPO / "params.yaml").read_text())["scales"]["micro"]["lm"]["rows"]
    params = write_params(folder, rows=[*micro_rows, GPA8])
    assert main(["prepare-lm", "--params", str(params)]) == 0
    return folder


def test_prepare_writes_bos_delimited_uint16_streams(ws):
    data = ws / "lm/data"
    meta = json.loads((data / "meta.json").read_text())
    train, val = np.load(data / "train.npy"), np.load(data / "val.npy")
    assert train.dtype == np.uint16 and val.dtype == np.uint16
    assert meta["vocab_size"] == 400 and meta["train_docs"] == 130 and meta["val_docs"] == 20
    assert int((train == meta["bos_id"]).sum()) == 130 and int((val == meta["bos_id"]).sum()) == 20
    assert train[0] == meta["bos_id"] and meta["train_tokens"] == train.size
    table = np.load(data / "token_bytes.npy")
    assert int(table[train].sum()) == meta["train_bytes"]  # BPB's byte count is exact
    assert "C4 sample" in meta["source"]["note"]


def test_train_at_matched_flops_then_eval_writes_bpb_and_core(ws):
    params = str(ws / "params.yaml")
    assert main(["train-lm", "--params", params, "--run", "gka_flops-s0"]) == 0
    run = ws / "lm/runs/gka_flops-s0"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if x["split"] == "train"] == list(range(1, 6))  # 4 base steps -> 5 at equal FLOPs
    final = json.loads((run / "final.json").read_text())
    assert final["matched"] == "flops" and final["steps"] == 5 and final["variant"] == "gka"
    assert final["value_embed_layers"] == [] and [b["row"] for b in final["budget"]] == ["gka_flops", "base"]
    weights = torch.load(run / "model.pt", weights_only=True)  # what eval-lm loads: the final weights
    ckpt = torch.load(run / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 5 and all(torch.equal(weights[k], ckpt["model"][k]) for k in weights)

    assert main(["eval-lm", "--params", params, "--run", "gka_flops-s0"]) == 0
    ev = json.loads((ws / "lm/eval/gka_flops-s0.json").read_text())
    assert ev["val_bpb"] > 0 and ev["train_bpb"] > 0 and ev["bpb"]["val"]["tokens"] == 512
    assert set(ev["core"]["tasks"]) == {"hellaswag_zeroshot", "copa", "openbook_qa", "lambada_openai",
                                        "winograd", "winogrande"}
    assert all(t["items"] == 3 for t in ev["core"]["tasks"].values())


def test_eval_with_a_malformed_task_file_is_one_line_exit_2(ws, tmp_path, capsys):
    params = str(ws / "params.yaml")
    assert main(["train-lm", "--params", params, "--run", "base-s0"]) == 0
    bad = tmp_path / "eval"
    bad.mkdir()
    for f in (SHARED / "eval").iterdir():
        (bad / f.name).symlink_to(f)
    (bad / "copa.jsonl").unlink()
    (bad / "copa.jsonl").write_text('{"query": "q", "choices": ["a", "b"], "gold": 1}\n{"query": "q", "gold": 1}\n')
    other = write_params(tmp_path, data_dir=str(ws / "lm/data"), out_dir=str(ws / "lm/runs"), eval_dir=str(bad))
    capsys.readouterr()
    assert main(["eval-lm", "--params", str(other), "--run", "base-s0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{bad / 'copa.jsonl'}: line 2:" in err


def test_unknown_run_is_a_usage_error(ws, capsys):
    assert main(["train-lm", "--params", str(ws / "params.yaml"), "--run", "gka_time-s0"]) == 2
    assert "no LM run 'gka_time-s0'; runs: base-s0, gka_tokens-s0, gka_flops-s0, gpa8-s0" in capsys.readouterr().err


VARIANT_ROWS = [{"name": f"v_{name}", "variant": name} for name in attention.available()]


@pytest.mark.parametrize("row", [GPA8, *VARIANT_ROWS], ids=lambda r: r["name"])
def test_every_registry_variant_trains_resumes_and_evaluates(ws, tmp_path, row, capsys):
    """A row of each registry variant (nanochat's defaults for the options it leaves out), and
    gpa8 with the params file prepare-lm read: train-lm stopped after 2 of 4 steps, the same
    command resumes and finishes, eval-lm writes BPB and the CORE subset. Value embeddings
    exactly for the variants with a value projection."""
    if row is GPA8:
        params, runs = ws / "params.yaml", ws / "lm/runs"
    else:
        runs = tmp_path / "lm/runs"
        params = write_params(tmp_path, rows=[row], data_dir=str(ws / "lm/data"), out_dir=str(runs))
    run_id = f"{row['name']}-s0"
    args = ["--params", str(params), "--run", run_id]
    assert main(["train-lm", *args, "--stop-after", "2", "--no-progress"]) == 0
    assert torch.load(runs / run_id / "ckpt.pt", weights_only=True)["step"] == 2
    capsys.readouterr()
    assert main(["train-lm", *args, "--no-progress"]) == 0
    assert "resuming at step 2" in capsys.readouterr().out
    final = json.loads((runs / run_id / "final.json").read_text())
    lines = [json.loads(x) for x in (runs / run_id / "metrics.jsonl").read_text().splitlines()]
    assert final["steps"] == 4 and [x["step"] for x in lines if x["split"] == "train"] == [1, 2, 3, 4]
    has_v = attention.variant(row["variant"]).module.has_value_projection
    assert bool(final["value_embed_layers"]) == has_v and (final["params"]["value_embeds"] > 0) == has_v
    assert main(["eval-lm", *args]) == 0
    ev = json.loads((runs.parent / "eval" / f"{run_id}.json").read_text())
    assert ev["row"] == row["name"] and ev["variant"] == row["variant"] and ev["options"] == row.get("options", {})
    assert 0 < ev["val_bpb"] < 20 and 0 < ev["train_bpb"] < 20 and len(ev["core"]["tasks"]) == 6
    assert all(t["items"] == 3 for t in ev["core"]["tasks"].values()) and ev["value_embed_layers"] == final["value_embed_layers"]


def test_compute_budgets_chain_and_a_token_budget(ws, tmp_path):
    """{tokens: N} trains the whole steps closest to N tokens; a row matched to a matched row
    follows the chain to the row with a budget of its own."""
    from kernattn.config import load_params
    from kernattn.tracks.lm import flops
    from kernattn.tracks.lm.stages import find_lm_run
    from kernattn.tracks.lm.track import plan

    rows = [{"name": "base", "variant": "base"},
            {"name": "g", "variant": "gka", "compute": {"tokens": 10 * 128 + 40}},  # 10.3 steps of 128 tokens
            {"name": "m", "variant": "base", "compute": {"match": "flops", "row": "g"}},
            {"name": "t", "variant": "gpa", "compute": {"match": "tokens", "row": "m"}}]
    p = load_params(write_params(tmp_path, rows=rows, data_dir=str(ws / "lm/data")))
    tps = flops.tokens_per_step(p.lm)
    assert tps == 4 * 1 * 32
    vocab = json.loads((ws / "lm/data/meta.json").read_text())["vocab_size"]
    info = {name: plan(p.lm, vocab, find_lm_run(p, f"{name}-s0")) for name in ("base", "g", "m", "t")}
    assert info["base"]["steps"] == 4 and info["base"]["budget"][0]["compute"] == "lm.steps"
    assert info["g"]["steps"] == 10 and info["g"]["train_tokens"] == 10 * 128
    g_flops, m_fpt = info["g"]["train_flops"], info["m"]["flops_per_token"]["total"]
    assert m_fpt > info["g"]["flops_per_token"]["total"] and info["m"]["steps"] < 10  # the baseline costs more a token
    assert abs(info["m"]["train_flops"] - g_flops) <= m_fpt * tps / 2  # equal FLOPs, to the nearest step
    assert info["t"]["steps"] == info["m"]["steps"] and [b["row"] for b in info["t"]["budget"]] == ["t", "m", "g"]


def test_parquet_shards_are_read_and_pinned_sha256_checked(tmp_path, capsys, monkeypatch):
    """The FineWeb-Edu path without a network: shards already in the cache folder are used
    (a download is only made for a missing one); a wrong pin is a one-line error."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from kernattn.fetch import sha256_bytes

    shards = tmp_path / "mirror/fineweb_edu"  # a data mirror folder, laid out as the catalogue
    shards.mkdir(parents=True)
    monkeypatch.setenv("KERNATTN_DATA_MIRROR", str(tmp_path / "mirror"))
    texts = [[f"shard {s} document {i}: the café costs 12€ 🙂" for i in range(30)] for s in range(3)]
    for s, docs in enumerate(texts):
        pq.write_table(pa.table({"text": docs}), shards / f"shard_{s:05d}.parquet")
    digests = {str(s): sha256_bytes((shards / f"shard_{s:05d}.parquet").read_bytes()) for s in range(3)}
    bad = {**digests, "1": hashlib.sha256(b"other").hexdigest()}
    params = write_params(tmp_path, mirror=None, dataset="fineweb-edu-shards", shards=3, shard_sha256=bad,
                          max_docs=None)
    assert main(["prepare-lm", "--params", str(params)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "shard_00001.parquet: sha256" in err and "lm.shard_sha256[1]" in err
    params = write_params(tmp_path, mirror=None, dataset="fineweb-edu-shards", shards=3, shard_sha256=digests,
                          max_docs=None)
    assert main(["prepare-lm", "--params", str(params)]) == 0
    meta = json.loads((tmp_path / "lm/data/meta.json").read_text())
    assert meta["source"]["kind"] == "catalogue" and meta["source"]["shards"] == digests
    assert meta["train_docs"] == 60 and meta["val_docs"] == 30  # the last shard is validation
    assert meta["train_bytes"] == sum(len(d.encode()) for docs in texts[:2] for d in docs)
