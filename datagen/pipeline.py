"""Chat training data the target writes itself: synthesised user prompts, regenerated answers.

    eaglehead prepare --data-config configs/smollm2-135m-instruct-data.yaml      # resumable
    python -m eaglehead.datagen --config configs/smollm2-135m-instruct-data.yaml  # the same

Stages, each written as JSONL shards under ``out_dir`` as they finish (a killed run resumes at the
first missing shard; a finished shard is never redone and every shard has its own seed, so a resumed
run writes exactly what an uninterrupted one would):

1. ``user``: user turns sampled from the target's own chat template cut just before the user's text
   (Magpie), in batches, until ``synthesis.magpie_prompts`` clean unique turns exist.
2. Seed task prompts from standard-library docstrings and ``pydoc`` topics (``eaglehead.datagen.chat_data``)
   and, with ``synthesis.category_prompts``, templated tasks of the eight chat-benchmark categories
   (``eaglehead.datagen.task_prompts``).
   All prompts are de-duplicated and those sharing a word n-gram with MT-bench or HumanEval are removed
   (``prompts.json`` counts each removal).
3. ``answer``: the target answers every prompt at ``regenerate.temperature``; prompts are sorted by
   length into shards, decoded with continuous batching (:func:`sample_stream`: a finished row leaves
   the batch at once and a waiting prompt takes its place); each token is drawn by inverting the
   cumulative distribution with one uniform per row (``sampler``, :data:`SAMPLERS`). With
   ``workers: N`` the missing shards are shared among N CPU processes (:mod:`~eaglehead.datagen.workers`). With
   ``regenerate.engine: openai`` or ``llama.cpp`` every stage's tokens come from a server instead
   (:mod:`~eaglehead.datagen.engines`: the same chat-templated token ids, one seed per request); its
   shards also record the engine, the server's version and the model file's sha256.
4. ``followup`` / ``answer2``: for ``synthesis.second_turn_fraction`` of the conversations the target
   writes a follow-up user turn (Magpie again, after its own answer) and answers it; a category task
   prompt brings its own follow-up of its category ("now make it shorter", "add tests").

The result, ``conversations.jsonl`` (``messages`` format), is what ``data.sources`` of a training
config points at; ``manifest.json`` holds its sha256, the counts and the resolved config.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from eaglehead.builtin.shipped import file_sha256
from eaglehead.builtin.typed_config import parse_config_args
from eaglehead.builtin.text import thinking_kwargs
from eaglehead.decode import SamplingConfig

from . import chat_data as cd
from .config import ChatDataConfig, config_differences, shard_defining
from .engines import open_engine, request_seed
from .stream import sample_stream
from .task_prompts import category_task_prompts
from .thinking import check_enable_thinking, thinking_warnings
from .workers import ShardJob, sample_in_workers

SENTINEL = "\x00EAGLEHEAD-USER-TURN\x00"


class _Target:
    """The target as the stages see it: its tokenizer, chat-template prefixes and end ids, and what writes its
    tokens: the model in process (``regenerate.engine: torch``) or :attr:`engine`, a server (set by :func:`run`)."""

    def __init__(self, cfg: ChatDataConfig, assemble_only: bool = False):
        from eaglehead.builtin.text import eos_token_ids, pad_token_id

        self.cfg = cfg
        self.engine = None
        self.assemble_only = assemble_only  # every shard must be on disk: nothing is sampled
        if cfg.regenerate.engine == "torch" and not assemble_only:
            from eaglehead.builtin.models import load_target

            self.model, self.tok = load_target(cfg.target, dtype=cfg.dtype, device=cfg.device, option="target")
        else:  # a server holds the weights: only the tokenizer and the end ids are needed here
            self.model, self.tok = _tokenizer_only(cfg.target, cfg.dtype)
        if not self.tok.chat_template:
            raise ValueError(f"target {cfg.target!r}: its tokenizer has no chat template; chat data needs one")
        check_enable_thinking(self.tok, cfg.regenerate.enable_thinking, cfg.target)
        # regenerate.enable_thinking, passed to every render of a conversation (datagen/thinking.py)
        self.template_kwargs = thinking_kwargs(cfg.regenerate.enable_thinking)
        turn_end = self._turn_end()
        self.eos = eos_token_ids(self.model, self.tok) | turn_end
        self.pad = pad_token_id(self.tok, self.eos)
        # what a server that stopped without returning its end token is taken to have stopped on
        self.turn_end_id = min(turn_end or self.eos or {self.pad})

    def _turn_end(self) -> set[int]:
        """The special token the template closes a turn with (``<|im_end|>`` in ChatML), if any."""
        text = self.tok.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
        after = self.tok(text.split(SENTINEL, 1)[1], add_special_tokens=False)["input_ids"]
        special = set(self.tok.all_special_ids) | set(getattr(self.tok, "added_tokens_decoder", {}))
        return {after[0]} if after and after[0] in special else set()

    def user_prefix(self, messages: list[dict]) -> list[int]:
        """Token ids of ``messages`` followed by the opening of a user turn (Magpie's pre-query)."""
        text = self.tok.apply_chat_template(messages + [{"role": "user", "content": SENTINEL}], tokenize=False,
                                            **self.template_kwargs)
        return self.tok(text.split(SENTINEL)[0], add_special_tokens=False)["input_ids"]

    def assistant_text(self, messages: list[dict]) -> str:
        """The prompt the target answers ``messages`` from, as text (``regenerate.enable_thinking`` passed)."""
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                            **self.template_kwargs)

    def assistant_prefix(self, messages: list[dict]) -> list[int]:
        """Token ids of :meth:`assistant_text`: what every engine is sent (no engine renders a template)."""
        return self.tok(self.assistant_text(messages), add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([t for t in ids if t not in self.eos], skip_special_tokens=True).strip()


def _tokenizer_only(name: str, dtype: str):
    """``(a stand-in holding the generation config, tokenizer)`` of target ``name``, without its weights."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer, GenerationConfig

    from eaglehead.builtin.models import check_model_name, resolve_target

    check_model_name(name, "target")
    path = resolve_target(name, dtype)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as err:
        raise ValueError(f"target {name!r}: cannot load its tokenizer ({err})") from None
    try:
        generation = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: the tokenizer's eos decides
        generation = None
    return SimpleNamespace(generation_config=generation), tok


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
                     max_new_tokens: int, batch_size: int, shard_size: int, seed: int, sampler: str,
                     labels: list[str] | None = None) -> list[dict]:
    """Generate a continuation for each prefix, sharded; returns ``{"ids", "eos"}`` per prefix.

    Prefixes are ordered by length so each batch pads little; shard ``k`` covers positions
    ``[k * shard_size, (k + 1) * shard_size)`` of that order and is skipped when already written.
    ``labels`` name the prompts in an engine's errors (default ``<stage>[i]``).
    """
    labels = labels or [f"{stage}[{i}]" for i in range(len(prefixes))]
    order = sorted(range(len(prefixes)), key=lambda i: (len(prefixes[i]), i))
    n_shards = math.ceil(len(order) / shard_size)
    paths = [cd.shard_path(out_dir / stage, stage, k) for k in range(n_shards)]
    progress = _Progress(stage, n_shards, sum(p.is_file() for p in paths))
    rows: dict[int, dict] = {}
    kwargs = dict(sampling=sampling, max_new_tokens=max_new_tokens, batch_size=batch_size, sampler=sampler)

    def job(k: int) -> ShardJob:
        idx = order[k * shard_size:(k + 1) * shard_size]
        return ShardJob(paths[k], idx, [prefixes[i] for i in idx], [labels[i] for i in idx],
                        cd.shard_seed(seed, stage, k))

    missing = [k for k, path in enumerate(paths) if not path.is_file()]
    if missing and target.assemble_only:
        _refuse_to_generate(paths[missing[0]], f"{len(missing)} of the {n_shards} {stage} shards are missing")
    if target.engine is None and target.cfg.workers > 1 and len(missing) > 1:
        sample_in_workers(target.cfg, [job(k) for k in missing], progress=progress, **kwargs)
    for k, path in enumerate(paths):
        shard = _read_shard(target, path)
        if shard is None:
            shard = _run_job(target, job(k), kwargs)
            progress.step(sum(len(r["ids"]) for r in shard))
        for r in shard:
            rows[r["index"]] = {"ids": r["ids"], "eos": r["eos"]}
    progress.close()
    return [rows[i] for i in range(len(prefixes))]


def _refuse_to_generate(path: Path, what: str) -> None:
    raise ValueError(f"{path}: not written ({what}), and this run only assembles the data from finished shards "
                     "(--assemble-only): restore the directory's shards first (python -m eaglehead.datagen.archive "
                     "unpack <archive> <out_dir>), or drop --assemble-only to generate what is missing (hours)")


def _run_job(target: _Target, job: ShardJob, sample_kwargs: dict) -> list[dict]:
    """Sample one shard's continuations and write the shard; returns its rows."""
    toks, eos = _sample(target, job.prompts, job.labels, job.indices, job.seed, **sample_kwargs)
    shard = [{"index": i, "ids": t, "eos": e} for i, t, e in zip(job.indices, toks, eos)]
    _write_shard(target, job.path, shard)
    return shard


def shard_writer(cfg: ChatDataConfig) -> Callable[[ShardJob, dict], list[dict]]:
    """For a worker process: load ``cfg``'s target once, return ``write(job, sample_kwargs)`` that samples one
    shard job and writes its shard."""
    target = _Target(cfg)
    return lambda job, sample_kwargs: _run_job(target, job, sample_kwargs)


def _sample(target: _Target, prompts: list[list[int]], labels: list[str], indices: list[int], seed: int, *,
            sampling: SamplingConfig, max_new_tokens: int, batch_size: int, sampler: str):
    """One shard's continuations ``(ids, ended)``: in process from one generator seeded ``seed``, or from the engine
    with one seed per request (from ``seed`` and the prompt's index, so the order requests finish in is no matter)."""
    if target.engine is None:
        gen = torch.Generator(device=target.model.device).manual_seed(seed)
        return sample_stream(target.model, prompts, batch_size=batch_size, sampling=sampling,
                             max_new_tokens=max_new_tokens, eos_ids=target.eos, pad_id=target.pad, generator=gen,
                             sampler=sampler)
    return target.engine.complete(prompts, sampling=sampling, max_new_tokens=max_new_tokens, labels=labels,
                                  seeds=[request_seed(seed, i) for i in indices], eos_ids=target.eos)


# What identifies the writer of a shard: a shard written by another engine or model does not mix with this run's.
_WRITER_KEYS = ("engine", "model_sha256", "model")


def _read_shard(target: _Target, path: Path) -> list[dict] | None:
    """A finished shard's rows (``None`` if not written yet), refused when another engine or model wrote it."""
    shard = cd.read_shard(path)
    if shard is not None:
        have = cd.read_record(path) or {"engine": "torch"}
        want = target.engine.record() if target.engine is not None else {"engine": target.cfg.regenerate.engine}
        if target.assemble_only:  # no server started: the engine named in the config is what can be checked
            keys = _WRITER_KEYS[:1]
        elif have.get("model_sha256") and want.get("model_sha256"):
            keys = _WRITER_KEYS[:2]
        else:
            keys = _WRITER_KEYS
        diff = [f"{key}: the shard has {have.get(key)!r}, this run {want.get(key)!r}"
                for key in keys if have.get(key) != want.get(key)]
        if diff:
            raise ValueError(f"{path}: written by another engine or model than this run's ({'; '.join(diff)}); "
                             f"its data must not mix with this run's: use a new out_dir, or delete the directory")
    return shard


def _write_shard(target: _Target, path: Path, rows: list[dict]) -> None:
    if target.engine is not None:  # the record first: a shard that exists always has its record
        cd.write_record(path, target.engine.record())
    cd.write_shard(path, rows)


def benchmark_texts() -> dict[str, list[str]]:
    """The benchmark texts no training prompt may share a word n-gram with."""
    from eaglehead.builtin.humaneval import load_humaneval
    from eaglehead.builtin.mtbench import load_mtbench

    return {"mt-bench": [t for q in load_mtbench() for t in q.turns],
            "humaneval": [prompt for _, prompt in load_humaneval()]}


def synthesise_prompts(target: _Target, cfg: ChatDataConfig, out: Path) -> tuple[list[dict], dict]:
    s = cfg.synthesis
    flt = cd.OverlapFilter(benchmark_texts(), s.overlap_ngram)
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
        seeds += category_task_prompts(s.category_prompts, cfg.seed, version=s.task_prompts_version)
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
    shard = _read_shard(target, path)
    if shard is None and target.assemble_only:
        _refuse_to_generate(path, f"Magpie round {index} is missing")
    if shard is None:
        n = cfg.regenerate.shard_size
        toks, eos = _sample(target, [prefix] * n, [f"{path.stem}[{j}]" for j in range(n)], list(range(n)),
                            cd.shard_seed(cfg.seed, "user", index), sampling=sampling,
                            max_new_tokens=cfg.synthesis.max_new_tokens, batch_size=cfg.regenerate.batch_size,
                            sampler=cfg.sampler)
        shard = [{"ids": t, "eos": e} for t, e in zip(toks, eos)]
        _write_shard(target, path, shard)
    return shard


def answer(target: _Target, cfg: ChatDataConfig, out: Path, stage: str, convs: list[list[dict]],
           ids: list[int] | None = None) -> list[dict]:
    """The target's answer (regenerated at ``regenerate.temperature``) to the last user turn of each conversation
    (``ids``: their indices among all conversations, which name them in errors; default ``0, 1, ...``)."""
    r = cfg.regenerate
    return _generate_shards(target, stage, out, [target.assistant_prefix(c) for c in convs],
                            sampling=SamplingConfig(temperature=r.temperature, top_p=r.top_p),
                            max_new_tokens=r.max_new_tokens, batch_size=r.batch_size, shard_size=r.shard_size,
                            seed=cfg.seed, sampler=cfg.sampler, labels=_labels(cfg, stage, ids, len(convs)))


def followups(target: _Target, cfg: ChatDataConfig, out: Path, convs: list[list[dict]],
              ids: list[int] | None = None) -> list[dict]:
    """A follow-up user turn sampled after each conversation (Magpie with the history in front)."""
    s, r = cfg.synthesis, cfg.regenerate
    return _generate_shards(target, "followup", out, [target.user_prefix(c) for c in convs],
                            sampling=SamplingConfig(temperature=s.temperature, top_p=s.top_p),
                            max_new_tokens=s.max_new_tokens, batch_size=r.batch_size, shard_size=r.shard_size,
                            seed=cfg.seed, sampler=cfg.sampler, labels=_labels(cfg, "followup", ids, len(convs)))


def _labels(cfg: ChatDataConfig, stage: str, ids: list[int] | None, n: int) -> list[str]:
    """``"<stage> of chat-000012"``: the conversation each prompt belongs to, by its id in the finished data."""
    return [f"{stage} of {cfg.id_prefix}-{i:06d}" for i in (ids if ids is not None else range(n))]


def run(cfg: ChatDataConfig, assemble_only: bool = False) -> dict:
    """Every stage, resuming from the shards already in ``cfg.out_dir``; returns the manifest.

    ``assemble_only``: sample nothing (the target's weights are not loaded, only its tokenizer): every shard
    must already be in ``out_dir`` (restored by ``eaglehead.datagen.archive unpack``), and a missing one is an
    error naming it. The conversations and manifest are rebuilt from the shards, as a full run writes them."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    resolved = json.dumps(shard_defining(cfg), indent=2, sort_keys=True)
    saved = out / "config.json"
    if saved.is_file() and (saved_text := saved.read_text()) != resolved:
        # both sides through JSON, so a tuple in the config compares equal to the list it was saved as
        changed = config_differences(json.loads(saved_text), json.loads(resolved))
        raise ValueError(f"{saved}: this output directory was started with another config (its shards would mix "
                         f"with this one's): {'; '.join(changed) or 'formatting only'}. Set those back to resume, "
                         "use a new out_dir, or delete the directory to start over")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    target = _Target(cfg, assemble_only)  # refuses a target its settings do not fit before the directory is keyed
    saved.write_text(resolved)
    warnings = thinking_warnings(cfg.regenerate.enable_thinking, cfg.regenerate.max_new_tokens)
    for line in warnings:
        print(f"[datagen] warning: {line}", file=sys.stderr)
    # A server it started is stopped on leaving, error or Ctrl-C included; assembling starts none.
    with (contextlib.nullcontext() if assemble_only else open_engine(cfg, target)) as engine:
        target.engine = engine
        prompts, convs, stats = _conversations(target, cfg, out)
        if engine is not None:
            stats["engine"] = engine.record()

    path = out / "conversations.jsonl"
    cd.write_shard(path, [{"id": f"{cfg.id_prefix}-{i:06d}", "source": p["source"], "messages": c}
                          for i, (p, c) in enumerate(zip(prompts, convs))])
    manifest = {"file": path.name, "sha256": file_sha256(path), "conversations": len(convs), **stats,
                "seconds_this_run": round(time.perf_counter() - t0, 1), **({"warnings": warnings} if warnings else {})}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _conversations(target: _Target, cfg: ChatDataConfig, out: Path) -> tuple[list[dict], list[list[dict]], dict]:
    """Every stage after the config check: ``(prompts, conversations, stats)``."""
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
        users = followups(target, cfg, out, [convs[i] for i in sampled], ids=sampled) if sampled else []
        for i, u in zip(sampled, users):
            text = cd.clean_user_turn(target.decode(u["ids"])) if u["eos"] or cfg.synthesis.keep_unfinished else None
            if text is not None:
                convs[i].append({"role": "user", "content": text})
                kept.append(i)
        kept.sort()
        stats["followups"] = len(kept)
        answers2 = answer(target, cfg, out, "answer2", [convs[i] for i in kept], ids=kept)
        for i, a in zip(kept, answers2):
            convs[i].append({"role": "assistant", "content": target.decode(a["ids"])})
        stats["answer_tokens"] += sum(len(a["ids"]) for a in answers2)

    return prompts, convs, stats


def random_subset(items: list[int], fraction: float, seed: int) -> list[int]:
    rng = random.Random(cd.shard_seed(seed, "subset", 0))
    return rng.sample(items, round(len(items) * fraction))


def main(argv: list[str] | None = None) -> int:
    cfg, _ = parse_config_args(ChatDataConfig, argv, prog="python -m eaglehead.datagen",
                               description=__doc__.split("\n\n")[0],
                               example="configs/smollm2-135m-instruct-data.yaml",
                               override_example="regenerate.batch_size=16")
    manifest = run(cfg)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
