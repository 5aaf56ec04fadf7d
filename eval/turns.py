"""The target's own answers to earlier turns of multi-turn prompts, generated once and cached.

MT-bench asks turn 2 after the model's answer to turn 1. So that every method, temperature and batch
size sees the same two-turn context, the earlier answers are generated once per target (greedy, with
the evaluation's token budget, our vanilla loop) and cached under ``~/.cache/eaglehead/turn-answers``,
keyed by a fingerprint of the target's weights and config, the chat template, the turns and the budget.
"""

from __future__ import annotations

import hashlib
import json
import os

import torch

from eaglehead.builtin.paths import cache_root
from eaglehead.builtin.text import encode_prompt, left_pad
from eaglehead.decode import SamplingConfig, vanilla_generate

from .prompts import Prompt

BATCH = 8


def model_fingerprint(model: torch.nn.Module) -> str:
    """A hash of the config and, per parameter, its name, shape, dtype, float64 sum and first values:
    any change of weights changes it, without hashing every byte."""
    h = hashlib.sha256(model.config.to_json_string(use_diff=False).encode())
    with torch.no_grad():
        for name, p in model.named_parameters():
            head = p.detach().flatten()[:64].double().cpu().numpy().tobytes()
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}:{float(p.double().sum()):.17g}".encode() + head)
    return h.hexdigest()


def earlier_answers(model, tok, prompts: list[Prompt], *, max_new_tokens: int, eos: set[int], pad_id: int,
                    progress: bool = True) -> dict[str, list[str]]:
    """``{prompt id: [answer to turn 1, ..., answer to turn k-1]}`` for every prompt with k > 1 turns."""
    multi = [p for p in prompts if len(p.turns) > 1]
    if not multi:
        return {}
    key = hashlib.sha256(json.dumps({
        "model": model_fingerprint(model), "template": getattr(tok, "chat_template", None),
        "turns": [[p.id, p.turns] for p in multi], "max_new_tokens": max_new_tokens, "eos": sorted(eos),
    }, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_root() / "turn-answers" / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    answers: dict[str, list[str]] = {p.id: [] for p in multi}
    device = next(model.parameters()).device
    depth = max(len(p.turns) for p in multi)
    from tqdm.auto import tqdm

    bar = tqdm(total=sum(len(p.turns) - 1 for p in multi), desc="earlier turns (greedy, cached)", unit="answer",
               disable=not progress)
    for k in range(1, depth):  # answer turn k of every conversation that has a turn k + 1
        todo = [p for p in multi if len(p.turns) > k]
        rows = [encode_prompt(tok, p.turns[k - 1], history=_history(p, answers[p.id])) for p in todo]
        order = sorted(range(len(todo)), key=lambda i: len(rows[i]))
        for j in range(0, len(order), BATCH):
            part = order[j:j + BATCH]
            ids, mask = left_pad([rows[i] for i in part], pad_id, device)
            res = vanilla_generate(model, ids, attention_mask=mask, sampling=SamplingConfig(temperature=0),
                                   max_new_tokens=max_new_tokens, eos_token_id=sorted(eos) or None)
            for i, toks in zip(part, res.tokens):
                text = tok.decode([t for t in toks if t not in eos], skip_special_tokens=True).strip()
                answers[todo[i].id].append(text)
            bar.update(len(part))
    bar.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(answers, ensure_ascii=False))
    os.replace(tmp, path)
    return answers


def _history(p: Prompt, answers: list[str]) -> list[dict]:
    out = []
    for user, assistant in zip(p.turns, answers):
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return out
