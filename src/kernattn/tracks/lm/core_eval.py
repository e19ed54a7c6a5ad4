"""The CORE subset of gka-paper (Table 7), scored the way nanochat scores DCLM's CORE.

Six tasks, the catalogue's core-tasks (kernattn/datasets/catalogue.yaml), three kinds:
- multiple_choice (hellaswag_zeroshot, copa, openbook_qa): one context, several
  continuations; the prediction is the continuation with the lowest mean loss per token;
- schema (winograd, winogrande): several contexts, one shared continuation; the prediction
  is the context under which the continuation's mean loss is lowest;
- language_modeling (lambada_openai): correct iff greedy decoding (argmax at every position
  of the continuation, teacher-forced) reproduces the continuation exactly.
Every prompt starts with BOS and is `[few-shot block] context + " " + continuation`; the
few-shot block is k solved examples of the same task joined by blank lines, drawn from the
other items with random.Random(seed + item index) (fixed across runs and models). The
continuation tokens are found from the token lists: the common prefix of the choices
(multiple choice), the common suffix (schema), the prompt without the continuation
(language modelling). A sequence longer than the context keeps its last `context` tokens.

Centered score: (accuracy - b) / (1 - b), b the task's random-guess accuracy (RANDOM_BASELINE:
1/choices for the multiple-choice and schema tasks, 0 for LAMBADA's exact match, as in DCLM's
eval metadata); the CORE subset score is the mean of the six centered scores. Each task's
result also keeps `correct`, 0/1 per item in file order, so that two models can be compared
item by item (the report's paired bootstrap).

HellaSwag: the shared copy is the validation set in llama.cpp's text format, lower-cased
`ctx_b` kept (DCLM's jsonl capitalises it); items are `activity: ctx` with four endings.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...engine.dist import World, gather, val_share

DELIM = " "
KINDS = {"hellaswag_zeroshot": "multiple_choice", "copa": "multiple_choice", "openbook_qa": "multiple_choice",
         "lambada_openai": "language_modeling", "winograd": "schema", "winogrande": "schema"}
FILES = {"hellaswag_zeroshot": "hellaswag_val_full.txt.gz", "copa": "copa.jsonl", "openbook_qa": "openbook_qa.jsonl",
         "lambada_openai": "lambada_openai.jsonl.gz", "winograd": "winograd_wsc.jsonl", "winogrande": "winogrande.jsonl"}
RANDOM_BASELINE = {"hellaswag_zeroshot": 0.25, "copa": 0.5, "openbook_qa": 0.25, "lambada_openai": 0.0,
                   "winograd": 0.5, "winogrande": 0.5}


class EvalDataError(ValueError):
    """A malformed evaluation file: one line naming the file and the line."""


@dataclass(frozen=True)
class Item:
    kind: str
    context: str | None = None          # multiple_choice / language_modeling
    choices: tuple[str, ...] = ()       # multiple_choice
    contexts: tuple[str, ...] = ()      # schema
    continuation: str | None = None     # schema / language_modeling
    gold: int = 0


def centered(acc: float, baseline: float) -> float:
    return (acc - baseline) / (1.0 - baseline)


# ----------------------------------------------------------------------------- reading
def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return fh.read().splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise EvalDataError(f"{path}: unreadable ({exc})") from None


def _jsonl_item(obj, kind: str) -> Item:
    if kind == "multiple_choice":
        choices = tuple(obj["choices"])
        gold = int(obj["gold"])
        if not isinstance(obj["query"], str) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise TypeError("needs a string 'query' and >= 2 string 'choices'")
        if not 0 <= gold < len(choices):
            raise ValueError(f"gold={gold} outside the {len(choices)} choices")
        return Item(kind, context=obj["query"], choices=choices, gold=gold)
    if kind == "schema":
        contexts = tuple(obj["context_options"])
        gold = int(obj["gold"])
        if not isinstance(obj["continuation"], str) or len(contexts) < 2:
            raise TypeError("needs >= 2 'context_options' and a string 'continuation'")
        if not 0 <= gold < len(contexts):
            raise ValueError(f"gold={gold} outside the {len(contexts)} context options")
        return Item(kind, contexts=contexts, continuation=obj["continuation"], gold=gold)
    if not isinstance(obj["context"], str) or not isinstance(obj["continuation"], str) or not obj["continuation"]:
        raise TypeError("needs string 'context' and a non-empty string 'continuation'")
    return Item(kind, context=obj["context"], continuation=obj["continuation"])


def _hellaswag(path: Path, lines: list[str], limit: int | None) -> list[Item]:
    """6 lines per item: context, gold (0-3), four endings."""
    items = []
    if len(lines) % 6:
        raise EvalDataError(f"{path}: line {len(lines)}: {len(lines)} lines is not a multiple of 6 "
                            f"(context, gold, 4 endings per item); the file is truncated")
    for start in range(0, len(lines), 6):
        if limit is not None and len(items) >= limit:
            break
        ctx, gold, *endings = lines[start:start + 6]
        if gold.strip() not in ("0", "1", "2", "3"):
            raise EvalDataError(f"{path}: line {start + 2}: gold label {gold!r} is not 0-3")
        items.append(Item("multiple_choice", context=ctx, choices=tuple(endings), gold=int(gold)))
    return items


def load_task(eval_dir: str | Path, task: str, limit: int | None = None) -> list[Item]:
    """The first `limit` items (None: all) of `task`; a bad line raises EvalDataError."""
    path = Path(eval_dir) / FILES[task]
    if not path.is_file():
        raise EvalDataError(f"{path}: no such file; set lm.eval_dir to the folder of the CORE files")
    lines = _lines(path)
    if task == "hellaswag_zeroshot":
        return _hellaswag(path, lines, limit)
    items = []
    for lineno, line in enumerate(lines, 1):
        if limit is not None and len(items) >= limit:
            break
        if not line.strip():
            continue
        try:
            items.append(_jsonl_item(json.loads(line), KINDS[task]))
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalDataError(f"{path}: line {lineno}: malformed item ({type(exc).__name__}: {exc}); "
                                f"fix or remove the line") from None
    if not items:
        raise EvalDataError(f"{path}: no items")
    return items


# ----------------------------------------------------------------------------- prompts
def fewshot_indices(n_items: int, index: int, k: int, seed: int) -> list[int]:
    if k == 0:
        return []
    pool = [i for i in range(n_items) if i != index]
    return random.Random(seed + index).sample(pool, min(k, len(pool)))


def _solved(item: Item) -> str:
    if item.kind == "multiple_choice":
        return item.context + DELIM + item.choices[item.gold]
    if item.kind == "schema":
        return item.contexts[item.gold] + DELIM + item.continuation
    return item.context + DELIM + item.continuation


def render(item: Item, shots: list[Item]) -> list[str] | tuple[str, str]:
    """The prompts of one item: one per choice / context option, or (without, with) the
    continuation for language modelling."""
    prefix = "".join(_solved(s) + "\n\n" for s in shots)
    if item.kind == "multiple_choice":
        return [prefix + item.context + DELIM + c for c in item.choices]
    if item.kind == "schema":
        return [prefix + c + DELIM + item.continuation for c in item.contexts]
    return prefix + item.context, prefix + item.context + DELIM + item.continuation


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(map(len, seqs))
    for i in range(n):
        if any(s[i] != seqs[0][i] for s in seqs):
            return i
    return n


def _common_suffix(seqs: list[list[int]]) -> int:
    return _common_prefix([s[::-1] for s in seqs])


def spans(item: Item, prompts, encode, bos: int) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Token lists (BOS first) and the [start, end) of the scored continuation in each."""
    if item.kind == "language_modeling":
        without, with_ = ([bos, *encode(p)] for p in prompts)
        start = _common_prefix([without, with_])
        return [with_], [(start, len(with_))]
    seqs = [[bos, *encode(p)] for p in prompts]
    if item.kind == "multiple_choice":
        start = _common_prefix(seqs)
        return seqs, [(start, len(s)) for s in seqs]
    n = _common_suffix(seqs)
    return seqs, [(len(s) - n, len(s)) for s in seqs]


def _crop(seqs, ranges, context: int):
    out_s, out_r = [], []
    for s, (a, b) in zip(seqs, ranges):
        cut = max(0, len(s) - context)
        out_s.append(s[cut:])
        out_r.append((max(1, a - cut), b - cut))  # position 0 has no prediction
    return out_s, out_r


@torch.no_grad()
def span_scores(model_fn, seqs: list[list[int]], ranges: list[tuple[int, int]], pad: int) -> list[tuple[float, int, bool]]:
    """(sum of log-probabilities, tokens, every token the argmax) of each sequence's [start, end)
    span, teacher-forced, float32 logits: what every decision below reads (and what an
    lm-evaluation-harness model must give for the same tokens: tracks/lm/harness.py)."""
    width = max(map(len, seqs))
    x = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    logprobs = F.log_softmax(model_fn(x).float(), dim=-1)
    out = []
    for i, (a, b) in enumerate(ranges):
        lp, want = logprobs[i, a - 1:b - 1], x[i, a:b]
        picked = lp.gather(-1, want[:, None].to(lp.device))[:, 0]
        out.append((float(picked.double().sum()), b - a, bool((lp.argmax(-1) == want.to(lp.device)).all())))
    return out


def score_item(model_fn, item: Item, seqs: list[list[int]], ranges: list[tuple[int, int]], pad: int) -> bool:
    """Is the model right on `item`? model_fn: LongTensor [B, N] -> logits [B, N, V]. Language
    modelling: the greedy continuation; otherwise the option of lowest mean loss per token."""
    scores = span_scores(model_fn, seqs, ranges, pad)
    if item.kind == "language_modeling":
        return scores[0][2]
    losses = [-total / n if n > 0 else float("inf") for total, n, _ in scores]
    return min(range(len(losses)), key=losses.__getitem__) == item.gold


def score_task(model_fn, items: list[Item], encode, bos: int, context: int, k: int, seed: int,
               indices=None) -> list[bool]:
    """Per item of `indices` (default: all, in file order): is the model right? (the report's
    paired bootstrap needs them). The few-shot examples are drawn from all `items` either way."""
    out = []
    for idx in range(len(items)) if indices is None else indices:
        item = items[idx]
        shots = [items[j] for j in fewshot_indices(len(items), idx, k, seed)]
        seqs, ranges = _crop(*spans(item, render(item, shots), encode, bos), context)
        out.append(score_item(model_fn, item, seqs, ranges, pad=bos))
    return out


def evaluate_task(model_fn, items: list[Item], encode, bos: int, context: int, k: int, seed: int) -> float:
    return sum(score_task(model_fn, items, encode, bos, context, k, seed)) / len(items)


def score_across_ranks(model_fn, items: list[Item], encode, bos: int, context: int, k: int, seed: int,
                       world: World) -> list[bool]:
    """score_task over the ranks: item i scored by rank i mod size, the answers gathered back
    into file order on every rank (an item's score depends on nothing else: the same list)."""
    mine = val_share(range(len(items)), world)
    answers: dict[int, bool] = {}
    for part in gather(dict(zip(mine, score_task(model_fn, items, encode, bos, context, k, seed, mine))), world):
        answers.update(part)
    return [answers[i] for i in range(len(items))]


def evaluate_core(model_fn, enc, eval_dir, context: int, limit: int | None, fewshot: dict[str, int],
                  seed: int, bos: int, world: World | None = None) -> dict:
    tasks = {}
    for task in KINDS:
        items = load_task(eval_dir, task, limit)
        correct = score_across_ranks(model_fn, items, enc.encode_ordinary, bos, context, fewshot.get(task, 0), seed,
                                     world or World())
        acc = sum(correct) / len(items)
        b = RANDOM_BASELINE[task]
        tasks[task] = {"kind": KINDS[task], "items": len(items), "fewshot": fewshot.get(task, 0), "accuracy": acc,
                       "random_baseline": b, "centered": centered(acc, b), "correct": [int(c) for c in correct]}
    return {"tasks": tasks, "core": sum(t["centered"] for t in tasks.values()) / len(tasks)}
