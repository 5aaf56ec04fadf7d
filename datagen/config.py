"""The chat-data config (``configs/*-data*.yaml``): what the target writes, how, and what defines a shard.

    from eaglehead.builtin.typed_config import load_config
    cfg = load_config(ChatDataConfig, "configs/smollm2-135m-instruct-data.yaml", ["regenerate.batch_size=16"])

The saved ``config.json`` of a data directory holds :func:`shard_defining` of the config that started it; a
later run with other shard-defining settings is refused with each difference named (:func:`config_differences`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from eaglehead.builtin.typed_config import changed_fields, dump_config, flatten, omit_added_later
from eaglehead.decode import sample_from, sample_inverse_cdf

from .task_prompts import VERSIONS as TASK_PROMPT_VERSIONS

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
    # extraction, stem, humanities; eaglehead.datagen.task_prompts), each with a follow-up of its category
    category_prompts: int = 0
    # whose makers write them: 1, the shipped data's (~200 unique a category); 2, longer lists and more kinds of
    # task (over 1000 a category, no two differing in one word; eaglehead.datagen.task_prompts_v2)
    task_prompts_version: int = 1
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
        if self.task_prompts_version not in TASK_PROMPT_VERSIONS:
            raise ValueError(f"synthesis.task_prompts_version: expected one of {sorted(TASK_PROMPT_VERSIONS)}, got "
                             f"{self.task_prompts_version!r}")
        if not 0.0 <= self.second_turn_fraction <= 1.0:
            raise ValueError(f"synthesis.second_turn_fraction must be in [0, 1], got {self.second_turn_fraction}")
        if self.max_new_tokens < 1 or self.max_rounds < 1 or self.overlap_ngram < 1:
            raise ValueError("synthesis.max_new_tokens, max_rounds and overlap_ngram must be >= 1")


# What writes the tokens: "torch" (the in-process sampler, :mod:`~eaglehead.datagen.stream`), "openai" (a running
# OpenAI-compatible server: vLLM, SGLang, llama.cpp's llama-server), "llama.cpp" (llama.cpp's server started by
# eaglehead on 127.0.0.1 for the run; :mod:`~eaglehead.datagen.engines`) or "vllm" (vLLM's CPU build, likewise).
ENGINES = ("torch", "openai", "llama.cpp", "vllm")


@dataclass
class OpenAIEngineConfig:
    """``regenerate.engine: openai``: a server that is already running."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1 (the part before /completions)
    model: str | None = None  # the served model's name, as GET <base_url>/models lists it
    api_key_env: str | None = None  # the environment variable holding the API key (null: none is sent)

    def check(self) -> None:
        """Called when the engine is "openai": both the URL and the model are then required."""
        if not self.base_url or not self.model:
            raise ValueError("regenerate.openai.base_url and regenerate.openai.model are required with "
                             f"regenerate.engine 'openai' (got base_url={self.base_url!r}, model={self.model!r})")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"regenerate.openai.base_url: expected http://host:port/v1 or https://..., "
                             f"got {self.base_url!r}")
        try:
            parts.port  # noqa: B018 (urlsplit checks the port only when it is read)
        except ValueError:
            raise ValueError(f"regenerate.openai.base_url: bad port in {self.base_url!r}") from None


@dataclass
class LlamaCppEngineConfig:
    """``regenerate.engine: llama.cpp``: eaglehead serves the target's GGUF itself (127.0.0.1, this run only)."""

    file: str | None = None  # the GGUF; null: the target's own (a .gguf target, or builtin:smollm2-135m-instruct)
    gguf: Literal["as-is", "float32", "float16"] = "as-is"  # the file as shipped, or a float copy written from it
    # sequences decoded together (llama.cpp's n_parallel): on 2 cores 8 gave the most tokens per CPU second for the
    # Q4_1, F16 and F32 files, 16 about the same, 2-4 fewer (python -m eaglehead.datagen.bench)
    slots: int = 8
    ctx_per_slot: int = 4096  # tokens of context each slot holds: prompt + max_new_tokens must fit
    # decode threads; null: ChatDataConfig.threads, else every core. Fewer on a machine other jobs also use: llama.cpp's
    # threads wait for each other spinning, so one that is descheduled stalls the rest
    threads: int | None = None

    def __post_init__(self):
        if self.slots < 1 or self.ctx_per_slot < 16 or (self.threads is not None and self.threads < 1):
            raise ValueError(f"regenerate.llamacpp: slots and threads must be >= 1 and ctx_per_slot >= 16, got "
                             f"slots={self.slots}, ctx_per_slot={self.ctx_per_slot}, threads={self.threads}")


@dataclass
class VllmEngineConfig:
    """``regenerate.engine: vllm``: eaglehead serves the target with vLLM itself (127.0.0.1, this run only), from the
    venv ``make install`` builds (``.venv-vllm``; or ``python``, or $EAGLEHEAD_VLLM_PYTHON)."""

    model: str | None = None  # a Hugging Face directory; null: the target's own (a GGUF or built-in converted)
    max_model_len: int = 4096  # prompt + max_new_tokens must fit
    enforce_eager: bool = True  # no warm-up compilation (start-up ~30 s instead of ~95 s on 2 cores)
    threads: int | None = None  # cores vLLM binds; null: ChatDataConfig.threads, else every core
    python: str | None = None
    start_timeout_s: float = 600.0

    def __post_init__(self):
        if self.max_model_len < 16 or (self.threads is not None and self.threads < 1) or self.start_timeout_s <= 0:
            raise ValueError(f"regenerate.vllm: max_model_len must be >= 16, threads >= 1 and start_timeout_s > 0, got "
                             f"{self.max_model_len}, {self.threads}, {self.start_timeout_s}")


@dataclass
class RegenerateConfig:
    temperature: float = 0.7
    top_p: float | None = None
    max_new_tokens: int = 512
    batch_size: int = 32  # rows decoded together by the torch sampler
    shard_size: int = 64  # prompts per shard (the unit of resumption)
    engine: Literal["torch", "openai", "llama.cpp", "vllm"] = "torch"
    # How eaglehead talks to a server (engines openai and llama.cpp; they decide how, never what, is written):
    max_concurrency: int | None = None  # requests in flight; null: llamacpp.slots, or 32 for a server
    request_timeout_s: float = 600.0  # one completion, start to end
    retries: int = 4  # further attempts after a connection error, a timeout, HTTP 429 or 5xx
    retry_backoff_s: float = 1.0  # the first wait; it doubles with each further attempt
    openai: OpenAIEngineConfig = field(default_factory=OpenAIEngineConfig)
    llamacpp: LlamaCppEngineConfig = field(default_factory=LlamaCppEngineConfig)
    vllm: VllmEngineConfig = field(default_factory=VllmEngineConfig)
    # Reasoning targets (Qwen3 and others whose chat template reads enable_thinking; datagen/thinking.py): null, the
    # template's own default (nothing passed); true/false, passed to the template as enable_thinking wherever a
    # conversation is rendered, for every engine. Refused for a template that never reads it. With true, keep
    # max_new_tokens >= 1024 (the manifest warns otherwise): reasoning runs long and cut answers are counted
    enable_thinking: bool | None = None

    def __post_init__(self):
        if self.enable_thinking is not None and not isinstance(self.enable_thinking, bool):
            raise ValueError(f"regenerate.enable_thinking: expected null, true or false, got {self.enable_thinking!r}")
        if self.max_new_tokens < 1 or self.batch_size < 1 or self.shard_size < 1:
            raise ValueError("regenerate.max_new_tokens, batch_size and shard_size must be >= 1")
        if self.engine not in ENGINES:
            raise ValueError(f"regenerate.engine: expected one of {', '.join(map(repr, ENGINES))}, got {self.engine!r}")
        if (self.max_concurrency is not None and self.max_concurrency < 1) or self.retries < 0 \
                or self.request_timeout_s <= 0 or self.retry_backoff_s < 0:
            raise ValueError("regenerate.max_concurrency must be >= 1 (or null), retries >= 0, request_timeout_s > 0 "
                             f"and retry_backoff_s >= 0, got {self.max_concurrency}, {self.retries}, "
                             f"{self.request_timeout_s}, {self.retry_backoff_s}")
        if self.engine == "openai":
            self.openai.check()

    def concurrency(self) -> int:
        """Requests in flight: the setting, else one per llama.cpp slot, else 8 for vLLM (a CPU batches few), else 32
        (a GPU server batches many)."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        return {"llama.cpp": self.llamacpp.slots, "vllm": 8}.get(self.engine, 32)


@dataclass
class ChatDataConfig:
    target: str
    out_dir: str
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (None: torch's default; with workers, the cores / workers)
    # CPU processes that share a stage's missing shards (engine torch; each pinned to its own cores). Decides
    # nothing that is written: each shard has its own seed. 2 on a 2-core CPU: ~1.3x the tokens/s of 1
    workers: int = 1
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
        if self.workers < 1:
            raise ValueError(f"workers: expected a number of processes >= 1, got {self.workers!r}")
        if self.workers > 1 and (self.regenerate.engine != "torch" or self.device != "cpu"):
            raise ValueError(f"workers: {self.workers} processes share the shards of the in-process sampler on the "
                             f"CPU only (got regenerate.engine={self.regenerate.engine!r}, device={self.device!r}); "
                             "a serving engine runs its own parallel slots: set workers: 1")


# ------------------------------------------------------------------------------- what defines a shard


def shard_defining(cfg: ChatDataConfig) -> dict:
    """The settings that decide what the shards hold (device, dtype of compute and threads do not).

    With an engine other than torch, the torch sampler's settings (``dtype``, ``sampler``,
    ``regenerate.batch_size``; vLLM keeps ``dtype``) are left out and the engine's model is put in (``openai.model``;
    ``vllm.model``; ``llamacpp.gguf``,
    the file itself being checked by its sha256 in each shard's record). How requests are sent (concurrency,
    timeouts, retries, URL, key, slots, threads) never decides what is written."""
    data = omit_added_later(dump_config(cfg), ADDED_LATER)
    for key in ("out_dir", "device", "threads", "workers", "id_prefix"):
        data.pop(key)
    regen = data["regenerate"]
    openai, llamacpp, vllm = regen.pop("openai"), regen.pop("llamacpp"), regen.pop("vllm")
    for key in ("max_concurrency", "request_timeout_s", "retries", "retry_backoff_s"):
        regen.pop(key)
    if cfg.regenerate.engine != "torch":
        if cfg.regenerate.engine != "vllm":  # vLLM serves the target at this dtype: it decides the tokens
            data.pop("dtype")
        data.pop("sampler", None)
        regen.pop("batch_size")
    if cfg.regenerate.engine == "openai":
        regen["openai"] = {"model": openai["model"]}
    elif cfg.regenerate.engine == "llama.cpp":
        regen["llamacpp"] = {"gguf": llamacpp["gguf"]}
    elif cfg.regenerate.engine == "vllm":
        regen["vllm"] = {"model": vllm["model"]}
    return data


# Fields added after data directories were started, at the value that writes what those directories hold: there
# they stay out of the saved config, so the directories remain valid. (The client settings of the engines are not
# here: shard_defining drops them whatever their value.)
ADDED_LATER = {("synthesis", "category_prompts"): 0, (None, "sampler"): "exponential-race",
               ("regenerate", "engine"): "torch", ("synthesis", "task_prompts_version"): 1,
               ("regenerate", "enable_thinking"): None}


def config_differences(saved: dict, now: dict) -> list[str]:
    """``"key: the directory has A, this config B"`` for each shard-defining setting that differs (a field absent
    from an older directory's saved config holds its ``ADDED_LATER`` value there)."""
    neutral = {(name if section is None else f"{section}.{name}"): value for (section, name), value in ADDED_LATER.items()}
    return [f"{key}: the directory has {a!r}, this config {b!r}"
            for key, a, b in changed_fields(flatten(saved), flatten(now), neutral)]
