"""Loading, normalising, chat-template tokenisation with assistant loss masks, token counts, regeneration."""

from __future__ import annotations

import json
from collections import Counter

import pandas as pd
import pytest
import torch
from datasets import Dataset
from eaglehead.draftheads.vocab import build_draft_vocab, coverage
from eaglehead.train.config import DataConfig
from eaglehead.train.data import (
    NORMALISED_FEATURES,
    TemplateHistoryError,
    build_dataset,
    collate_tokens,
    count_tokens,
    load_conversations,
    regenerate,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_conversations,
)
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tests.tiny_models import tiny_llama

SPECIALS = ["<pad>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"]
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Llama-3 style: BOS, headers, content trimmed, <|eot_id|> closes every turn, nothing after it.
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# Rewrites history: only the last assistant turn keeps an (empty) reasoning block, as Qwen3's template does.
NOT_PREFIX_STABLE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and loop.last %}<think></think>{% endif %}{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The generation prompt says "assistant" but assistant turns are rendered under "bot".
WRONG_GEN_PROMPT = (
    "{% for m in messages %}<|im_start|>{{ 'bot' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EOT = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}
TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3}

CONV = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello there, how are you?"},
    {"role": "assistant", "content": "the quick brown fox é ✓"},
    {"role": "user", "content": "and the lazy dog"},
    {"role": "assistant", "content": "jumps over\nthe fox"},
]


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE (any text round-trips exactly), trained here on a few sentences."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["hello there how are you", "the quick brown fox jumps over the lazy dog", "system user assistant"] * 5
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<|begin_of_text|>",
                                   eos_token="<|im_end|>", clean_up_tokenization_spaces=False)


def masked_runs(ids, mask):
    """Contiguous runs of loss tokens, as id lists."""
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("name", ["chatml", "llama3"])
def test_loss_mask_is_exactly_assistant_content_plus_end_of_turn(tokenizer, name):
    conv = [dict(m) for m in CONV]
    conv[2]["content"] = "  " + conv[2]["content"] + " "  # the Llama-3 template trims; ChatML keeps spaces
    ids, mask = tokenize_conversation(tokenizer, conv, TEMPLATES[name])
    assert tokenizer.decode(ids, skip_special_tokens=False) == tokenizer.apply_chat_template(
        conv, chat_template=TEMPLATES[name], tokenize=False)
    runs = [tokenizer.decode(r, skip_special_tokens=False) for r in masked_runs(ids, mask)]
    strip = str.strip if name == "llama3" else (lambda s: s)
    assert runs == [strip(conv[2]["content"]) + EOT[name], strip(conv[4]["content"]) + EOT[name]]
    # Nothing of the prompt side is a target: the unmasked text still holds every user/system message.
    unmasked = tokenizer.decode([i for i, m in zip(ids, mask) if not m], skip_special_tokens=False)
    for m in conv:
        if m["role"] != "assistant":
            assert m["content"] in unmasked


def test_template_without_prefix_stability_is_refused(tokenizer):
    with pytest.raises(ValueError, match="chat template problem.*not a prefix"):
        tokenize_conversation(tokenizer, CONV, NOT_PREFIX_STABLE)
    # A single assistant turn renders consistently, so that is accepted and masked correctly.
    ids, mask = tokenize_conversation(tokenizer, CONV[:3], NOT_PREFIX_STABLE)
    masked = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    assert masked == "<think></think>" + CONV[2]["content"] + "<|im_end|>"


def test_dataset_errors_name_the_conversation(tokenizer):
    ds = Dataset.from_dict({"messages": [CONV[:3], CONV], "text": [None, None]}, features=NORMALISED_FEATURES)
    with pytest.raises(TemplateHistoryError, match="conversation 1: chat template problem.*turn_rows: auto"):
        tokenize_conversations(ds, tokenizer, 64, NOT_PREFIX_STABLE, turn_rows="whole")
    with pytest.raises(ValueError, match="conversation 0: chat template problem.*generation prompt"):
        tokenize_conversations(ds, tokenizer, 64, WRONG_GEN_PROMPT)


def test_generation_prompt_mismatch_is_refused(tokenizer):
    with pytest.raises(ValueError, match="chat template problem.*generation prompt"):
        tokenize_conversation(tokenizer, CONV, WRONG_GEN_PROMPT)


def test_tokenize_dataset_truncates_and_drops_rows_without_loss(tokenizer):
    full_ids, full_mask = tokenize_conversation(tokenizer, CONV, CHATML)
    first_loss = full_mask.index(1)
    cut = first_loss + 3
    ds = Dataset.from_dict(
        {"messages": [CONV, CONV[:3], []], "text": [None, None, "the lazy dog"]}, features=NORMALISED_FEATURES)
    out = tokenize_conversations(ds, tokenizer, max_length=cut, chat_template=CHATML)
    assert out[0] == {"input_ids": full_ids[:cut], "loss_mask": full_mask[:cut]}
    text_ids = tokenizer("the lazy dog")["input_ids"]
    assert out[2] == {"input_ids": text_ids, "loss_mask": [1] * len(text_ids)}  # plain text: all targets
    # Truncated inside the first prompt: no loss token left, so the row is dropped.
    assert len(tokenize_conversations(ds.select([0]), tokenizer, max_length=first_loss, chat_template=CHATML)) == 0
    with pytest.raises(ValueError, match="data.chat_template"):
        tokenize_conversations(ds, tokenizer, max_length=64)  # the tokenizer has no template of its own


def test_load_normalises_sharegpt_messages_and_text(tmp_path):
    sharegpt = tmp_path / "sg.jsonl"
    rows = [
        {"conversations": [{"from": "gpt", "value": "orphan"}, {"from": "human", "value": "q1"},
                           {"from": "gpt", "value": "a1"}, {"from": "human", "value": "dangling"}]},
        {"conversations": [{"from": "human", "value": "no answer"}]},
    ]
    sharegpt.write_text("\n".join(json.dumps(r) for r in rows))
    messages = tmp_path / "msgs.json"
    chat = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"}]
    messages.write_text(json.dumps([{"messages": chat}]))
    text = tmp_path / "text.parquet"
    pd.DataFrame({"text": ["plain words", ""]}).to_parquet(text)
    ds = load_conversations([str(sharegpt), str(messages), str(text)], system_prompt="default sys")
    assert ds.features == NORMALISED_FEATURES
    assert ds["messages"] == [
        [{"role": "system", "content": "default sys"}, {"role": "user", "content": "q1"},
         {"role": "assistant", "content": "a1"}],
        chat,
        [],
    ]
    assert ds["text"] == [None, None, "plain words"]
    assert len(load_conversations([str(sharegpt), str(messages)], max_samples=1)) == 1

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversations": [{"from": "robot", "value": "x"}]}))
    with pytest.raises(ValueError, match=r"bad.jsonl row 0: unknown role 'robot'"):
        load_conversations([str(bad)])
    with pytest.raises(ValueError, match="format 'text' needs a column 'text'"):
        load_conversations([str(sharegpt)], format="text")
    with pytest.raises(ValueError, match="missing.jsonl: file not found"):
        load_conversations([str(tmp_path / "missing.jsonl")])
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "x"}))
    with pytest.raises(ValueError, match="cannot detect the format"):
        load_conversations([str(other)])


def test_resolve_chat_template(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(CHATML)
    assert resolve_chat_template(str(path)) == CHATML
    assert resolve_chat_template(CHATML) == CHATML and resolve_chat_template(None) is None
    with pytest.raises(ValueError, match="data.chat_template"):
        resolve_chat_template(str(tmp_path / "nope.jinja"))


def test_count_tokens_counts_loss_tokens_only(tokenizer):
    convs = [CONV, CONV[:3], [{"role": "user", "content": "dog dog"}, {"role": "assistant", "content": "fox fox fox"}]]
    rows = Dataset.from_dict({"messages": convs, "text": [None] * 3}, features=NORMALISED_FEATURES)
    ds = tokenize_conversations(rows, tokenizer, 256, CHATML)
    expected = Counter(i for row in ds for i, m in zip(row["input_ids"], row["loss_mask"]) if m)
    counts = count_tokens(ds, len(tokenizer))
    assert counts.dtype == torch.long and counts.shape == (len(tokenizer),)
    assert {i: int(c) for i, c in enumerate(counts) if c} == dict(expected)
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert counts[eot] == 4  # one end-of-turn per assistant turn
    _, t2d = build_draft_vocab(counts, 8)
    assert coverage(counts, t2d) >= 8 / len(expected)  # the 8 most frequent cover at least their share
    with pytest.raises(ValueError, match="vocab_size=10"):
        count_tokens(ds, 10)


def test_collate_right_pads():
    batch = collate_tokens([{"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}, {"input_ids": [8], "loss_mask": [1]}], 9)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]


@pytest.fixture(scope="module")
def chat_model(tokenizer):
    # initializer_range 0.5: well-separated logits, so greedy choices do not hinge on float rounding.
    model = tiny_llama(seed=0, vocab=len(tokenizer), hidden=32, layers=2, initializer_range=0.5)
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return model


CONVS = [
    CONV,
    [{"role": "user", "content": "dog"}, {"role": "assistant", "content": "old"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
     {"role": "assistant", "content": "d"}],
]


def reference_greedy(model, tokenizer, conv, max_new_tokens):
    """Turn-by-turn greedy regeneration of one conversation, unbatched."""
    conv = [dict(m) for m in conv]
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for j, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(conv[:j], chat_template=CHATML, tokenize=False,
                                               add_generation_prompt=True)
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=0)[0, ids.shape[1]:].tolist()
        new = new[: new.index(eot)] if eot in new else new
        conv[j]["content"] = tokenizer.decode(new, skip_special_tokens=True)
    return conv


def test_regenerate_greedy_matches_turn_by_turn_reference(tokenizer, chat_model):
    ds = Dataset.from_dict({"messages": CONVS + [[]], "text": [None, None, None, "keep me"]},
                           features=NORMALISED_FEATURES)
    expected = [reference_greedy(chat_model, tokenizer, c, 4) for c in CONVS]
    for batch_size in (1, 3):  # 3: left-padded batches of different prompt lengths
        out = regenerate(ds, chat_model, tokenizer, temperature=0.0, max_new_tokens=4, batch_size=batch_size,
                         chat_template=CHATML)
        assert out["messages"][:3] == expected and out[3] == {"messages": [], "text": "keep me"}
    for conv, new in zip(CONVS, expected):
        assert [m["role"] for m in new] == [m["role"] for m in conv]
        assert [m for m in new if m["role"] != "assistant"] == [m for m in conv if m["role"] != "assistant"]
        assert all(m["content"] != old["content"] for m, old in zip(new, conv) if m["role"] == "assistant")


def test_regenerate_sampling_is_seeded_and_max_length_cuts(tokenizer, chat_model):
    ds = Dataset.from_dict({"messages": CONVS[1:], "text": [None] * 2}, features=NORMALISED_FEATURES)
    state = torch.get_rng_state()
    runs = [regenerate(ds, chat_model, tokenizer, 1.0, 4, 2, seed=s, chat_template=CHATML)["messages"]
            for s in (7, 7, 8)]
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]  # 3 sampled turns x 4 tokens over ~320 ids: a coincidence is impossible in practice
    def users(convs):
        return [m for c in convs for m in c if m["role"] == "user"]

    assert users(runs[0]) == users(CONVS[1:])
    # The first prompt fits in max_length; the second contains it plus more, so the conversation is cut
    # before its second assistant turn, and the user turn left dangling is dropped too.
    first_prompt = tokenizer.apply_chat_template(CONVS[2][:1], chat_template=CHATML, tokenize=False,
                                                 add_generation_prompt=True)
    max_length = len(tokenizer(first_prompt, add_special_tokens=False)["input_ids"]) + 1
    out = regenerate(ds.select([1]), chat_model, tokenizer, 0.0, 3, 2, chat_template=CHATML, max_length=max_length)
    assert [m["role"] for m in out[0]["messages"]] == ["user", "assistant"]


def test_build_dataset_splits(tmp_path, tokenizer):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps({"messages": CONVS[i % 3]}) for i in range(10)))
    cfg = DataConfig(sources=[str(path)], chat_template=CHATML, max_length=64, test_fraction=0.2)
    splits = build_dataset(cfg, tokenizer)
    assert len(splits["train"]) == 8 and len(splits["test"]) == 2
    assert set(splits["train"].column_names) == {"input_ids", "loss_mask"}
    assert max(len(r) for r in splits["train"]["input_ids"]) <= 64
    with pytest.raises(ValueError, match="data.regenerate"):
        build_dataset(DataConfig(sources=[str(path)], chat_template=CHATML, regenerate=True), tokenizer)


def test_regenerate_passes_enable_thinking_refuses_a_template_that_ignores_it_and_counts_cut_answers(
        tokenizer, chat_model, monkeypatch):
    # CHATML with Qwen3's generation-prompt rule, reduced: enable_thinking false closes an empty think block.
    thinking = CHATML.replace("<|im_start|>assistant\n{% endif %}",
                              "<|im_start|>assistant\n{% if enable_thinking is defined and "
                              "enable_thinking is false %}there how {% endif %}{% endif %}")
    assert thinking != CHATML  # the replacement hit the generation prompt
    ds = Dataset.from_dict({"messages": CONVS[1:2], "text": [None]}, features=NORMALISED_FEATURES)
    seen = []
    real = tokenizer.apply_chat_template

    def spy(*a, **kw):
        seen.append(kw.get("enable_thinking", "absent"))
        return real(*a, **kw)

    monkeypatch.setattr(tokenizer, "apply_chat_template", spy)
    outs = {v: regenerate(ds, chat_model, tokenizer, 0.0, 4, 1, chat_template=thinking, enable_thinking=v)
            for v in (None, False)}
    assert seen == ["absent", False]
    assert outs[None]["messages"] != outs[False]["messages"]  # a different prompt, a different greedy answer
    with pytest.raises(ValueError, match="data.regen_enable_thinking is true, but the chat template never reads"):
        regenerate(ds, chat_model, tokenizer, 0.0, 4, 1, chat_template=CHATML, enable_thinking=True)
    monkeypatch.setattr(tokenizer, "apply_chat_template", real)
    # Cut answers: the tiny model never emits <|im_end|> within 2 tokens here unless the reference says so.
    new = reference_greedy(chat_model, tokenizer, CONVS[2], 2)
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    expect_cut = 0
    for j, m in enumerate(CONVS[2]):
        if m["role"] == "assistant":
            prompt = tokenizer.apply_chat_template(new[:j], chat_template=CHATML, tokenize=False,
                                                   add_generation_prompt=True)
            ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
            gen = chat_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=False,
                                      pad_token_id=0)[0, ids.shape[1]:].tolist()
            expect_cut += eot not in gen
    assert expect_cut > 0
    with pytest.warns(UserWarning, match=f"{expect_cut} of 2 answers reached regen_max_new_tokens \\(2\\)"):
        regenerate(Dataset.from_dict({"messages": CONVS[2:3], "text": [None]}, features=NORMALISED_FEATURES),
                   chat_model, tokenizer, 0.0, 2, 1, chat_template=CHATML)
    assert regenerate.last_stats == {"answers": 2, "answers_cut_at_max_new_tokens": expect_cut}
    with pytest.raises(ValueError, match="regen_enable_thinking: expected null, true or false"):
        DataConfig(sources=["x"], regen_enable_thinking="yes")
