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

Reasoning targets (Qwen3 thinking, DeepSeek-R1, GPT-OSS). ``data.thinking_loss: false`` takes the loss off every
thinking span of an assistant turn and keeps it on the rest of the answer (and the end-of-turn token). A span is
found in the rendered text (never by token ids): it runs from an opening marker (``data.thinking_markers[0]``,
``<think>``) through the next closing one (``[1]``, ``</think>``), *both markers included*: they lose the loss too.
A turn whose generation prompt already ends with the opening marker (DeepSeek-R1's opens ``<think>`` itself) starts
inside a span. A span that opens and never closes (an answer cut at the length limit) runs to the end of the turn,
its end-of-turn token included (the target never wrote it there). A token is in a span where its first character
is, as for the assistant span; a marker that the template never renders is no error (nothing is masked).
``data.last_turn_only: true`` keeps the loss on the last assistant turn of each conversation only: one row holds
it, ``turn_rows`` deciding that row as before (per turn: only the last turn's row is written, the others would
have no loss). With the defaults (``thinking_loss: true``, ``last_turn_only: false``) rows are those of before.
"""

from __future__ import annotations

from typing import Literal

TurnRows = Literal["auto", "whole", "per_turn"]
TURN_ROWS = ("auto", "whole", "per_turn")
THINKING_MARKERS = ("<think>", "</think>")


class TemplateHistoryError(ValueError):
    """The chat template rewrites earlier turns (``data.turn_rows: whole`` cannot hold the conversation in one row)."""


def check_thinking_markers(markers, key: str = "data.thinking_markers") -> tuple[str, str]:
    """``markers`` as ``(open, close)``; a ``ValueError`` naming ``key`` unless they are two non-empty strings."""
    if isinstance(markers, str) or not isinstance(markers, (list, tuple)) or len(markers) != 2 \
            or not all(isinstance(m, str) and m for m in markers):
        raise ValueError(f"{key}: expected two non-empty strings, the opening and the closing marker of a thinking "
                         f"span (e.g. {list(THINKING_MARKERS)}), got {markers!r}")
    return markers[0], markers[1]


def check_flag(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value


def conversation_rows(tokenizer, messages: list[dict], chat_template: str | None = None,
                      turn_rows: TurnRows = "auto", *, thinking_loss: bool = True,
                      thinking_markers=THINKING_MARKERS, last_turn_only: bool = False,
                      ) -> list[tuple[list[int], list[int]]]:
    """``[(input_ids, loss_mask)]``: one row, or one per assistant turn (module docstring)."""
    if turn_rows not in TURN_ROWS:
        raise ValueError(f"data.turn_rows: expected one of {list(TURN_ROWS)}, got {turn_rows!r}")
    check_flag(thinking_loss, "data.thinking_loss")
    check_flag(last_turn_only, "data.last_turn_only")
    markers = None if thinking_loss else check_thinking_markers(thinking_markers)
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
    if last_turn_only:
        turns = turns[-1:]
    if stable and turn_rows != "per_turn":
        spans = [(len(prompt), len(upto)) for _, prompt, upto in turns]
        return [tokens_and_mask(tokenizer, full, spans, _thinking(full, spans, markers))]
    return [tokens_and_mask(tokenizer, upto, [(len(prompt), len(upto))],
                            _thinking(upto, [(len(prompt), len(upto))], markers)) for _, prompt, upto in turns]


def _thinking(text: str, spans: list[tuple[int, int]], markers: tuple[str, str] | None) -> list[tuple[int, int]]:
    """The thinking spans inside ``spans`` (none when ``markers`` is None: thinking keeps its loss)."""
    if markers is None:
        return []
    return [r for a, b in spans for r in thinking_ranges(text, a, b, markers)]


def thinking_ranges(text: str, start: int, end: int, markers: tuple[str, str]) -> list[tuple[int, int]]:
    """Character ranges of the thinking spans of the assistant span ``text[start:end]``, markers included; the
    first starts at ``start`` when the text before it (the generation prompt) ends with the opening marker; one
    never closed runs to ``end`` (module docstring)."""
    opening, closing = markers
    out, pos = [], start
    inside = text[:start].rstrip().endswith(opening)
    while pos < end:
        if inside:
            s = start
        else:
            s = text.find(opening, pos, end)
            if s < 0:
                break
            pos = s + len(opening)
        c = text.find(closing, pos, end)
        if c < 0:
            out.append((s, end))
            break
        out.append((s, c + len(closing)))
        pos, inside = c + len(closing), False
    return out


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


def tokens_and_mask(tokenizer, text: str, spans: list[tuple[int, int]], drop: list[tuple[int, int]] = ()
                    ) -> tuple[list[int], list[int]]:
    """``text``'s token ids and the mask of the tokens in ``spans`` (character ranges), each span ending at its
    last special token (or its last non-blank token when it has none); tokens in ``drop`` (character ranges:
    thinking spans) get no loss."""
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
            if k <= last and not any(c <= offsets[k][0] < d for c, d in drop):
                mask[k] = 1
    return ids, mask


def special_ids(tokenizer) -> frozenset:
    added = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return frozenset(added | set(tokenizer.all_special_ids))
