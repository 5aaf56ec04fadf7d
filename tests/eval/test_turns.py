"""Multi-turn prompt sets: MT-bench from the installed wheel, turn k asked after the target's own cached
answers to earlier turns, and turn 1 / turn 2 / both reported overall and per category."""

import json

import pytest
import torch

import eaglehead.eval.runner as runner
import eaglehead.eval.turns as turns
from eaglehead.builtin.text import encode_prompt
from eaglehead.decode import SamplingConfig, vanilla_generate
from eaglehead.eval.prompts import MT_BENCH, Prompt, expand_turns, load_prompt_set, split_prompts
from tests.eval.test_runner import _args, workspace  # noqa: F401  (the module-scoped tiny target)

TWO_TURN = [
    ("q1", "writing", ["write a short poem about the sea", "write about the blue sea"]),
    ("q2", "writing", ["write a poem about the wind and the sea", "write a short poem about the cold wind"]),
    ("q3", "code", ["explain how a for loop works", "explain a loop in python"]),
    ("q4", "code", ["explain the code for each item in a list", "how does python code repeat"]),
]


def test_mtbench_prompt_set_has_80_two_turn_questions_and_a_stratified_split():
    prompts = load_prompt_set(MT_BENCH)
    assert len(prompts) == 80 and all(len(p.turns) == 2 and p.text == p.turns[0] for p in prompts)
    cats = {p.category for p in prompts}
    assert cats == {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
    tune, test = split_prompts(prompts, 0.25)
    for c in cats:  # 10 per category: round(2.5) = 3 tune (round half up) and 7 test, in every category
        assert sum(p.category == c for p in tune) == 3 and sum(p.category == c for p in test) == 7


def test_a_prompt_file_with_an_empty_turn_names_the_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": 1, "category": "a", "turns": ["hi"]}) + "\n"
                    + json.dumps({"id": 2, "category": "a", "turns": ["hello", "  "]}) + "\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:2: turn 2 is empty"):
        load_prompt_set(path)


def test_expand_turns_puts_the_earlier_answer_in_the_history():
    p = Prompt("7", "math", "a?", ["a?", "b?"])
    one, two = expand_turns([p], {"7": ["A."]})
    assert (one.id, one.turn, one.history, one.question_id) == ("7", 1, (), "7")
    assert (two.id, two.turn, two.text, two.question_id) == ("7/t2", 2, "b?", "7")
    assert two.history == ({"role": "user", "content": "a?"}, {"role": "assistant", "content": "A."})
    with pytest.raises(ValueError, match="turn 2 needs the answer to turn 1"):
        expand_turns([p], {})


def _tiny(workspace):  # noqa: F811
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(workspace["root"] / "target").eval(), workspace["tok"]


def test_earlier_answers_are_the_greedy_answers_and_are_cached(workspace, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model, tok = _tiny(workspace)
    prompts = [Prompt(i, c, t[0], t) for i, c, t in TWO_TURN]
    eos = {tok.eos_token_id}
    answers = turns.earlier_answers(model, tok, prompts, max_new_tokens=6, eos=eos, pad_id=tok.pad_token_id,
                                    progress=False)
    for p in prompts:  # each equals batch-1 greedy decoding of turn 1
        ids = torch.tensor([encode_prompt(tok, p.turns[0])])
        res = vanilla_generate(model, ids, sampling=SamplingConfig(temperature=0), max_new_tokens=6,
                               eos_token_id=sorted(eos))
        assert answers[p.id] == [tok.decode([t for t in res.tokens[0] if t not in eos],
                                            skip_special_tokens=True).strip()]
    monkeypatch.setattr(turns, "vanilla_generate", lambda *a, **k: pytest.fail("the cached answers were redone"))
    assert turns.earlier_answers(model, tok, prompts, max_new_tokens=6, eos=eos, pad_id=tok.pad_token_id,
                                 progress=False) == answers
    with torch.no_grad():  # other weights: another fingerprint, so another cache entry
        next(model.parameters()).mul_(1.01)
    with pytest.raises(pytest.fail.Exception):
        turns.earlier_answers(model, tok, prompts, max_new_tokens=6, eos=eos, pad_id=tok.pad_token_id,
                              progress=False)


def test_eval_asks_turn_two_after_the_cached_answer_and_reports_each_turn(workspace, tmp_path, monkeypatch):  # noqa: F811,E501
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "two_turn.jsonl"
    path.write_text("".join(json.dumps({"id": i, "category": c, "turns": t}) + "\n" for i, c, t in TWO_TURN))
    seen = {}
    real = runner.encode_prompt

    def spy(tok, text, **kw):
        seen[text] = kw.get("history", ())
        return real(tok, text, **kw)

    monkeypatch.setattr(runner, "encode_prompt", spy)
    plan = _args(workspace, tmp_path / "out", "--methods", "vanilla,prompt-lookup", "--gamma", "2",
                 "--batch-sizes", "1,2", "--tune-fraction", "0")
    plan.prompts = str(path)
    report = runner.run_eval(plan)
    cached = json.loads(next((tmp_path / "cache" / "eaglehead" / "turn-answers").glob("*.json")).read_text())
    for qid, _, (t1, t2) in TWO_TURN:
        assert seen[t2] == ({"role": "user", "content": t1}, {"role": "assistant", "content": cached[qid][0]})
        assert seen[t1] == ()
    for method in ("vanilla", "prompt-lookup"):
        for bsz in (1, 2):
            rows = {(r["category"], r["turn"]): r for r in report["runs"]
                    if (r["method"], r["batch_size"]) == (method, bsz)}
            assert set(rows) == {(c, t) for c in ("all", "code", "writing") for t in ("all", 1, 2)}
            assert rows[("all", 1)]["requests"] == rows[("all", 2)]["requests"] == 4
            assert rows[("all", "all")]["requests"] == 8
            assert rows[("all", 1)]["output_tokens"] + rows[("all", 2)]["output_tokens"] == \
                rows[("all", "all")]["output_tokens"]
            assert rows[("code", 2)]["requests"] == 2
    assert report["identity"]["all_identical"] is True and report["consistency_violations"] == []
