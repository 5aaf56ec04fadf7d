"""Chat training data the target writes itself: synthesised user prompts, regenerated answers.

    eaglehead prepare --data-config configs/smollm2-135m-instruct-data.yaml      # resumable
    python -m eaglehead.datagen --config configs/smollm2-135m-instruct-data.yaml  # the same

Stages, each written as JSONL shards under ``out_dir`` as they finish (a killed run resumes at the
first missing shard; a finished shard is never redone and every shard has its own seed, so a resumed
run writes exactly what an uninterrupted one would):

1. ``user``: user turns sampled from the target's own chat template cut just before the user's text
   (Magpie), in batches, until ``synthesis.magpie_prompts`` clean unique turns exist.
2. Seed task prompts from standard-library docstrings and ``pydoc`` topics (``eaglehead.train.chat_data``)
   and, with ``synthesis.category_prompts``, templated tasks of the eight chat-benchmark categories
   (``eaglehead.train.task_prompts``).
   All prompts are de-duplicated and those sharing a word n-gram with MT-bench or HumanEval are removed
   (``prompts.json`` counts each removal).
3. ``answer``: the target answers every prompt at ``regenerate.temperature``; prompts are sorted by
   length into shards, decoded with continuous batching (:func:`sample_stream`: a finished row leaves
   the batch at once and a waiting prompt takes its place); each token is drawn by inverting the
   cumulative distribution with one uniform per row (``sampler``, :data:`SAMPLERS`).
4. ``followup`` / ``answer2``: for ``synthesis.second_turn_fraction`` of the conversations the target
   writes a follow-up user turn (Magpie again, after its own answer) and answers it; a category task
   prompt brings its own follow-up of its category ("now make it shorter", "add tests").

The result, ``conversations.jsonl`` (``messages`` format), is what ``data.sources`` of a training
config points at; ``manifest.json`` holds its sha256, the counts and the resolved config.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
import re
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from eaglehead.builtin.kvcache import GrowingCache
from eaglehead.builtin.shipped import file_sha256
from eaglehead.builtin.text import left_pad
from eaglehead.decode import SamplingConfig, probs, sample_from, sample_inverse_cdf
from eaglehead.train import chat_data as cd
from eaglehead.train.config import dump_config, load_config, omit_added_later
from eaglehead.train.task_prompts import category_task_prompts

SENTINEL = "\x00EAGLEHEAD-USER-TURN\x00"

# How a token is drawn from the target's distribution: both draw from the same law, they differ in cost and in
# the stream a seed gives. "inverse-cdf" (one uniform per row) costs ~2 ms a step at batch 32 and a 49152-token
# vocabulary on a CPU, "exponential-race" (one exponential per vocabulary entry) 52-69 ms, 13 % of the sampler's
# time in a profile (BENCHMARKS.md, regeneration); the data shipped for SmolLM2 was written with "exponential-race".
SAMPLERS = {"inverse-cdf": sample_inverse_cdf, "exponential-race": sample_from}
DEFAULT_SAMPLER = "inverse-cdf"


def sampler_named(name: str):
    """The draw function ``SAMPLERS[name]``; a name not there is a ``ValueError`` naming the choices."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler: expected one of {', '.join(map(repr, SAMPLERS))}, got {name!r}")
    return SAMPLERS[name]


@dataclass
class SynthesisConfig:
    magpie_prompts: int = 1500  # unique clean user turns to sample from the target
    stdlib_prompts: int = 500  # seed prompts from standard-library docstrings
    pydoc_prompts: int = 79  # seed prompts from pydoc topics (79 exist)
    # seed prompts of the eight chat-benchmark categories (writing, roleplay, reasoning, math, coding,
    # extraction, stem, humanities; eaglehead.train.task_prompts), each with a follow-up of its category
    category_prompts: int = 0
    second_turn_fraction: float = 0.25  # conversations that get a follow-up user turn and answer
    temperature: float = 1.0
    top_p: float | None = 0.95
    max_new_tokens: int = 96
    max_rounds: int = 50  # Magpie shards tried before giving up on magpie_prompts
    keep_unfinished: bool = False  # keep user turns cut at max_new_tokens (tests with untrained models)
    overlap_ngram: int = 8  # a prompt sharing a word n-gram with MT-bench/HumanEval is removed

    def __post_init__(self):
        for name in ("magpie_prompts", "stdlib_prompts", "pydoc_prompts", "category_prompts"):
            if getattr(self, name) < 0:
                raise ValueError(f"synthesis.{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.second_turn_fraction <= 1.0:
            raise ValueError(f"synthesis.second_turn_fraction must be in [0, 1], got {self.second_turn_fraction}")
        if self.max_new_tokens < 1 or self.max_rounds < 1 or self.overlap_ngram < 1:
            raise ValueError("synthesis.max_new_tokens, max_rounds and overlap_ngram must be >= 1")


@dataclass
class RegenerateConfig:
    temperature: float = 0.7
    top_p: float | None = None
    max_new_tokens: int = 512
    batch_size: int = 32
    shard_size: int = 64  # prompts per shard (the unit of resumption)

    def __post_init__(self):
        if self.max_new_tokens < 1 or self.batch_size < 1 or self.shard_size < 1:
            raise ValueError("regenerate.max_new_tokens, batch_size and shard_size must be >= 1")


@dataclass
class ChatDataConfig:
    target: str
    out_dir: str
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    # conversation ids are "<id_prefix>-000000", ...: data sets trained on together need distinct prefixes
    id_prefix: str = "chat"
    sampler: str = DEFAULT_SAMPLER  # or "exponential-race" (see SAMPLERS): same law, another stream per seed
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig)
    regenerate: RegenerateConfig = field(default_factory=RegenerateConfig)

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.]*", self.id_prefix or ""):
            raise ValueError(f"id_prefix: expected letters, digits, '_' or '.' (the ids are '<id_prefix>-000000'), "
                             f"got {self.id_prefix!r}")
        sampler_named(self.sampler)


# ------------------------------------------------------------------------------------ the sampler

@torch.no_grad()
def sample_stream(model, prompts: list[list[int]], *, batch_size: int, sampling: SamplingConfig,
                  max_new_tokens: int, eos_ids: set[int], pad_id: int, generator: torch.Generator,
                  sampler: str = DEFAULT_SAMPLER) -> tuple[list[list[int]], list[bool]]:
    """Continue each prompt until EOS or ``max_new_tokens``; returns ``(new tokens, ended by EOS)``.

    Continuous batching: at most ``batch_size`` rows decode together; a row that finishes leaves the
    batch at once (its cache rows are dropped), and waiting prompts join when a quarter of the batch is
    free (prefilled together, then merged into the running cache, left-padded), so every step runs
    near the full batch instead of waiting for its longest row. Each row keeps its own position ids
    and attention mask, so its tokens are exactly what it would get decoding alone. ``sampler`` names
    how tokens are drawn (:data:`SAMPLERS`).
    """
    draw = sampler_named(sampler)
    device = next(model.parameters()).device
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    waiting = deque(range(len(prompts)))
    out: list[list[int]] = [[] for _ in prompts]
    ended = [False] * len(prompts)
    live: list[int] = []  # prompt index of each batch row
    cache = mask = pos = logits = None
    while waiting or live:
        free = batch_size - len(live)
        if waiting and (not live or free >= max(1, batch_size // 4)):
            new = [waiting.popleft() for _ in range(min(free, len(waiting)))]
            ids, new_mask = left_pad([prompts[i] for i in new], pad_id, device)
            new_cache = GrowingCache(config=model.config)
            new_logits = model(input_ids=ids, attention_mask=new_mask, position_ids=(new_mask.cumsum(-1) - 1).clamp_min(0),
                               logits_to_keep=1, use_cache=True, **{cache_kw: new_cache}).logits[:, -1]
            if live:
                cache, mask = _merge_left_padded(cache, mask, new_cache, new_mask)
                pos, logits = torch.cat([pos, new_mask.sum(-1)]), torch.cat([logits, new_logits])
            else:
                cache, mask, pos, logits = new_cache, new_mask, new_mask.sum(-1), new_logits
            live += new
        tok = draw(probs(logits, sampling), generator)  # [rows]
        keep = []
        for i, t in enumerate(tok.tolist()):
            row = live[i]
            out[row].append(t)
            if t in eos_ids:
                ended[row] = True
            elif len(out[row]) < max_new_tokens:
                keep.append(i)
        if len(keep) < len(live):
            live = [live[i] for i in keep]
            if not live:
                continue
            sel = torch.tensor(keep, device=device)
            cache.batch_select_indices(sel)
            tok, mask, pos = tok[sel], mask[sel], pos[sel]
            cache, mask = _drop_leading_padding(cache, mask)
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], 1)
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos[:, None], use_cache=True,
                       **{cache_kw: cache}).logits[:, -1]
        pos = pos + 1
    return out, ended


def _left_pad_seq(x: torch.Tensor, length: int) -> torch.Tensor:
    """Zero-pad dim -2 (sequence) of a ``[B, H, T, D]`` cache tensor on the left to ``length``."""
    return x if x.shape[-2] == length else torch.nn.functional.pad(x, (0, 0, length - x.shape[-2], 0))


def _merge_left_padded(cache_a, mask_a, cache_b, mask_b):
    """Stack two left-padded batches (caches and masks) into one, padding the shorter on the left."""
    width = max(mask_a.shape[1], mask_b.shape[1])
    for la, lb in zip(cache_a.layers, cache_b.layers):
        la.keys = torch.cat([_left_pad_seq(la.keys, width), _left_pad_seq(lb.keys, width)])
        la.values = torch.cat([_left_pad_seq(la.values, width), _left_pad_seq(lb.values, width)])
    pad = torch.nn.functional.pad
    return cache_a, torch.cat([pad(mask_a, (width - mask_a.shape[1], 0)), pad(mask_b, (width - mask_b.shape[1], 0))])


def _drop_leading_padding(cache, mask):
    """Cut the leading columns that no remaining row attends to (left by rows that finished)."""
    lead = int(mask.any(0).long().argmax())
    if lead == 0:
        return cache, mask
    for layer in cache.layers:
        layer.drop_leading(lead)
    return cache, mask[:, lead:]


# ------------------------------------------------------------------------------------------ stages

class _Target:
    def __init__(self, cfg: ChatDataConfig):
        from eaglehead.builtin.models import load_target
        from eaglehead.builtin.text import eos_token_ids, pad_token_id

        self.model, self.tok = load_target(cfg.target, dtype=cfg.dtype, device=cfg.device, option="target")
        if not self.tok.chat_template:
            raise ValueError(f"target {cfg.target!r}: its tokenizer has no chat template; chat data needs one")
        self.eos = eos_token_ids(self.model, self.tok) | self._turn_end()
        self.pad = pad_token_id(self.tok, self.eos)

    def _turn_end(self) -> set[int]:
        """The special token the template closes a turn with (``<|im_end|>`` in ChatML), if any."""
        text = self.tok.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
        after = self.tok(text.split(SENTINEL, 1)[1], add_special_tokens=False)["input_ids"]
        special = set(self.tok.all_special_ids) | set(getattr(self.tok, "added_tokens_decoder", {}))
        return {after[0]} if after and after[0] in special else set()

    def user_prefix(self, messages: list[dict]) -> list[int]:
        """Token ids of ``messages`` followed by the opening of a user turn (Magpie's pre-query)."""
        text = self.tok.apply_chat_template(messages + [{"role": "user", "content": SENTINEL}], tokenize=False)
        return self.tok(text.split(SENTINEL)[0], add_special_tokens=False)["input_ids"]

    def assistant_prefix(self, messages: list[dict]) -> list[int]:
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([t for t in ids if t not in self.eos], skip_special_tokens=True).strip()


class _Progress:
    """One bar over a stage's shards, with generated tokens/s and ETA."""

    def __init__(self, stage: str, total: int, done: int):
        self.bar = tqdm(total=total, initial=done, desc=f"[datagen] {stage}", unit="shard", file=sys.stderr)
        self.tokens, self.t0 = 0, time.perf_counter()

    def step(self, tokens: int) -> None:
        self.tokens += tokens
        self.bar.set_postfix_str(f"{self.tokens / max(time.perf_counter() - self.t0, 1e-9):.0f} tok/s")
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _generate_shards(target: _Target, stage: str, out_dir: Path, prefixes: list[list[int]], *, sampling,
                     max_new_tokens: int, batch_size: int, shard_size: int, seed: int, sampler: str) -> list[dict]:
    """Generate a continuation for each prefix, sharded; returns ``{"ids", "eos"}`` per prefix.

    Prefixes are ordered by length so each batch pads little; shard ``k`` covers positions
    ``[k * shard_size, (k + 1) * shard_size)`` of that order and is skipped when already written.
    """
    order = sorted(range(len(prefixes)), key=lambda i: (len(prefixes[i]), i))
    n_shards = math.ceil(len(order) / shard_size)
    paths = [cd.shard_path(out_dir / stage, stage, k) for k in range(n_shards)]
    progress = _Progress(stage, n_shards, sum(p.is_file() for p in paths))
    rows: dict[int, dict] = {}
    for k, path in enumerate(paths):
        shard = cd.read_shard(path)
        if shard is None:
            idx = order[k * shard_size:(k + 1) * shard_size]
            gen = torch.Generator(device=target.model.device).manual_seed(cd.shard_seed(seed, stage, k))
            toks, eos = sample_stream(target.model, [prefixes[i] for i in idx], batch_size=batch_size,
                                      sampling=sampling, max_new_tokens=max_new_tokens, eos_ids=target.eos,
                                      pad_id=target.pad, generator=gen, sampler=sampler)
            shard = [{"index": i, "ids": t, "eos": e} for i, t, e in zip(idx, toks, eos)]
            cd.write_shard(path, shard)
            progress.step(sum(len(r["ids"]) for r in shard))
        for r in shard:
            rows[r["index"]] = {"ids": r["ids"], "eos": r["eos"]}
    progress.close()
    return [rows[i] for i in range(len(prefixes))]


def _benchmarks() -> dict[str, list[str]]:
    from eaglehead.builtin.mtbench import load_mtbench
    from eaglehead.eval.prompts import load_prompt_set

    return {"mt-bench": [t for q in load_mtbench() for t in q.turns],
            "humaneval": [p.turns[0] for p in load_prompt_set("humaneval")]}


def synthesise_prompts(target: _Target, cfg: ChatDataConfig, out: Path) -> tuple[list[dict], dict]:
    s = cfg.synthesis
    flt = cd.OverlapFilter(_benchmarks(), s.overlap_ngram)
    sampling = SamplingConfig(temperature=s.temperature, top_p=s.top_p)
    prefix = target.user_prefix([])
    stats = {"magpie_sampled": 0, "magpie_rejected": 0, "duplicates": 0, "overlap": {}}
    magpie: list[dict] = []
    seen: set[str] = set()

    def admit(p: dict) -> bool:
        key = cd.normalise(p["prompt"])
        if key in seen:
            stats["duplicates"] += 1
            return False
        hit = flt.hit(p["prompt"])
        if hit:
            stats["overlap"][hit] = stats["overlap"].get(hit, 0) + 1
            return False
        seen.add(key)
        return True

    shard_size = cfg.regenerate.shard_size
    rounds = 0
    bar = tqdm(desc="[datagen] user turns (Magpie rounds)", unit="round", file=sys.stderr)
    while len(magpie) < s.magpie_prompts:
        if rounds >= s.max_rounds:
            raise ValueError(
                f"synthesis.magpie_prompts={s.magpie_prompts}: only {len(magpie)} clean unique user turns after "
                f"synthesis.max_rounds={s.max_rounds} shards of {shard_size} samples; lower magpie_prompts or "
                "raise max_rounds")
        rows = _magpie_round(target, out, prefix, sampling, cfg, rounds)  # read back when already on disk
        bar.update(1)
        for r in rows:
            stats["magpie_sampled"] += 1
            text = cd.clean_user_turn(target.decode(r["ids"])) if r["eos"] or s.keep_unfinished else None
            if text is None:
                stats["magpie_rejected"] += 1
            elif admit({"prompt": text}) and len(magpie) < s.magpie_prompts:
                magpie.append({"source": "magpie", "prompt": text})
        rounds += 1
        bar.set_postfix_str(f"{len(magpie)}/{s.magpie_prompts} kept")
    bar.close()
    stats["magpie_rounds"] = rounds
    seeds = cd.stdlib_task_prompts(s.stdlib_prompts, cfg.seed) + cd.pydoc_topic_prompts(s.pydoc_prompts, cfg.seed)
    if s.category_prompts:
        seeds += category_task_prompts(s.category_prompts, cfg.seed)
    prompts = magpie + [p for p in seeds if admit(p)]
    for p in prompts:  # a seeded follow-up that overlaps a benchmark is dropped (that conversation gets Magpie's)
        hit = flt.hit(p["followup"]) if p.get("followup") else None
        if hit:
            stats["overlap"][f"{hit} (follow-up)"] = stats["overlap"].get(f"{hit} (follow-up)", 0) + 1
            del p["followup"]
    stats["prompts"] = len(prompts)
    stats["by_source"] = dict(Counter(p["source"] for p in prompts))
    return prompts, stats


def _magpie_round(target: _Target, out: Path, prefix: list[int], sampling: SamplingConfig, cfg: ChatDataConfig,
                  index: int) -> list[dict]:
    """Magpie round ``index``: ``shard_size`` user turns sampled from the bare user-turn prefix."""
    path = cd.shard_path(out / "user", "user", index)
    shard = cd.read_shard(path)
    if shard is None:
        gen = torch.Generator(device=target.model.device).manual_seed(cd.shard_seed(cfg.seed, "user", index))
        toks, eos = sample_stream(target.model, [prefix] * cfg.regenerate.shard_size,
                                  batch_size=cfg.regenerate.batch_size, sampling=sampling,
                                  max_new_tokens=cfg.synthesis.max_new_tokens, eos_ids=target.eos,
                                  pad_id=target.pad, generator=gen, sampler=cfg.sampler)
        shard = [{"ids": t, "eos": e} for t, e in zip(toks, eos)]
        cd.write_shard(path, shard)
    return shard


def answer(target: _Target, cfg: ChatDataConfig, out: Path, stage: str, convs: list[list[dict]]) -> list[dict]:
    """The target's answer (regenerated at ``regenerate.temperature``) to the last user turn of each conversation."""
    r = cfg.regenerate
    return _generate_shards(target, stage, out, [target.assistant_prefix(c) for c in convs],
                            sampling=SamplingConfig(temperature=r.temperature, top_p=r.top_p),
                            max_new_tokens=r.max_new_tokens, batch_size=r.batch_size, shard_size=r.shard_size,
                            seed=cfg.seed, sampler=cfg.sampler)


def followups(target: _Target, cfg: ChatDataConfig, out: Path, convs: list[list[dict]]) -> list[dict]:
    """A follow-up user turn sampled after each conversation (Magpie with the history in front)."""
    s, r = cfg.synthesis, cfg.regenerate
    return _generate_shards(target, "followup", out, [target.user_prefix(c) for c in convs],
                            sampling=SamplingConfig(temperature=s.temperature, top_p=s.top_p),
                            max_new_tokens=s.max_new_tokens, batch_size=r.batch_size, shard_size=r.shard_size,
                            seed=cfg.seed, sampler=cfg.sampler)


def run(cfg: ChatDataConfig) -> dict:
    """Every stage, resuming from the shards already in ``cfg.out_dir``; returns the manifest."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    resolved = json.dumps(_shard_defining(cfg), indent=2, sort_keys=True)
    saved = out / "config.json"
    if saved.is_file() and (saved_text := saved.read_text()) != resolved:
        # both sides through JSON, so a tuple in the config compares equal to the list it was saved as
        changed = _differences(json.loads(saved_text), json.loads(resolved))
        raise ValueError(f"{saved}: this output directory was started with another config (its shards would mix "
                         f"with this one's): {'; '.join(changed) or 'formatting only'}. Set those back to resume, "
                         "use a new out_dir, or delete the directory to start over")
    saved.write_text(resolved)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    target = _Target(cfg)
    prompts, stats = synthesise_prompts(target, cfg, out)
    convs = [[{"role": "user", "content": p["prompt"]}] for p in prompts]
    answers = answer(target, cfg, out, "answer", convs)
    for c, a in zip(convs, answers):
        c.append({"role": "assistant", "content": target.decode(a["ids"])})
    stats["answer_tokens"] = sum(len(a["ids"]) for a in answers)
    stats["answers_cut_at_max_new_tokens"] = sum(not a["eos"] for a in answers)

    # Follow-ups for a fixed, seeded subset of the conversations whose first answer ended properly.
    pick = [i for i, a in enumerate(answers) if a["eos"] or cfg.synthesis.keep_unfinished]
    pick = sorted(random_subset(pick, cfg.synthesis.second_turn_fraction, cfg.seed))
    if pick:
        # A seed prompt's own follow-up is used as is; the others get one sampled by the target (Magpie).
        seeded = [i for i in pick if prompts[i].get("followup")]
        sampled = [i for i in pick if not prompts[i].get("followup")]
        kept = []
        for i in seeded:
            convs[i].append({"role": "user", "content": prompts[i]["followup"]})
            kept.append(i)
        users = followups(target, cfg, out, [convs[i] for i in sampled]) if sampled else []
        for i, u in zip(sampled, users):
            text = cd.clean_user_turn(target.decode(u["ids"])) if u["eos"] or cfg.synthesis.keep_unfinished else None
            if text is not None:
                convs[i].append({"role": "user", "content": text})
                kept.append(i)
        kept.sort()
        stats["followups"] = len(kept)
        answers2 = answer(target, cfg, out, "answer2", [convs[i] for i in kept])
        for i, a in zip(kept, answers2):
            convs[i].append({"role": "assistant", "content": target.decode(a["ids"])})
        stats["answer_tokens"] += sum(len(a["ids"]) for a in answers2)

    path = out / "conversations.jsonl"
    cd.write_shard(path, [{"id": f"{cfg.id_prefix}-{i:06d}", "source": p["source"], "messages": c}
                          for i, (p, c) in enumerate(zip(prompts, convs))])
    manifest = {"file": path.name, "sha256": file_sha256(path), "conversations": len(convs), **stats,
                "seconds_this_run": round(time.perf_counter() - t0, 1)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _shard_defining(cfg: ChatDataConfig) -> dict:
    """The settings that decide what the shards hold (device, dtype of compute and threads do not)."""
    data = omit_added_later(dump_config(cfg), ADDED_LATER)
    for key in ("out_dir", "device", "threads", "id_prefix"):
        data.pop(key)
    return data


# Fields added after data directories were started, at the value that writes what those directories hold: there
# they stay out of the saved config, so the directories remain valid.
ADDED_LATER = {("synthesis", "category_prompts"): 0, (None, "sampler"): "exponential-race"}


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def _differences(saved: dict, now: dict) -> list[str]:
    """``"key: the directory has A, this config B"`` for each shard-defining setting that differs (a field absent
    from an older directory's saved config holds its ``ADDED_LATER`` value there)."""
    neutral = {(name if section is None else f"{section}.{name}"): value for (section, name), value in ADDED_LATER.items()}
    old, new = _flatten(saved), _flatten(now)
    pairs = {key: (old.get(key, neutral.get(key)), new.get(key, neutral.get(key))) for key in old.keys() | new.keys()}
    return [f"{key}: the directory has {a!r}, this config {b!r}" for key, (a, b) in sorted(pairs.items()) if a != b]


def random_subset(items: list[int], fraction: float, seed: int) -> list[int]:
    rng = random.Random(cd.shard_seed(seed, "subset", 0))
    return rng.sample(items, round(len(items) * fraction))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.datagen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="chat data YAML (e.g. configs/smollm2-135m-instruct-data.yaml)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides, e.g. regenerate.batch_size=16")
    args = ap.parse_args(argv)
    cfg = load_config(ChatDataConfig, args.config, args.overrides)
    manifest = run(cfg)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
