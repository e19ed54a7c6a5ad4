"""The six CORE-6 tasks (gka-paper Table 7) as local lm-evaluation-harness tasks, over the files the
data catalogue already has (core-tasks): no network, the same items the CORE-6 evaluator reads.

    kernattn lm-eval tasks --out DIR [--limit N]      # then: lm_eval --model kernattn --tasks DIR ...

`write(eval_dir, out)` reads each task through core_eval.load_task (so HellaSwag's text format
and every malformed line fail as they do there) and writes, under `out`, one JSON-lines file and
one task YAML per task (task names `core6_<task>`, tag `core6`), plus the functions they name
(UTILS): every task names one, so loading any of them registers the `kernattn` model. Each kind is posed as the harness poses its own version of it, the
target delimiter " " as CORE-6's:
- multiple choice (HellaSwag, COPA, OpenBookQA): context, the choices, acc and acc_norm. The
  harness scores a choice's summed log-likelihood from the end of the context; CORE-6 its mean
  loss per token from where the choices' tokens part, so their accuracies may differ on an item
  whose choices share leading words (docs/tracks.md says which number is which);
- schema (Winograd, Winogrande): the harness's multiple-input form, one shared continuation
  after each context option: the same tokens and the same decision as CORE-6 (one continuation:
  the lowest mean loss is the highest summed log-likelihood);
- language modelling (LAMBADA): loglikelihood of " " + the continuation (the harness adds no
  delimiter there), acc = the greedy continuation reproduces it, as CORE-6 scores it.
Zero-shot: the harness draws few-shot examples its own way; CORE-6's come from core_eval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from . import core_eval as core

GROUP = "core6"
UTILS = "core6_harness_utils.py"
# the schema tasks' multiple-input form: the gold context's index, the options, the continuation
UTILS_SOURCE = '''"""Written by kernattn (tracks/lm/harness_tasks.py): the CORE-6 tasks' functions.

Importing kernattn's harness module here registers the `kernattn` model: the harness's own
`lm_eval --model kernattn --tasks <this folder>` loads every task YAML of a folder (and so this
module) before it looks the model up, and lm-eval 0.4 has no other way to find another
package's model."""

import kernattn.tracks.lm.harness  # noqa: F401


def gold(doc):
    return int(doc["gold"])


def contexts(doc):
    return list(doc["contexts"])


def spaced_continuation(doc):
    return " " + doc["continuation"]
'''


def _record(item: core.Item) -> dict:
    if item.kind == "multiple_choice":
        return {"context": item.context, "choices": list(item.choices), "gold": item.gold}
    if item.kind == "schema":
        return {"contexts": list(item.contexts), "continuation": item.continuation, "gold": item.gold}
    return {"context": item.context, "continuation": item.continuation}


def _config(task: str, data: Path) -> dict:
    kind = core.KINDS[task]
    base = {"task": f"{GROUP}_{task}", "tag": [GROUP], "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(data)}}, "test_split": "test", "target_delimiter": " ",
            "metadata": {"version": 1.0, "source": "kernattn CORE-6 (gka-paper Table 7), data catalogue core-tasks"}}
    if kind == "multiple_choice":
        return {**base, "output_type": "multiple_choice", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
                "doc_to_target": "!function core6_harness_utils.gold",
                "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]}
    if kind == "schema":
        return {**base, "output_type": "multiple_choice", "doc_to_text": "!function core6_harness_utils.gold",
                "doc_to_choice": "!function core6_harness_utils.contexts", "doc_to_target": "{{continuation}}",
                "metric_list": [{"metric": "acc"}]}
    # the harness puts no delimiter before a loglikelihood task's target: the space is the target's own
    return {**base, "output_type": "loglikelihood", "doc_to_text": "{{context}}",
            "doc_to_target": "!function core6_harness_utils.spaced_continuation",
            "metric_list": [{"metric": "acc"}, {"metric": "perplexity"}]}


def _yaml(config: dict) -> str:
    """YAML whose "!function x" strings are the harness's !function tags, not quoted strings."""
    return re.sub(r"'(!function [\w.]+)'", r"\1", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def write(eval_dir: str | Path, out: str | Path, limit: int | None = None, tasks=tuple(core.KINDS)) -> list[str]:
    """The local tasks under `out` (created); returns their harness names, in CORE-6's order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / UTILS).write_text(UTILS_SOURCE)
    names = []
    for task in tasks:
        items = core.load_task(eval_dir, task, limit)
        data = out / f"{task}.jsonl"
        data.write_text("".join(json.dumps(_record(i), ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
        config = _config(task, data.resolve())
        (out / f"{GROUP}_{task}.yaml").write_text(_yaml(config), encoding="utf-8")
        names.append(config["task"])
    return names
