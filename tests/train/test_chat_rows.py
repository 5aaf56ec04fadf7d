"""Chat templates that rewrite history (Qwen3 strips earlier reasoning): a row per assistant turn, each the context
the target sees when it writes that turn, with the loss on that turn only; prefix-stable templates keep one row,
unchanged; the held-out split keeps a conversation's rows together."""

from __future__ import annotations

import copy
import json

import pytest
from datasets import Dataset

from eaglehead.train.chat_rows import TemplateHistoryError, conversation_rows
from eaglehead.train.config import DataConfig
from eaglehead.train.data import NORMALISED_FEATURES, build_dataset, tokenize_conversation, tokenize_conversations

from .test_data import CHATML, LLAMA3, masked_runs, tokenizer  # noqa: F401  (the byte-level BPE fixture)

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


def _rows_per_turn(tok, template):
    """CONV's rows under ``template``, checked to be one per assistant turn, each the template's own render
    through that turn (what the target sees, then writes) with the loss on that turn only; and the two turns'
    loss tokens as text."""
    rows = conversation_rows(tok, CONV, template)
    assert len(rows) == 2
    for (ids, mask), upto in zip(rows, (2, 4)):
        assert _decode(tok, ids) == tok.apply_chat_template(CONV[:upto], chat_template=template, tokenize=False)
        assert len(masked_runs(ids, mask)) == 1
    first, second = (_decode(tok, [i for i, m in zip(ids, mask) if m]) for ids, mask in rows)
    return rows, first, second

def test_a_template_that_rewrites_history_gives_a_row_per_turn_in_its_serving_context(tokenizer):  # noqa: F811
    rows, first, second = _rows_per_turn(tokenizer, QWEN3_LIKE)
    assert first == "<think>be kind</think>the quick brown fox<|im_end|>"
    assert second == "<think>think twice</think>jumps over the fox<|im_end|>"
    context = _decode(tokenizer, [i for i, m in zip(*rows[1]) if not m])
    assert "the quick brown fox" in context and "be kind" not in context  # turn 1 as history: reasoning gone


# GPT-OSS's harmony, reduced: the turn being written ends with <|return|>, the same turn in history with <|end|>
# (and history drops the analysis channel): earlier turns change once a later one exists.
HARMONY_LIKE = (
    "{%- for m in messages -%}<|start|>{{ m['role'] }}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- set final = m['content'].split('</think>')[-1] -%}"
    "{%- if loop.last -%}{%- if '</think>' in m['content'] -%}<|channel|>analysis<|message|>"
    "{{ m['content'].split('</think>')[0].split('<think>')[-1] }}<|end|><|start|>assistant{%- endif -%}"
    "<|channel|>final<|message|>{{ final }}<|return|>"
    "{%- else -%}<|channel|>final<|message|>{{ final }}<|end|>{%- endif -%}"
    "{%- else -%}<|message|>{{ m['content'] }}<|end|>{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)


def test_a_harmony_like_template_gives_a_row_per_turn_ending_as_the_target_writes_it(tokenizer):  # noqa: F811
    rows, first, second = _rows_per_turn(tokenizer, HARMONY_LIKE)
    # the loss is on exactly what the target writes after "<|start|>assistant": analysis, then final, <|return|>
    assert first == ("<|channel|>analysis<|message|>be kind<|end|><|start|>assistant<|channel|>final<|message|>"
                     "the quick brown fox<|return|>")
    assert second.endswith("<|channel|>final<|message|>jumps over the fox<|return|>")
    context = _decode(tokenizer, [i for i, m in zip(*rows[1]) if not m])
    # turn 1 as history: the final channel only, closed by <|end|>; its analysis gone
    assert "<|channel|>final<|message|>the quick brown fox<|end|>" in context and "be kind" not in context
    with pytest.raises(TemplateHistoryError):
        conversation_rows(tokenizer, CONV, HARMONY_LIKE, "whole")

def test_whole_refuses_it_by_name_and_says_what_to_do(tokenizer):  # noqa: F811
    with pytest.raises(TemplateHistoryError, match="rewrites earlier turns.*turn_rows: auto"):
        conversation_rows(tokenizer, CONV, QWEN3_LIKE, "whole")
    with pytest.raises(TemplateHistoryError):
        tokenize_conversation(tokenizer, CONV, QWEN3_LIKE)
    with pytest.raises(ValueError, match="data.turn_rows: expected one of"):
        conversation_rows(tokenizer, CONV, QWEN3_LIKE, "some")


@pytest.mark.parametrize("template", [CHATML, LLAMA3], ids=["chatml", "llama3"])
def test_a_prefix_stable_template_keeps_one_row_and_per_turn_rows_are_its_prefixes(tokenizer, template):  # noqa: F811
    whole = tokenize_conversation(tokenizer, CONV, template)
    assert conversation_rows(tokenizer, CONV, template) == [whole]  # auto: exactly the one row of before
    per_turn = conversation_rows(tokenizer, CONV, template, "per_turn")
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


# --- reasoning targets: data.thinking_loss / data.thinking_markers / data.last_turn_only ------------------------

# DeepSeek-R1's way: the generation prompt itself opens the thinking span; the answer closes it.
R1_LIKE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}{% if m['role'] == 'assistant' %}"
    "{{ '<think>\\n' }}{% endif %}{{ m['content'] + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)


@pytest.fixture(scope="module", params=["marker pieces", "marker tokens"])
def think_tok(request, tokenizer):  # noqa: F811
    """The fixture BPE (``<think>`` splits into pieces), or a copy where the markers are added (non-special)
    tokens, as in Qwen3's and DeepSeek-R1's tokenizers."""
    if request.param == "marker pieces":
        return tokenizer
    tok = copy.deepcopy(tokenizer)
    tok.add_tokens(["<think>", "</think>"], special_tokens=False)
    assert len(tok("<think>x</think>", add_special_tokens=False)["input_ids"]) == 3
    return tok


def _loss_text(tok, ids, mask, keep=1):
    return _decode(tok, [i for i, m in zip(ids, mask) if m == keep])


def _expected_without_thinking(tok, ids, mask, spans):
    """The default mask with every token whose first character lies in a ``spans`` character range cleared."""
    offsets = tok(_decode(tok, ids), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert len(offsets) == len(ids)
    return [int(m and not any(a <= s < b for a, b in spans)) for m, (s, _) in zip(mask, offsets)]


def _think_spans(text, opening="<think>", closing="</think>"):
    """Every ``<think>...</think>`` of ``text`` (the last, if unclosed, to the end), found independently."""
    spans, pos = [], 0
    while (s := text.find(opening, pos)) >= 0:
        e = text.find(closing, s)
        spans.append((s, len(text) if e < 0 else e + len(closing)))
        pos = len(text) if e < 0 else e + len(closing)
    return spans


def test_thinking_loss_false_drops_exactly_the_thinking_tokens_and_keeps_the_rest(think_tok):
    for template, n_rows in ((QWEN3_LIKE, 2), (CHATML, 1)):  # a row per turn; one row holding both turns
        before = conversation_rows(think_tok, CONV, template)
        after = conversation_rows(think_tok, CONV, template, thinking_loss=False)
        assert len(before) == len(after) == n_rows
        for (ids, mask), (ids2, mask2) in zip(before, after):
            assert ids2 == ids  # the same tokens, only the loss moves
            spans = [(a, b) for a, b in _think_spans(_decode(think_tok, ids))]
            assert mask2 == _expected_without_thinking(think_tok, ids, mask, spans)  # token by token
            assert sum(mask2) < sum(mask)
    rows = conversation_rows(think_tok, CONV, QWEN3_LIKE, thinking_loss=False)
    assert [_loss_text(think_tok, *r) for r in rows] == ["the quick brown fox<|im_end|>",
                                                         "jumps over the fox<|im_end|>"]
    [(ids, mask)] = conversation_rows(think_tok, CONV, CHATML, thinking_loss=False)
    assert _loss_text(think_tok, ids, mask) == "the quick brown fox<|im_end|>jumps over the fox<|im_end|>"
    dropped = [i for i, m, m0 in zip(ids, mask, conversation_rows(think_tok, CONV, CHATML)[0][1]) if m0 and not m]
    assert _decode(think_tok, dropped) == "<think>be kind</think><think>think twice</think>"  # markers included


def test_a_thinking_span_opened_by_the_generation_prompt_ends_at_its_closing_marker(think_tok):
    conv = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "be kind</think>the fox"}]
    [(ids, mask)] = conversation_rows(think_tok, conv, R1_LIKE, thinking_loss=False)
    assert _loss_text(think_tok, ids, mask) == "the fox<|im_end|>"
    [(_, mask0)] = conversation_rows(think_tok, conv, R1_LIKE)
    assert _decode(think_tok, [i for i, m, m0 in zip(ids, mask, mask0) if m0 and not m]) == "be kind</think>"


def test_an_unclosed_thinking_span_masks_to_the_end_of_the_turn(think_tok):
    cut = [CONV[0], {"role": "assistant", "content": "the fox\n<think>and the lazy dog jumps over"}]
    [(ids, mask)] = conversation_rows(think_tok, cut, CHATML, thinking_loss=False)
    assert _loss_text(think_tok, ids, mask) == "the fox\n"  # the end-of-turn token goes with the cut span
    [(_, mask0)] = conversation_rows(think_tok, cut, CHATML)
    assert _decode(think_tok, [i for i, m, m0 in zip(ids, mask, mask0) if m0 and not m]) == \
        "<think>and the lazy dog jumps over<|im_end|>"
    # Qwen3's template renders an answer without "</think>" after an empty think block: both spans are dropped
    [(ids, mask)] = conversation_rows(think_tok, cut, QWEN3_LIKE, thinking_loss=False)
    assert "<think></think>the fox\n<think>and the lazy" in _decode(think_tok, ids)
    assert _loss_text(think_tok, ids, mask) == "the fox\n"


def test_last_turn_only_leaves_the_loss_on_the_final_assistant_turn(think_tok):
    [row] = conversation_rows(think_tok, CONV, QWEN3_LIKE, last_turn_only=True)
    assert row == conversation_rows(think_tok, CONV, QWEN3_LIKE)[-1]  # the last turn's row; the others had no loss
    [(ids, mask)] = conversation_rows(think_tok, CONV, CHATML, last_turn_only=True)
    [(ids0, mask0)] = conversation_rows(think_tok, CONV, CHATML)
    assert ids == ids0 and len(masked_runs(ids0, mask0)) == 2
    assert masked_runs(ids, mask) == masked_runs(ids0, mask0)[-1:]
    gap = next(k for k in range(mask0.index(1), len(mask0)) if not mask0[k])  # the first turn's run ends here
    assert mask == [0] * gap + mask0[gap:]  # token by token: the first turn's loss gone, the last turn's kept
    [(_, both)] = conversation_rows(think_tok, CONV, CHATML, last_turn_only=True, thinking_loss=False)
    assert _loss_text(think_tok, ids, both) == "jumps over the fox<|im_end|>"


def test_the_defaults_give_the_rows_of_before(think_tok, tmp_path):
    for template in (QWEN3_LIKE, CHATML, R1_LIKE):
        conv = CONV if template != R1_LIKE else [CONV[0], {**CONV[1], "content": "be kind</think>the fox"}]
        plain = conversation_rows(think_tok, conv, template)
        assert conversation_rows(think_tok, conv, template, thinking_loss=True, last_turn_only=False,
                                 thinking_markers=["<reason>", "</reason>"]) == plain
        # markers the template never renders: nothing is dropped
        assert conversation_rows(think_tok, conv, template, thinking_loss=False,
                                 thinking_markers=["<reason>", "</reason>"]) == plain
    first = conversation_rows(think_tok, CONV, QWEN3_LIKE)[0]
    assert _loss_text(think_tok, *first) == "<think>be kind</think>the quick brown fox<|im_end|>"  # as before
    src = tmp_path / "convs.jsonl"
    src.write_text(json.dumps({"messages": CONV}) + "\n")
    ds = Dataset.from_dict({"messages": [CONV], "text": [None]}, features=NORMALISED_FEATURES)
    old = tokenize_conversations(ds, think_tok, 256, QWEN3_LIKE)
    new = build_dataset(DataConfig(sources=[str(src)], format="messages", chat_template=QWEN3_LIKE, max_length=256),
                        think_tok)["train"]
    assert new["input_ids"] == old["input_ids"] and new["loss_mask"] == old["loss_mask"]
    off = build_dataset(DataConfig(sources=[str(src)], format="messages", chat_template=QWEN3_LIKE,
                                   max_length=256, thinking_loss=False), think_tok)["train"]
    assert off["input_ids"] == old["input_ids"] and off["loss_mask"] == [
        m for _, m in conversation_rows(think_tok, CONV, QWEN3_LIKE, thinking_loss=False)]
    last = build_dataset(DataConfig(sources=[str(src)], format="messages", chat_template=QWEN3_LIKE,
                                    max_length=256, last_turn_only=True), think_tok)["train"]
    assert last["input_ids"] == old["input_ids"][-1:]


@pytest.mark.parametrize("key, value, message", [
    ("thinking_markers", ["<think>"], "thinking_markers: expected two non-empty strings"),
    ("thinking_markers", ["<think>", ""], "thinking_markers: expected two non-empty strings"),
    ("thinking_markers", "<think></think>", "thinking_markers: expected two non-empty strings"),
    ("thinking_markers", ["<think>", "</think>", "<x>"], "thinking_markers: expected two non-empty strings"),
    ("thinking_loss", "no", "thinking_loss: expected true or false"),
    ("last_turn_only", 1, "last_turn_only: expected true or false"),
])
def test_bad_thinking_settings_are_refused_by_name(tmp_path, tokenizer, key, value, message):  # noqa: F811
    with pytest.raises(ValueError, match=message):
        DataConfig(sources=["x.jsonl"], **{key: value})
    with pytest.raises(ValueError, match=f"data.{message}"):
        kw = {key: value} if key != "thinking_markers" else {key: value, "thinking_loss": False}
        conversation_rows(tokenizer, CONV, CHATML, **kw)
    from eaglehead.builtin.typed_config import load_config
    from eaglehead.train.recipe import TrainConfig

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"output_dir: o\nmodel:\n  target: t\ndata:\n  sources: [x.jsonl]\n  {key}: {json.dumps(value)}\n")
    with pytest.raises(ValueError, match=f"data.{key}"):
        load_config(TrainConfig, cfg)
