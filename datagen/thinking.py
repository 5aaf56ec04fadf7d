"""Reasoning targets in chat-data generation: ``regenerate.enable_thinking``.

Templates such as Qwen3's read a variable ``enable_thinking`` (false: the generation prompt closes an empty
``<think></think>`` block, so the target answers without reasoning). The pipeline renders every prompt to token ids
itself (``_Target.assistant_prefix``), for every engine (torch, llama.cpp, vLLM, openai: a server only ever gets
token ids and returns token ids), so passing the variable there is the one place that sets it for all of them.
No engine-side reasoning parser is needed either: the raw tokens come back, ``<think>...</think>`` included, and
become the answer's text as the target wrote it.
"""

from __future__ import annotations

from eaglehead.builtin.text import check_enable_thinking as check_reads

# Below this many new tokens a reasoning answer is likely cut before it ends (its thinking alone often runs longer).
THINKING_MIN_NEW_TOKENS = 1024


def check_enable_thinking(tokenizer, enable_thinking: bool | None, target: str) -> None:
    """A ``ValueError`` when ``regenerate.enable_thinking`` is set but the target's chat template never reads
    ``enable_thinking`` (the setting would silently do nothing)."""
    check_reads(tokenizer.chat_template, enable_thinking, "regenerate.enable_thinking", f" of target {target!r}")


def thinking_warnings(enable_thinking: bool | None, max_new_tokens: int) -> list[str]:
    """The manifest's ``warnings`` about these settings (nothing is refused)."""
    if enable_thinking and max_new_tokens < THINKING_MIN_NEW_TOKENS:
        return [f"regenerate.enable_thinking is true and regenerate.max_new_tokens is {max_new_tokens} (< "
                f"{THINKING_MIN_NEW_TOKENS}): reasoning answers are likely cut before they end (see "
                "answers_cut_at_max_new_tokens); raise regenerate.max_new_tokens"]
    return []
