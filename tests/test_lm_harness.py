"""A micro LM run scored through EleutherAI's lm-evaluation-harness, offline (issue 51): the
CORE-6 task files as local harness tasks (tracks/lm/harness_tasks.py), the run as the harness's
`kernattn` model (tracks/lm/harness.py), checked item by item against the CORE-6 evaluator
(core_eval): the same log-likelihoods on the same tokens, and the same accuracy where the two
decide alike (LAMBADA's greedy match, the schema tasks' shared continuation). The run's context
holds every item whole: a longer item is cut from the left by both, the harness keeping one
token more (its convention: context + 1 tokens, the last only predicted), so the two agree
exactly only on items that fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lm_eval  # the `lm` extra, part of `test`  # noqa: E402

from kernattn.cli import main  # noqa: E402
from kernattn.tracks.lm import core_eval as core  # noqa: E402
from kernattn.tracks.lm import harness, harness_tasks  # noqa: E402
from kernattn.tracks.lm import tokenizer as tok  # noqa: E402
from tests.test_lm_stages import SHARED, write_params  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

# a real harness run on a trained model (about 45 s on 2 cores): the end-to-end job
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("lm_harness")]
ITEMS = 4
CONTEXT = 1024
TASKS = ("copa", "winograd", "lambada_openai")


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A trained micro base run, its local tasks and the harness's results with every sample."""
    ws = tmp_path_factory.mktemp("harness")
    # a context every item fits in: the two crop a longer one differently (module docstring)
    params = write_params(ws, context=CONTEXT)
    assert main(["prepare-lm", "--params", str(params)]) == 0
    assert main(["train-lm", "--params", str(params), "--run", "base-s0"]) == 0
    names = harness_tasks.write(SHARED / "eval", ws / "tasks", ITEMS, TASKS)
    model = get_model("kernattn")(run=str(ws / "lm/runs/base-s0"), batch_size=3)
    manager = TaskManager(include_path=str(ws / "tasks"), include_defaults=False)
    results = lm_eval.simple_evaluate(model=model, tasks=names, task_manager=manager, num_fewshot=0,
                                      log_samples=True, bootstrap_iters=0)
    return model, results, ws


def _own(model, task):
    """CORE-6's items of `task`, with each item's token rows and spans as core_eval makes them."""
    items = core.load_task(SHARED / "eval", task, ITEMS)
    enc, bos = model.enc, tok.bos_id(model.enc)
    return items, [core._crop(*core.spans(i, core.render(i, []), enc.encode_ordinary, bos), model.context)
                   for i in items]


def _samples(results, task):
    return sorted(results["samples"][f"core6_{task}"], key=lambda s: s["doc_id"])


def test_the_harness_knows_the_model_and_the_local_tasks(scored):
    _, results, _ = scored
    assert set(results["results"]) >= {f"core6_{t}" for t in TASKS}
    assert all(len(_samples(results, t)) == ITEMS for t in TASKS)


@pytest.mark.parametrize("task", ["lambada_openai", "winograd"])
def test_loglikelihoods_and_accuracy_agree_with_core6_item_by_item(scored, task):
    """The tasks where the harness and CORE-6 score the same tokens the same way: every
    log-likelihood to float tolerance, every item's correctness, so the accuracy too."""
    model, results, _ = scored
    items, rows = _own(model, task)
    fn = model.model
    for item, (seqs, ranges), sample in zip(items, rows, _samples(results, task)):
        assert max(map(len, seqs)) <= model.context, "an item longer than the context: not the same tokens"
        own = core.span_scores(fn, seqs, ranges, pad=model.bos)
        theirs = [r[0] for r in sample["resps"]]   # per option: (log-likelihood, is greedy)
        assert [t[0] for t in theirs] == pytest.approx([o[0] for o in own], abs=1e-4)
        if task == "lambada_openai":
            assert theirs[0][1] == own[0][2]
    correct = core.score_task(fn, items, model.enc.encode_ordinary, model.bos, model.context, 0, 0)
    assert results["results"][f"core6_{task}"]["acc,none"] == pytest.approx(sum(correct) / len(correct))


def test_multiple_choice_loglikelihoods_are_the_model_s_own_on_the_harness_s_span(scored):
    """A choice's log-likelihood from the end of the context (the harness's span; CORE-6 reads
    from where the choices part, by mean loss) equals the run's own model on those tokens."""
    model, results, _ = scored
    items, _ = _own(model, "copa")
    enc, bos = model.enc, model.bos
    for item, sample in zip(items, _samples(results, "copa")):
        ctx = [bos, *enc.encode_ordinary(item.context)]
        seqs = [[bos, *enc.encode_ordinary(item.context + " " + c)] for c in item.choices]
        own = core.span_scores(model.model, seqs, [(len(ctx), len(s)) for s in seqs], pad=bos)
        assert [r[0][0] for r in sample["resps"]] == pytest.approx([o[0] for o in own], abs=1e-4)


def test_rolling_loglikelihood_and_generation_run_on_the_model(scored):
    model, _, _ = scored
    """A text within the context is one window (BOS, then every token scored); a longer one is
    scored in disjoint windows, every token once."""
    short = "The quick brown fox jumps over the lazy dog."
    ids = model.tok_encode(short, add_special_tokens=False)
    (total,) = model.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (short,), 0)])
    assert total == pytest.approx(model.score_continuations([([model.bos], ids)])[0][0], abs=1e-6)
    long = short + " " + short * 60
    assert len(model.tok_encode(long, add_special_tokens=False)) > model.context
    (total,) = model.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (long,), 0)])
    assert total < 0 and total == total   # finite
    out = model.generate_until([Instance(
        "generate_until", {}, ("Once upon a time", {"until": ["\n"], "max_gen_toks": 5}), 0)])
    assert isinstance(out[0], str) and "\n" not in out[0]


def test_the_harness_s_own_command_scores_a_run_on_a_task_folder(scored):
    """`lm_eval --model kernattn --tasks <folder kernattn wrote>`: the harness's console script,
    not kernattn's, finds the model (loading the folder imports the module that registers it) and
    gives the accuracies the in-process evaluation gave on the same items."""
    _, results, ws = scored
    script = Path(sys.executable).with_name("lm_eval")
    done = subprocess.run([str(script), "run", "--model", "kernattn", "--model_args", f"run={ws / 'lm/runs/base-s0'}",
                           "--tasks", str(ws / "tasks"), "--output_path", str(ws / "cli")],
                          capture_output=True, text=True, cwd=ws, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (found,) = (ws / "cli").rglob("results_*.json")
    got = json.loads(found.read_text())["results"]
    assert {t: got[f"core6_{t}"]["acc,none"] for t in TASKS} == {
        t: results["results"][f"core6_{t}"]["acc,none"] for t in TASKS}
    assert "core6_copa" in done.stdout   # its table


def test_a_folder_that_is_not_an_lm_run_is_one_clear_error(tmp_path):
    from kernattn.errors import UsageError

    with pytest.raises(UsageError, match="no finished LM run"):
        harness.load_run(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"track": "char"}))
    (tmp_path / "model.pt").write_bytes(b"")
    with pytest.raises(UsageError, match="not an LM run"):
        harness.load_run(Path(tmp_path))
