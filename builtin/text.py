"""From prompt text to the token rows a target reads: the one prompt encoder, the one left-pad helper
and the one end-of-sequence normaliser."""

from __future__ import annotations

import torch


def encode_prompt(tok, text: str, *, chat: bool = True, history: tuple | list = ()) -> list[int]:
    """Token ids of one user turn: through the tokenizer's chat template (with the generation prompt)
    when ``chat`` and the tokenizer has one, else the raw text. ``history`` holds the earlier messages
    (``{"role", "content"}`` dicts) of a multi-turn conversation; it needs a chat template."""
    if history and not (chat and getattr(tok, "chat_template", None)):
        raise ValueError("a multi-turn prompt (history of earlier turns) needs a tokenizer with a chat template")
    if chat and getattr(tok, "chat_template", None):
        messages = [dict(m) for m in history] + [{"role": "user", "content": text}]
        enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        ids = enc["input_ids"]
    else:
        ids = tok(text)["input_ids"]
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [B, T], attention_mask [B, T])``, left-padded to the longest row."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[b, width - len(r):] = 1
    return ids.to(device), mask.to(device)


def eos_token_ids(model, tok) -> set[int]:
    """The ids that end a reply: the model's generation config when it names any (an int or a list),
    else the tokenizer's eos token; empty when neither has one."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tok.eos_token_id
    return set([eos] if isinstance(eos, int) else (eos or []))


def pad_token_id(tok, eos: set[int]) -> int:
    """The tokenizer's pad id, else the smallest eos id, else 0 (padded positions are masked anyway)."""
    if tok.pad_token_id is not None:
        return tok.pad_token_id
    return min(eos) if eos else 0


def thinking_kwargs(enable_thinking: bool | None) -> dict:
    """The extra variables a chat template is rendered with for ``enable_thinking`` (Qwen3-style reasoning
    targets): none for ``None``, the template's own default."""
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}


def check_enable_thinking(template, enable_thinking: bool | None, key: str, of: str = "") -> None:
    """A ``ValueError`` naming config ``key`` when ``enable_thinking`` is set but ``template`` (a chat template
    string, a dict of named ones, or None) never reads ``enable_thinking``: the setting would silently do nothing.
    ``of`` names whose template it is in the message (e.g. `` of target 'x'``)."""
    if enable_thinking is None:
        return
    texts = template.values() if isinstance(template, dict) else [template or ""]
    if not any("enable_thinking" in t for t in texts):
        raise ValueError(f"{key} is {str(enable_thinking).lower()}, but the chat template{of} never reads "
                         f"enable_thinking: the setting would change nothing. Set {key}: null for this target")
