"""Conversations -> token ids and an assistant-only loss mask, rendered with the target's chat template.

Usage (what ``eaglehead prepare`` does)::

    splits = build_dataset(cfg.data, tokenizer, model=target)   # DatasetDict: "train" (+ "test")
    counts = count_tokens(splits["train"], vocab_size)          # LongTensor[V] over loss tokens
    d2t, t2d = build_draft_vocab(counts, draft_vocab_size)

or step by step: ``load_conversations`` -> ``regenerate`` (optional) -> ``tokenize_conversations``.

Normalised schema: every row has ``messages`` (a list of ``{role, content}``, roles ``system``/``user``/
``assistant``) and ``text`` (plain-text rows: ``messages == []``). Tokenised rows have ``input_ids``
and ``loss_mask`` (lists of ints of the same length). ``loss_mask[t] == 1`` means token ``t`` is a
training target (something the model writes); the recipe shifts it to the predicting position.

The rows of a conversation, and how the loss mask finds what the model writes, are ``chat_rows``'s: one row when
the template is prefix-stable, a row per assistant turn when it rewrites history (``data.turn_rows``); so are the
loss rules of reasoning targets: ``data.thinking_loss`` / ``data.thinking_markers`` (no loss on thinking spans) and
``data.last_turn_only`` (the loss on each conversation's last assistant turn only).
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import jinja2
import numpy as np
import pyarrow.compute as pc
import torch
from datasets import (
    Dataset,
    DatasetDict,
    Features,
    List,
    Value,
    concatenate_datasets,
    load_dataset,
)
from tqdm.auto import tqdm
from transformers import GenerationConfig

from eaglehead.builtin.text import check_enable_thinking, left_pad, thinking_kwargs

from .chat_rows import TemplateHistoryError, TurnRows, conversation_rows, tokenize_conversation
from .config import DataConfig

__all__ = ["build_dataset", "collate_tokens", "count_tokens", "load_conversations", "loss_rules", "regenerate",
           "resolve_chat_template", "split_by_conversation", "tokenize_conversation", "tokenize_conversations",
           "NORMALISED_FEATURES", "TemplateHistoryError"]

NORMALISED_FEATURES = Features(
    {"messages": List({"role": Value("string"), "content": Value("string")}), "text": Value("string")}
)
ROLE_ALIASES = {
    "system": "system",
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant",
}
FORMAT_COLUMNS = {"sharegpt": "conversations", "messages": "messages", "text": "text"}
LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def build_dataset(cfg: DataConfig, tokenizer, model=None) -> DatasetDict:
    """Load, optionally regenerate, tokenise and split, as ``cfg`` says. ``model`` is needed to regenerate."""
    template = resolve_chat_template(cfg.chat_template)
    convs = load_conversations(cfg.sources, cfg.format, cfg.split, cfg.system_prompt, cfg.max_samples)
    if cfg.regenerate:
        if model is None:
            raise ValueError("data.regenerate is true: pass the target model to build_dataset")
        convs = regenerate(
            convs, model, tokenizer, cfg.regen_temperature, cfg.regen_max_new_tokens, cfg.regen_batch_size,
            seed=cfg.seed, chat_template=template, max_length=cfg.max_length,
            enable_thinking=cfg.regen_enable_thinking,
        )
    tokens = tokenize_conversations(convs, tokenizer, cfg.max_length, template, cfg.num_proc, cfg.turn_rows,
                                    keep_conversation=True, **loss_rules(cfg))
    if cfg.test_fraction > 0:
        return split_by_conversation(tokens, cfg.test_fraction, cfg.seed)
    return DatasetDict(train=tokens.remove_columns("conversation"))


def loss_rules(cfg: DataConfig) -> dict:
    """The keyword arguments of ``tokenize_conversations`` / ``conversation_rows`` that ``cfg`` sets."""
    return {"thinking_loss": cfg.thinking_loss, "thinking_markers": tuple(cfg.thinking_markers),
            "last_turn_only": cfg.last_turn_only}


def resolve_chat_template(chat_template: str | None) -> str | None:
    """``None`` (use the tokenizer's), a Jinja string, or a path to a ``.jinja`` file (read here)."""
    if chat_template is None or "{" in chat_template:
        return chat_template
    path = Path(chat_template)
    if not path.is_file():
        raise ValueError(f"data.chat_template: {chat_template!r} is neither a Jinja template nor an existing file")
    return path.read_text()


# --- loading and normalising --------------------------------------------------------------------


def load_conversations(
    sources: list[str], format: str = "auto", split: str = "train",
    system_prompt: str | None = None, max_samples: int | None = None,
) -> Dataset:
    """Read every source, normalise it to ``NORMALISED_FEATURES`` and concatenate.

    Leading assistant messages (nothing to answer) and trailing non-assistant messages (no loss after
    them) are dropped; conversations without an assistant message and empty texts are dropped.
    Unknown roles raise ValueError naming the source, row and role.
    """
    if format not in ("auto", *FORMAT_COLUMNS):
        raise ValueError(f"data.format: expected auto, sharegpt, messages or text, got {format!r}")
    parts = []
    for src in sources:
        raw = _load_raw(src, split)
        fmt = _detect_format(raw.column_names, src) if format == "auto" else format
        if FORMAT_COLUMNS[fmt] not in raw.column_names:
            raise ValueError(
                f"data source {src}: format {fmt!r} needs a column {FORMAT_COLUMNS[fmt]!r}, found {raw.column_names}"
            )
        fn = functools.partial(_normalise_row, fmt=fmt, system_prompt=system_prompt, source=src)
        parts.append(raw.map(fn, with_indices=True, remove_columns=raw.column_names, features=NORMALISED_FEATURES))
    ds = concatenate_datasets(parts).filter(_has_loss)
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    return ds


def _load_raw(src: str, split: str) -> Dataset:
    path = Path(src)
    if path.is_file():
        if path.suffix not in LOCAL_BUILDERS:
            raise ValueError(f"data source {src}: expected a {'/'.join(LOCAL_BUILDERS)} file")
        return load_dataset(LOCAL_BUILDERS[path.suffix], data_files=str(path), split="train")
    if path.is_dir():
        return load_dataset(str(path), split=split)
    if path.suffix in LOCAL_BUILDERS or src.startswith((".", "/", "~")):
        raise ValueError(f"data source {src}: file not found")
    return load_dataset(src, split=split)


def _detect_format(columns: list[str], src: str) -> str:
    for fmt, col in FORMAT_COLUMNS.items():
        if col in columns:
            return fmt
    raise ValueError(
        f"data source {src}: cannot detect the format from columns {columns}; expected 'conversations' "
        "(ShareGPT), 'messages' (OpenAI style) or 'text', or set data.format"
    )


def _normalise_row(row: dict, idx: int, fmt: str, system_prompt: str | None, source: str) -> dict:
    if fmt == "text":
        text = row["text"]
        if text is not None and not isinstance(text, str):
            raise ValueError(f"data source {source} row {idx}: 'text' must be a string, got {type(text).__name__}")
        return {"messages": [], "text": text or ""}
    messages = []
    for m in row[FORMAT_COLUMNS[fmt]] or []:
        # ShareGPT rows use {from, value}, OpenAI rows {role, content}; files mix them at times.
        role = m.get("from") or m.get("role")
        content = m.get("value") if m.get("value") is not None else m.get("content")
        if role not in ROLE_ALIASES:
            raise ValueError(
                f"data source {source} row {idx}: unknown role {role!r} (expected one of {sorted(ROLE_ALIASES)})"
            )
        if content is not None and not isinstance(content, str):
            raise ValueError(f"data source {source} row {idx}: message content must be a string, got {content!r}")
        messages.append({"role": ROLE_ALIASES[role], "content": content or ""})
    if system_prompt is not None and not (messages and messages[0]["role"] == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    first = 1 if messages and messages[0]["role"] == "system" else 0
    while len(messages) > first and messages[first]["role"] == "assistant":
        del messages[first]
    return {"messages": _trim_to_last_assistant(messages), "text": None}


def _trim_to_last_assistant(messages: list[dict]) -> list[dict]:
    """Drop messages after the last assistant one (they carry no loss); ``[]`` if there is none."""
    while messages and messages[-1]["role"] != "assistant":
        messages = messages[:-1]
    return messages


def _has_loss(row: dict) -> bool:
    return bool(row["text"]) or any(m["role"] == "assistant" for m in row["messages"])


# --- tokenising -----------------------------------------------------------------------------------


def tokenize_conversations(
    dataset: Dataset, tokenizer, max_length: int, chat_template: str | None = None, num_proc: int = 1,
    turn_rows: TurnRows = "auto", keep_conversation: bool = False, **rules,
) -> Dataset:
    """Normalised rows -> ``input_ids``/``loss_mask`` (one row per conversation, or per assistant turn:
    ``chat_rows``), truncated to ``max_length``; rows with no loss token left (e.g. truncated inside the first
    prompt) are dropped. ``keep_conversation``: a ``conversation`` column holds each row's source index.
    ``rules``: ``thinking_loss``, ``thinking_markers``, ``last_turn_only`` of ``conversation_rows``
    (:func:`loss_rules` of a ``DataConfig``)."""
    fn = functools.partial(_tokenize_batch, tokenizer=tokenizer, max_length=max_length, chat_template=chat_template,
                           turn_rows=turn_rows, rules=rules)
    out = dataset.map(fn, with_indices=True, batched=True, batch_size=64, remove_columns=dataset.column_names,
                      num_proc=num_proc if num_proc > 1 else None, desc="tokenising")
    out = out.filter(lambda r: any(r["loss_mask"]), num_proc=num_proc if num_proc > 1 else None)
    return out if keep_conversation else out.remove_columns("conversation")


def _tokenize_batch(batch: dict, indices: list[int], tokenizer, max_length: int, chat_template: str | None,
                    turn_rows: TurnRows, rules: dict) -> dict:
    out: dict[str, list] = {"input_ids": [], "loss_mask": [], "conversation": []}
    for messages, text, idx in zip(batch["messages"], batch["text"], indices):
        for ids, mask in _row_tokens(messages, text, idx, tokenizer, chat_template, turn_rows, rules):
            out["input_ids"].append(ids[:max_length])
            out["loss_mask"].append(mask[:max_length])
            out["conversation"].append(idx)
    return out


def _row_tokens(messages, text, idx: int, tokenizer, chat_template: str | None, turn_rows: TurnRows,
                rules: dict) -> list:
    if not messages:
        ids = tokenizer(text)["input_ids"]
        return [(ids, [1] * len(ids))]  # plain text: every token is a target
    if chat_template is None and tokenizer.chat_template is None:
        raise ValueError("data.chat_template: the tokenizer has no chat template; set data.chat_template")
    try:
        return conversation_rows(tokenizer, messages, chat_template, turn_rows, **rules)
    except (ValueError, jinja2.TemplateError) as e:  # e.g. a template that demands alternating roles
        raise type(e)(f"conversation {idx}: {e}") if isinstance(e, TemplateHistoryError) else \
            ValueError(f"conversation {idx}: {e}") from e


def split_by_conversation(tokens: Dataset, test_fraction: float, seed: int) -> DatasetDict:
    """Train/test rows, every row of a conversation on one side (per-turn rows share their conversation's).
    With one row per conversation this is ``train_test_split`` itself (the split earlier runs made)."""
    conv = tokens["conversation"]
    tokens = tokens.remove_columns("conversation")
    if len(set(conv)) == len(conv):
        parts = tokens.train_test_split(test_size=test_fraction, seed=seed)
        return DatasetDict(train=parts["train"], test=parts["test"])
    ids = sorted(set(conv))
    rng = np.random.default_rng(seed)
    test = set(rng.permutation(ids)[: max(1, round(test_fraction * len(ids)))].tolist())
    is_test = [c in test for c in conv]
    return DatasetDict(train=tokens.select([i for i, t in enumerate(is_test) if not t]),
                       test=tokens.select([i for i, t in enumerate(is_test) if t]))


def count_tokens(dataset: Dataset, vocab_size: int) -> torch.Tensor:
    """How often each token id is a loss token: ``LongTensor[vocab_size]`` (input of ``build_draft_vocab``)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    rows = dataset.select_columns(["input_ids", "loss_mask"]).with_format("arrow")
    for batch in tqdm(rows.iter(batch_size=4096), total=-(-len(dataset) // 4096), desc="counting tokens"):
        # Arrow list columns flattened to one id per token: [N_tokens]
        ids = torch.from_numpy(_flat(batch.column("input_ids")))
        ids = ids[torch.from_numpy(_flat(batch.column("loss_mask"))) != 0]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            raise ValueError(f"count_tokens: token id {int(ids.max())} outside vocab_size={vocab_size}")
        counts += torch.bincount(ids, minlength=vocab_size)
    return counts


def _flat(column) -> np.ndarray:
    return np.asarray(pc.list_flatten(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def collate_tokens(rows: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad tokenised rows: ``input_ids``, ``attention_mask``, ``loss_mask``, each ``LongTensor[B, T]``."""
    width = max(len(r["input_ids"]) for r in rows)
    out = {k: torch.zeros(len(rows), width, dtype=torch.long) for k in ("input_ids", "attention_mask", "loss_mask")}
    out["input_ids"].fill_(pad_token_id)
    for b, r in enumerate(rows):
        n = len(r["input_ids"])
        out["input_ids"][b, :n] = torch.as_tensor(r["input_ids"])
        out["attention_mask"][b, :n] = 1
        out["loss_mask"][b, :n] = torch.as_tensor(r["loss_mask"])
    return out


# --- regeneration ---------------------------------------------------------------------------------


def regenerate(
    dataset: Dataset, model, tokenizer, temperature: float, max_new_tokens: int, batch_size: int,
    seed: int = 0, chat_template: str | None = None, max_length: int | None = None,
    enable_thinking: bool | None = None,
) -> Dataset:
    """Rewrite every assistant turn with the target's own output (normalised rows in and out).

    Turn ``k`` of every conversation is generated in round ``k`` from the conversation so far, with its
    earlier assistant turns already regenerated; user/system turns are kept. Batches are left-padded.
    ``temperature == 0`` is greedy; otherwise plain temperature sampling (no top-k/top-p), reproducible
    for a given ``seed`` and ``batch_size`` without touching the global RNG. A generation ends at the
    model's EOS ids (``generation_config``) or after ``max_new_tokens``. With ``max_length``, a
    conversation stops at the first turn whose prompt is already ``max_length`` tokens long (training
    truncates there anyway). Plain-text rows are passed through. ``enable_thinking`` (``data.regen_enable_thinking``)
    is passed to the template when not None, and refused for a template that never reads it. The answers cut at
    ``max_new_tokens`` (no EOS) are counted in the log line, and in ``regenerate.last_stats``.
    """
    check_enable_thinking(chat_template if chat_template is not None else tokenizer.chat_template, enable_thinking,
                          "data.regen_enable_thinking")
    template_kwargs = thinking_kwargs(enable_thinking)
    convs = [[dict(m) for m in msgs] for msgs in dataset["messages"]]
    texts = dataset["text"]
    turns = [[j for j, m in enumerate(c) if m["role"] == "assistant"] for c in convs]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {
        "do_sample": False}
    gen_cfg = GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=pad, **sampling)
    eos = model.generation_config.eos_token_id
    eos = tokenizer.eos_token_id if eos is None else eos
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    device = next(model.parameters()).device
    answers = cut_at_limit = 0
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for k in range(max((len(t) for t in turns), default=0)):
            todo = [(i, t[k]) for i, t in enumerate(turns) if len(t) > k]
            if not todo:  # every remaining conversation was cut at max_length
                break
            prompts = [
                tokenizer.apply_chat_template(convs[i][:j], chat_template=chat_template, tokenize=False,
                                              add_generation_prompt=True, **template_kwargs)
                for i, j in todo
            ]
            prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
            if max_length is not None:
                keep = [n for n, ids in enumerate(prompt_ids) if len(ids) < max_length]
                for n in set(range(len(todo))) - set(keep):
                    i, j = todo[n]
                    convs[i], turns[i] = _trim_to_last_assistant(convs[i][:j]), []  # the rest would be truncated
                todo, prompt_ids = [todo[n] for n in keep], [prompt_ids[n] for n in keep]
            order = sorted(range(len(todo)), key=lambda n: -len(prompt_ids[n]))  # similar lengths share a batch
            for start in tqdm(range(0, len(order), batch_size), desc=f"regenerating turn {k + 1}"):
                chunk = order[start:start + batch_size]
                outs = _generate_left_padded(model, [prompt_ids[n] for n in chunk], gen_cfg, pad, device)
                for n, new in zip(chunk, outs):
                    cut = next((p for p, t in enumerate(new) if t in eos), len(new))
                    answers += 1
                    cut_at_limit += cut == len(new)  # no EOS: only a row that ran max_new_tokens has none
                    i, j = todo[n]
                    convs[i][j]["content"] = tokenizer.decode(new[:cut], skip_special_tokens=True)
    model.train(was_training)
    regenerate.last_stats = {"answers": answers, "answers_cut_at_max_new_tokens": cut_at_limit}
    if cut_at_limit:
        warnings.warn(f"data.regenerate: {cut_at_limit} of {answers} answers reached regen_max_new_tokens "
                      f"({max_new_tokens}) without an EOS and were cut there", stacklevel=2)
    return Dataset.from_dict({"messages": convs, "text": texts}, features=NORMALISED_FEATURES).filter(_has_loss)


@torch.no_grad()
def _generate_left_padded(model, prompts: list[list[int]], gen_cfg, pad: int, device) -> list[list[int]]:
    input_ids, attention_mask = left_pad(prompts, pad, device)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen_cfg)
    return out[:, input_ids.shape[1]:].tolist()  # [B, new]: only the generated tokens
