"""regenerate.enable_thinking: passed to the template that renders the prompt the target answers (the one render
every engine's token ids come from), refused by name for a template that never reads it; a reasoning run with a
short max_new_tokens is warned about in the manifest."""

import json

import pytest

from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import ChatDataConfig, RegenerateConfig, SynthesisConfig, shard_defining
from eaglehead.datagen.thinking import THINKING_MIN_NEW_TOKENS, thinking_warnings
from tests.tiny_models import save_tiny_target

# Qwen3's rule for the generation prompt, reduced: enable_thinking false closes an empty think block at once.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
CONV = [{"role": "user", "content": "def add(a, b): return a + b"}]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """``{"thinking": dir, "plain": dir}``: tiny targets whose templates read enable_thinking, and do not."""
    out = {}
    for name in ("thinking", "plain"):
        path = tmp_path_factory.mktemp(f"tiny_{name}_target")
        _, tok = save_tiny_target(path, seed=3, layers=1)
        if name == "thinking":
            tok.chat_template = THINKING_TEMPLATE
            tok.save_pretrained(path)
        out[name] = str(path)
    return out


def _cfg(target, out, enable_thinking=None, max_new_tokens=6):
    return ChatDataConfig(
        target=target, out_dir=str(out),
        synthesis=SynthesisConfig(magpie_prompts=2, stdlib_prompts=1, pydoc_prompts=0, second_turn_fraction=0.0,
                                  max_new_tokens=4, max_rounds=4, keep_unfinished=True),
        regenerate=RegenerateConfig(max_new_tokens=max_new_tokens, batch_size=3, shard_size=4,
                                    enable_thinking=enable_thinking))


def test_enable_thinking_reaches_the_template_that_renders_the_answer_prompt(targets, tmp_path):
    ids, texts = {}, {}
    for value in (None, True, False):
        target = datagen._Target(_cfg(targets["thinking"], tmp_path, value), assemble_only=True)
        tok = target.tok
        kwargs = {} if value is None else {"enable_thinking": value}
        direct = tok.apply_chat_template(CONV, tokenize=False, add_generation_prompt=True, **kwargs)
        texts[value], ids[value] = target.assistant_text(CONV), target.assistant_prefix(CONV)
        assert texts[value] == direct
        assert ids[value] == tok(direct, add_special_tokens=False)["input_ids"]
    assert ids[False] != ids[True] and texts[False].endswith("assistant\n<think>\n\n</think>\n\n")
    assert ids[True] == ids[None]  # this template's own default thinks
    # the Magpie prefixes render the same conversation under the same setting (no generation prompt: unchanged here)
    assert datagen._Target(_cfg(targets["thinking"], tmp_path, False), assemble_only=True).user_prefix(CONV) == \
        datagen._Target(_cfg(targets["thinking"], tmp_path), assemble_only=True).user_prefix(CONV)


@pytest.mark.parametrize("value", [True, False])
def test_a_template_that_never_reads_enable_thinking_is_refused_by_name_before_generating(targets, tmp_path,
                                                                                          monkeypatch, value):
    def no_sampling(*a, **kw):
        raise AssertionError("sampled before the refusal")

    monkeypatch.setattr(datagen, "sample_stream", no_sampling)
    with pytest.raises(ValueError, match=f"regenerate.enable_thinking is {str(value).lower()}, but the chat template "
                                         f"of target '{targets['plain']}' never reads enable_thinking"):
        datagen.run(_cfg(targets["plain"], tmp_path / "out", value))
    assert not (tmp_path / "out" / "config.json").exists()  # the directory is not keyed to the refused settings
    datagen._Target(_cfg(targets["plain"], tmp_path), assemble_only=True)  # null: the template's default, no check


def test_a_reasoning_run_with_a_short_answer_budget_is_warned_about_in_the_manifest(targets, tmp_path, monkeypatch):
    monkeypatch.setattr(cd, "clean_user_turn", lambda text, **kw: text.strip() or None)
    manifest = datagen.run(_cfg(targets["thinking"], tmp_path, True, max_new_tokens=6))
    assert manifest["conversations"] == 3
    # the count is of the answers written without an EOS, read back from the answer shards
    records = [json.loads(line) for f in sorted((tmp_path / "answer").glob("*.jsonl")) for line in f.open()]
    assert records and manifest["answers_cut_at_max_new_tokens"] == sum(not r["eos"] for r in records)
    [line] = manifest["warnings"]
    assert "regenerate.max_new_tokens is 6" in line and "likely cut" in line
    assert json.loads((tmp_path / "manifest.json").read_text())["warnings"] == [line]
    assert thinking_warnings(True, THINKING_MIN_NEW_TOKENS) == []
    assert thinking_warnings(False, 6) == [] and thinking_warnings(None, 6) == []


def test_enable_thinking_is_shard_defining_and_checked():
    plain = ChatDataConfig(target="t", out_dir="o")
    assert "enable_thinking" not in shard_defining(plain)["regenerate"]  # older directories stay valid
    on = ChatDataConfig(target="t", out_dir="o", regenerate=RegenerateConfig(enable_thinking=False))
    assert shard_defining(on)["regenerate"]["enable_thinking"] is False
    with pytest.raises(ValueError, match="regenerate.enable_thinking: expected null, true or false"):
        RegenerateConfig(enable_thinking="yes")
