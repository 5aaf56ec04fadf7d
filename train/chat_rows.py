"""A conversation as training rows: token ids and the loss mask of what the model writes, by the chat template.

How the assistant span is found (no hard-coded separators): for assistant message ``i`` the template renders
``messages[:i]`` with ``add_generation_prompt=True`` (P: the prompt the model sees when it starts writing) and
``messages[:i+1]`` (U); the characters between the two are what the model writes. Inside the span the loss keeps
the content and the end-of-turn token (the last special token of the span: the head must learn to predict the end
of the turn) and drops text the template adds after it (``"\\n"`` after ``<|im_end|>``). A token belongs to the
span where its first character is.

One row or one per turn (``data.turn_rows``). A *prefix-stable* template renders every U as a prefix of the whole
conversation's render (H), so one row holds every assistant turn with its loss. Templates that rewrite history
are not: Qwen3 strips the reasoning of earlier assistant turns, GPT-OSS's harmony ends a turn in history otherwise
than when it is written, DeepSeek-R1 drops thinking. For them the context of assistant turn ``i`` at serving time
is P_i, not H's prefix, so turn ``i`` gets a row of its own, U_i, with the loss on its span only: what the target
sees and writes when it answers that turn. ``auto`` (the default) gives one row when the template is
prefix-stable for the conversation and a row per assistant turn otherwise; ``whole`` refuses a template that
rewrites history (:class:`TemplateHistoryError`); ``per_turn`` always writes a row per turn. A generation prompt
that is not how the template starts the assistant message (P not a prefix of U) is refused in every mode: no row
could say where the answer starts.
"""

from __future__ import annotations

from typing import Literal

TurnRows = Literal["auto", "whole", "per_turn"]
TURN_ROWS = ("auto", "whole", "per_turn")


class TemplateHistoryError(ValueError):
    """The chat template rewrites earlier turns (``data.turn_rows: whole`` cannot hold the conversation in one row)."""


def conversation_rows(tokenizer, messages: list[dict], chat_template: str | None = None,
                      turn_rows: TurnRows = "auto") -> list[tuple[list[int], list[int]]]:
    """``[(input_ids, loss_mask)]``: one row, or one per assistant turn (module docstring)."""
    if turn_rows not in TURN_ROWS:
        raise ValueError(f"data.turn_rows: expected one of {list(TURN_ROWS)}, got {turn_rows!r}")
    render = _renderer(tokenizer, chat_template)
    turns = assistant_turns(render, messages)
    if not turns:
        return [tokens_and_mask(tokenizer, render(messages, False), [])]
    full = render(messages, False)
    stable = all(full.startswith(upto) for _, _, upto in turns)
    if turn_rows == "whole" and not stable:
        i = next(i for i, _, upto in turns if not full.startswith(upto))
        raise TemplateHistoryError(
            f"chat template problem: rendering the first {i + 1} messages is not a prefix of rendering the whole "
            "conversation (the template rewrites earlier turns, e.g. drops reasoning from past assistant "
            "messages); with data.turn_rows: whole the loss masks would be wrong. Use data.turn_rows: auto (a row "
            "per assistant turn, each in the context the target sees when it writes that turn) or a prefix-stable "
            "data.chat_template")
    if stable and turn_rows != "per_turn":
        return [tokens_and_mask(tokenizer, full, [(len(prompt), len(upto)) for _, prompt, upto in turns])]
    return [tokens_and_mask(tokenizer, upto, [(len(prompt), len(upto))]) for _, prompt, upto in turns]


def tokenize_conversation(tokenizer, messages: list[dict], chat_template: str | None = None
                          ) -> tuple[list[int], list[int]]:
    """The conversation as one row; :class:`TemplateHistoryError` when the template rewrites earlier turns."""
    return conversation_rows(tokenizer, messages, chat_template, "whole")[0]


def _renderer(tokenizer, chat_template: str | None):
    def render(msgs, gen_prompt):
        return tokenizer.apply_chat_template(msgs, chat_template=chat_template, tokenize=False,
                                             add_generation_prompt=gen_prompt)
    return render


def assistant_turns(render, messages: list[dict]) -> list[tuple[int, str, str]]:
    """``(i, P_i, U_i)`` for every assistant message ``i``: its generation prompt and the render through it."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if i == 0:
            raise ValueError("conversation starts with an assistant message: nothing to condition it on")
        prompt, upto = render(messages[:i], True), render(messages[: i + 1], False)
        if not upto.startswith(prompt):
            raise ValueError(
                f"chat template problem: the generation prompt for assistant message {i} "
                f"({prompt[-40:]!r}) is not how the template starts that message; cannot locate the assistant span")
        out.append((i, prompt, upto))
    return out


def tokens_and_mask(tokenizer, text: str, spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """``text``'s token ids and the mask of the tokens in ``spans`` (character ranges), each span ending at its
    last special token (or its last non-blank token when it has none)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    special = special_ids(tokenizer)
    mask = [0] * len(ids)
    for a, b in spans:
        inside = [k for k, (s, _) in enumerate(offsets) if a <= s < b]
        if not inside:
            continue
        ends = [k for k in inside if ids[k] in special]
        if ends:
            last = ends[-1]  # the end-of-turn token; text after it is template decoration
        else:
            last = inside[-1]
            while last > inside[0] and not text[offsets[last][0]:offsets[last][1]].strip():
                last -= 1
        for k in inside:
            if k <= last:
                mask[k] = 1
    return ids, mask


def special_ids(tokenizer) -> frozenset:
    added = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return frozenset(added | set(tokenizer.all_special_ids))
