"""The built-in long-context prompt set (``--prompts long-context``) and the plan-time context check.

Lengths are measured with the shipped demo target's tokenizer (offline, in the package); it has no chat
template, so one test adds one to prove the template's tokens are counted."""

import copy
import json

import pytest
from transformers import AutoTokenizer

from eaglehead.builtin import longctx
from eaglehead.builtin.longctx import BUCKETS, PER_BUCKET, TASKS, TOLERANCE, build_long_context, module_source
from eaglehead.builtin.shipped import ASSETS_DIR
from eaglehead.builtin.text import encode_prompt
from eaglehead.eval.plan import EvalPlan
from eaglehead.eval.prompts import Prompt, load_prompt_set, split_prompts

DEMO_CONTEXT = 256  # the demo target's max_position_embeddings


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(ASSETS_DIR))


@pytest.fixture(scope="module")
def built(tok):
    prompts, notes = build_long_context(tok)
    assert notes == []
    return prompts


def test_every_bucket_and_task_holds_its_token_length(tok, built):
    assert [(p.task, p.bucket) for p in built] == [(t, b) for b in BUCKETS for t in TASKS for _ in range(PER_BUCKET)]
    for p in built:
        n = len(encode_prompt(tok, p.text))
        assert n == p.tokens
        assert abs(n - BUCKETS[p.bucket]) <= TOLERANCE * BUCKETS[p.bucket], (p.id, n)
        assert p.category == f"{p.task}-{p.bucket}" and p.id.startswith(f"long-{p.task}-{p.bucket}-")
        assert p.document in p.text
    assert len({p.id for p in built}) == len(built) == len(BUCKETS) * len(TASKS) * PER_BUCKET
    loaded = load_prompt_set("long-context", tokenizer=tok)
    assert loaded == [Prompt(p.id, p.category, p.text, [p.text]) for p in built]


def test_the_chat_template_is_counted(tok):
    chat = copy.deepcopy(tok)
    chat.chat_template = ("{% for m in messages %}<<system: be helpful>> user says: {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}assistant answers:{% endif %}")
    prompts, _ = build_long_context(chat, buckets=("1k",))
    for p in prompts:
        n = len(encode_prompt(chat, p.text))
        assert n == p.tokens and n > len(tok(p.text)["input_ids"])
        assert abs(n - 1024) <= TOLERANCE * 1024


def test_the_set_is_deterministic(tok, built):
    for cached in (module_source, longctx._module_facts, longctx._module_tops, longctx._module_tree):
        cached.cache_clear()
    again, _ = build_long_context(tok)
    assert again == built


def test_qa_answers_are_in_the_document_and_code_stops_mid_file(built):
    qa = [p for p in built if p.task == "qa"]
    assert {p.bucket for p in qa} == set(BUCKETS) and all(p.question and p.answer for p in qa)
    kinds = set()
    for p in qa:
        assert p.question in p.text and p.evidence and p.evidence in p.document, p.id
        source = "".join("".join(module_source(m)) for m in p.modules)
        assert p.evidence in source
        if p.question.startswith("What is the value of the constant"):
            kinds.add("constant")
            name = p.question.split("`")[1]
            assert p.evidence.startswith(f"{name} = {p.answer}"), (p.id, p.evidence)
        else:
            kinds.add("function")
            name = p.question.split("`")[1].split(".")[-1]
            assert f"def {name}(" in p.evidence
            assert all(a.strip("*") in p.evidence for a in p.answer.split(", ")), (p.id, p.answer)
    assert kinds == {"constant", "function"}
    for p in built:
        if p.task == "code":
            whole = "".join(module_source(p.modules[0]))
            assert len(p.modules) == 1 and whole.startswith(p.document) and len(p.document) < len(whole)
            assert p.text.endswith(p.document) and p.document.strip()
        if p.task == "summarise":
            assert "".join(module_source(p.modules[0])).startswith(p.document[:200])


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_the_split_keeps_every_bucket_and_task_on_both_sides(built, fraction):
    prompts = [Prompt(p.id, p.category, p.text, [p.text]) for p in built]
    tune, test = split_prompts(prompts, tune_fraction=fraction)
    categories = {p.category for p in prompts}
    assert len(categories) == len(BUCKETS) * len(TASKS)
    assert {p.category for p in tune} == categories == {p.category for p in test}


def test_a_bucket_too_long_for_the_context_is_left_out_and_said_so(tok):
    with pytest.warns(UserWarning) as caught:
        prompts = load_prompt_set("long-context", tokenizer=tok, max_positions=3000, reserve=128)
    assert {p.category.split("-")[1] for p in prompts} == {"1k", "2k"}
    said = " ".join(str(w.message) for w in caught)
    assert "left out bucket '4k'" in said and "left out bucket '7k'" in said and "3000 positions" in said
    assert "'1k'" not in said and "'2k'" not in said


def test_a_bucket_asked_for_that_does_not_fit_is_refused_by_name(tok):
    assert {p.category for p in load_prompt_set("long-context:2k", tokenizer=tok)} == {f"{t}-2k" for t in TASKS}
    with pytest.raises(ValueError, match=r"bucket '4k' .* 128 positions of output budget .* 3000 positions"):
        load_prompt_set("long-context:1k,4k", tokenizer=tok, max_positions=3000, reserve=128)
    with pytest.raises(ValueError, match=r"unknown bucket.*'9k'.*\['1k', '2k', '4k', '7k'\]"):
        load_prompt_set("long-context:9k", tokenizer=tok)
    with pytest.raises(ValueError, match="no bucket fits the target's context of 256 positions"):
        load_prompt_set("long-context", tokenizer=tok, max_positions=DEMO_CONTEXT, reserve=16)


def test_long_context_without_a_tokenizer_is_refused_by_name():
    for spec in ("long-context", "long-context:1k"):
        with pytest.raises(ValueError, match=f"prompt set '{spec}' needs the target's tokenizer"):
            load_prompt_set(spec)


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_a_long_spec_bench_prompt_loads(tmp_path):
    text = "".join(module_source("argparse"))[:12000]
    path = _write(tmp_path / "long.jsonl", [{"question_id": "long_1", "category": "summary", "turns": [text]},
                                           {"id": "long_2", "category": "summary", "prompt": text * 2}])
    prompts = load_prompt_set(path)
    assert [p.text for p in prompts] == [text, text * 2] and len(prompts[1].text) >= 24000


def _plan(tmp_path, prompts, **kw):
    return EvalPlan(target=str(ASSETS_DIR), prompts=prompts, out=str(tmp_path / "out"), device="cpu",
                    methods=kw.pop("methods", ["vanilla"]), **kw)


def test_an_over_long_prompt_is_refused_at_plan_time(tmp_path, tok):
    long_text = "".join(module_source("argparse"))[:12000]
    path = _write(tmp_path / "p.jsonl", [{"id": "short", "category": "c", "prompt": "def f(x):\n    return x\n"},
                                         {"id": "huge", "category": "c", "prompt": long_text}])
    n = len(encode_prompt(tok, long_text))
    with pytest.raises(ValueError, match=rf"--prompts: prompt 'huge' is {n} tokens; with --max-new-tokens 8 it "
                                         rf"needs {n + 8} positions, more than the target's context of 256"):
        _plan(tmp_path, path, max_new_tokens=8).load_prompts()
    # The budget is exact: prompt + --max-new-tokens (+ the longest draft) up to the context passes.
    short = _write(tmp_path / "s.jsonl", [{"id": "a", "category": "c", "prompt": "def f(x):\n    return x\n"},
                                          {"id": "b", "category": "c", "prompt": "class A:\n    pass\n"}])
    m = max(len(encode_prompt(tok, t)) for t in ("def f(x):\n    return x\n", "class A:\n    pass\n"))
    tune, test = _plan(tmp_path, short, max_new_tokens=DEMO_CONTEXT - m).load_prompts()
    assert len(tune) + len(test) == 2
    with pytest.raises(ValueError, match=rf"is {m} tokens; with --max-new-tokens {DEMO_CONTEXT - m + 1} it needs"):
        _plan(tmp_path, short, max_new_tokens=DEMO_CONTEXT - m + 1).load_prompts()
    gamma = _plan(tmp_path, short, methods=["vanilla", "prompt-lookup"]).draft_headroom()
    assert gamma >= 1
    with pytest.raises(ValueError, match=rf"--max-new-tokens {DEMO_CONTEXT - m} \+ {gamma} draft positions"):
        _plan(tmp_path, short, methods=["vanilla", "prompt-lookup"], max_new_tokens=DEMO_CONTEXT - m).load_prompts()


def test_the_plan_builds_long_context_in_the_targets_tokens(tmp_path, tok):
    # The demo target (context 256) reads its own tokenizer and context: no bucket fits.
    with pytest.raises(ValueError, match="--prompts: long-context: no bucket fits the target's context of 256"):
        _plan(tmp_path, "long-context").load_prompts()
    # A longer context: the output budget (--max-new-tokens) decides which buckets are left.
    for budget, kept in ((128, {"1k", "2k"}), (1000, {"1k"})):
        with pytest.warns(UserWarning) as caught:
            tune, test = _plan(tmp_path, "long-context", max_new_tokens=budget).load_prompts(tokenizer=tok,
                                                                                            max_positions=2400)
        assert {p.category.split("-")[1] for p in tune + test} == kept
        assert {p.category for p in tune} == {p.category for p in test}
        said = [str(w.message) for w in caught]
        assert len(said) == len(BUCKETS) - len(kept)
        assert all(f"{budget} positions of output budget" in m and "context of 2400" in m for m in said)
