"""Chat templates that rewrite history (Qwen3 strips earlier reasoning): a row per assistant turn, each the context
the target sees when it writes that turn, with the loss on that turn only; prefix-stable templates keep one row,
unchanged; the held-out split keeps a conversation's rows together."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from eaglehead.train.chat_rows import TemplateHistoryError, conversation_rows
from eaglehead.train.config import DataConfig
from eaglehead.train.data import NORMALISED_FEATURES, build_dataset, tokenize_conversation, tokenize_conversations

from .test_data import CHATML, masked_runs, tokenizer  # noqa: F401  (the byte-level BPE fixture)

# Qwen3's rule, reduced: an assistant message's "<think>...</think>" is kept only after the last user message
# (the turn being written); earlier assistant turns are rendered without it, and a turn written without reasoning
# still opens with an empty think block.
QWEN3_LIKE = (
    "{%- set ns = namespace(last_user=-1) -%}{%- for m in messages -%}{%- if m['role'] == 'user' -%}"
    "{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- set content = m['content'] -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in content -%}{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}"
    "{%- set content = content.split('</think>')[-1] -%}{%- endif -%}"
    "{%- if loop.index0 > ns.last_user -%}<think>{{ reasoning }}</think>{%- endif -%}{{ content }}"
    "{%- else -%}{{ m['content'] }}{%- endif -%}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
CONV = [
    {"role": "user", "content": "hello there, how are you?"},
    {"role": "assistant", "content": "<think>be kind</think>the quick brown fox"},
    {"role": "user", "content": "and the lazy dog"},
    {"role": "assistant", "content": "<think>think twice</think>jumps over the fox"},
]


def _decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=False)


def test_a_template_that_rewrites_history_gives_a_row_per_turn_in_its_serving_context(tokenizer):  # noqa: F811
    rows = conversation_rows(tokenizer, CONV, QWEN3_LIKE)
    assert len(rows) == 2
    for (ids, mask), upto in zip(rows, (2, 4)):
        # each row is the template's own render through that turn (what the target sees, then writes)
        assert _decode(tokenizer, ids) == tokenizer.apply_chat_template(CONV[:upto], chat_template=QWEN3_LIKE,
                                                                        tokenize=False)
        assert len(masked_runs(ids, mask)) == 1  # the loss is on this row's own (last) turn only
    first, second = (_decode(tokenizer, [i for i, m in zip(ids, mask) if m]) for ids, mask in rows)
    assert first == "<think>be kind</think>the quick brown fox<|im_end|>"
    assert second == "<think>think twice</think>jumps over the fox<|im_end|>"
    context = _decode(tokenizer, [i for i, m in zip(*rows[1]) if not m])
    assert "the quick brown fox" in context and "be kind" not in context  # turn 1 as history: reasoning gone


def test_whole_refuses_it_by_name_and_says_what_to_do(tokenizer):  # noqa: F811
    with pytest.raises(TemplateHistoryError, match="rewrites earlier turns.*turn_rows: auto"):
        conversation_rows(tokenizer, CONV, QWEN3_LIKE, "whole")
    with pytest.raises(TemplateHistoryError):
        tokenize_conversation(tokenizer, CONV, QWEN3_LIKE)
    with pytest.raises(ValueError, match="data.turn_rows: expected one of"):
        conversation_rows(tokenizer, CONV, QWEN3_LIKE, "some")


def test_a_prefix_stable_template_keeps_one_row_and_per_turn_rows_are_its_prefixes(tokenizer):  # noqa: F811
    whole = tokenize_conversation(tokenizer, CONV, CHATML)
    assert conversation_rows(tokenizer, CONV, CHATML) == [whole]  # auto: exactly the one row of before
    per_turn = conversation_rows(tokenizer, CONV, CHATML, "per_turn")
    assert len(per_turn) == 2
    covered = [0] * len(whole[0])
    for ids, mask in per_turn:
        assert whole[0][: len(ids)] == ids  # a prefix of the whole row
        covered = [c | m for c, m in zip(covered, mask + [0] * (len(covered) - len(mask)))]
    assert covered == whole[1]  # the turns' losses together are the whole row's


def test_a_conversation_without_an_answer_is_one_row_without_loss(tokenizer):  # noqa: F811
    [(ids, mask)] = conversation_rows(tokenizer, CONV[:1], QWEN3_LIKE)
    assert ids and not any(mask)


def test_dataset_rows_per_turn_and_the_split_keeps_conversations_together(tokenizer, tmp_path):  # noqa: F811
    convs = [[{**m, "content": f"{m['content']} {k}"} for m in CONV] for k in range(12)]
    ds = Dataset.from_dict({"messages": convs, "text": [None] * 12}, features=NORMALISED_FEATURES)
    rows = tokenize_conversations(ds, tokenizer, 256, QWEN3_LIKE, keep_conversation=True)
    assert len(rows) == 24 and sorted(set(rows["conversation"])) == list(range(12))
    src = tmp_path / "convs.jsonl"
    src.write_text("".join(json.dumps({"messages": c}) + "\n" for c in convs))
    cfg = DataConfig(sources=[str(src)], format="messages", chat_template=QWEN3_LIKE, max_length=256,
                     test_fraction=0.25, seed=3)
    splits = build_dataset(cfg, tokenizer)
    assert len(splits["train"]) + len(splits["test"]) == 24 and len(splits["test"]) == 6  # 3 of 12, 2 rows each
    texts = {name: [_decode(tokenizer, r) for r in splits[name]["input_ids"]] for name in ("train", "test")}
    conv_of = {name: {t.split("hello there, how are you? ")[1].split("<")[0] for t in texts[name]}
               for name in texts}
    assert not conv_of["train"] & conv_of["test"]
    assert set(splits["train"].column_names) == {"input_ids", "loss_mask"}
