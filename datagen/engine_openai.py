"""``regenerate.engine: openai``: a running OpenAI-compatible server (vLLM, SGLang, llama.cpp's llama-server).

    regenerate:
      engine: openai
      openai: {base_url: "http://127.0.0.1:8000/v1", model: HuggingFaceTB/SmolLM2-135M-Instruct,
               api_key_env: OPENAI_API_KEY}

Each prompt goes to ``POST <base_url>/completions`` as the target's own chat-templated *token ids* (never the
server's chat template), with the config's temperature, top-p and token cap, a seed per request, the samplers
servers add by default switched off (top-k, min-p, repetition penalties), and the template's turn-end and EOS ids as
stop tokens. The sampled ids are taken from the answer where the server gives them (vLLM's ``token_ids`` with
``return_token_ids``): exact. Otherwise the answer's text is tokenized with the target's tokenizer: the text, which
is what the data keeps, is exact for a byte-level BPE (it decodes back to itself), but the ids and so the token
counts may differ from the sampled ones where the text has several tokenizations. Each shard's record says which
(``token_ids: server|retokenized``).

Before any work the server's tokenizer is checked against the target's: ``POST /tokenize`` (llama.cpp, vLLM,
SGLang) of a chat-templated probe must give the target's ids; a server without ``/tokenize`` is checked on its first
answers instead (their ids must decode to their text), and one that gives neither is refused.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from eaglehead.decode import SamplingConfig

from .engine_http import EngineError, HTTPStatusError, JsonClient

NOT_FOUND = (404, 405, 501)  # a route the server does not have


@dataclass
class EngineStats:
    """What the engine did, summed over requests: for the client's overhead (``client_s`` against the server's
    own ``server_s``, from the timings llama.cpp puts in each answer)."""

    requests: int = 0
    tokens: int = 0
    client_s: float = 0.0  # request sent -> answer parsed, per request, summed
    server_s: float = 0.0  # prompt_ms + predicted_ms the server reports, summed (0 where it reports none)
    server_tokens: int = 0  # predicted_n the server reports


class OpenAIEngine:
    """Raw completions from an OpenAI-compatible server; :meth:`complete` is what the pipeline calls."""

    name = "openai"

    def __init__(self, client: JsonClient, *, model: str, tokenizer, turn_end: int, concurrency: int,
                 where: str = "regenerate.openai.base_url"):
        self.client, self.model, self.tokenizer, self.turn_end = client, model, tokenizer, turn_end
        self.concurrency, self.where = concurrency, where
        self.version = "unknown"
        self.model_sha256: str | None = None  # known where eaglehead serves the file itself
        self.ids_from: set[str] = set()  # "server" / "retokenized": where the returned ids came from
        self.stats = EngineStats()
        self._lock = threading.Lock()
        self._verify_on_answers = False  # no /tokenize: the first answers' ids are checked against their text

    # ------------------------------------------------------------------------------------------- set-up
    @classmethod
    def connect(cls, rc, tokenizer, turn_end: int) -> "OpenAIEngine":
        """The server of ``rc.openai`` (a RegenerateConfig's), checked: it answers, and serves ``rc.openai.model``."""
        o = rc.openai
        headers = {}
        if o.api_key_env:
            key = os.environ.get(o.api_key_env)
            if not key:
                raise EngineError(f"regenerate.openai.api_key_env: the environment variable {o.api_key_env!r} is not "
                                  f"set (it should hold the API key of {o.base_url}); export it, or set "
                                  "api_key_env: null")
            headers["Authorization"] = f"Bearer {key}"
        client = JsonClient(o.base_url, headers=headers, timeout_s=rc.request_timeout_s, retries=rc.retries,
                            backoff_s=rc.retry_backoff_s)
        engine = cls(client, model=o.model, tokenizer=tokenizer, turn_end=turn_end, concurrency=rc.concurrency())
        engine.check_served(api_key_env=o.api_key_env)
        engine.version = engine.server_version()
        return engine

    def check_served(self, api_key_env: str | None = None) -> None:
        """``GET <base_url>/models`` answers and lists :attr:`model` (an error naming the URL otherwise)."""
        url = f"{self.client.base_url}/models"
        try:
            listing = self.client.request("GET", f"{self.client.prefix}/models")
        except HTTPStatusError as err:
            if err.status in (401, 403):
                how = (f"the key in ${api_key_env} was refused" if api_key_env else
                       "it wants an API key: set regenerate.openai.api_key_env to the variable that holds it")
                raise EngineError(f"{self.where} {self.client.base_url}: HTTP {err.status} from {url}: {how}") from None
            raise EngineError(f"{self.where} {self.client.base_url}: {err} (expected the OpenAI model list; is "
                              "base_url the part before /completions, e.g. http://host:8000/v1?)") from None
        except EngineError as err:
            raise EngineError(f"{self.where} {self.client.base_url}: no server answers there ({err}); start it "
                              "(e.g. vllm serve <model>) or fix the URL") from None
        served = [m.get("id") for m in listing.get("data", [])]
        served += [a for m in listing.get("data", []) for a in m.get("aliases", [])]
        if self.model not in served:
            raise EngineError(f"regenerate.openai.model {self.model!r}: the server at {self.client.base_url} serves "
                              f"{sorted(set(served))}, not this model")

    def server_version(self) -> str:
        """What the server says it is: vLLM's ``/version``, llama.cpp's ``/props`` build, SGLang's server info."""
        for path, read in (("/version", lambda d: f"vllm {d['version']}"),
                           ("/props", lambda d: f"llama.cpp {d['build_info']}"),
                           ("/get_server_info", lambda d: f"sglang {d['version']}")):
            try:
                return read(self.client.request("GET", path, timeout_s=10, retries=0))
            except (EngineError, KeyError, TypeError):
                continue
        return "unknown"

    def check_tokenizer(self, text: str, ids: list[int], target: str) -> None:
        """The server's tokens for ``text`` (the target's chat template around a probe) must be ``ids``, the
        target's; an error naming both otherwise."""
        body = {"content": text, "prompt": text, "model": self.model, "add_special": False,
                "add_special_tokens": False, "parse_special": True}  # llama.cpp's and vLLM/SGLang's names
        for path in ("/tokenize", f"{self.client.prefix}/tokenize"):
            try:
                got = self.client.request("POST", path, body, timeout_s=30)
                break
            except HTTPStatusError as err:
                if err.status not in NOT_FOUND:
                    raise EngineError(f"{self.where} {self.client.base_url}: tokenizer check: {err}") from None
        else:
            self._verify_on_answers = True
            return
        server = [t if isinstance(t, int) else t.get("id") for t in got.get("tokens", [])]
        if server != ids:
            at = next((i for i, (a, b) in enumerate(zip(server, ids)) if a != b), min(len(server), len(ids)))
            raise EngineError(
                f"tokenizer mismatch: the server at {self.client.base_url} (model {self.model!r}) and the target "
                f"{target!r} tokenize the same chat-templated text differently: {len(server)} vs {len(ids)} tokens, "
                f"first difference at token {at} (server {server[at:at + 4]}, target {ids[at:at + 4]}); the server "
                "must serve the target's own model")

    # ------------------------------------------------------------------------------------------- work
    def complete(self, prompts: list[list[int]], *, sampling: SamplingConfig, max_new_tokens: int, seeds: list[int],
                 labels: list[str], eos_ids: set[int]) -> tuple[list[list[int]], list[bool]]:
        """Continue each prompt (token ids) until a turn end / EOS or ``max_new_tokens``: ``(new ids, ended)``, the
        ids up to and including the first of ``eos_ids``, as the torch sampler returns them."""
        bodies = [self.request_body(p, sampling, max_new_tokens, s, eos_ids) for p, s in zip(prompts, seeds)]
        replies = self.client.post_many(self.completions_path(), bodies, labels, self.concurrency)
        toks, ended = [], []
        for (reply, seconds), label in zip(replies, labels):
            ids, stop, timings, text = self.parse(reply, label)
            if self._verify_on_answers:
                self._verify_answer(ids, text, label)
            ids, stop = _cut_at_eos(ids, eos_ids, stop, self.turn_end)
            toks.append(ids)
            ended.append(stop)
            self._count(len(ids), seconds, timings)
        return toks, ended

    def check_context(self, prompts: list[list[int]], labels: list[str], max_new_tokens: int, limit: int,
                      setting: str) -> None:
        """Every prompt plus ``max_new_tokens`` fits the server's context ``limit`` (config key ``setting``)."""
        for prompt, label in zip(prompts, labels):
            if len(prompt) + max_new_tokens > limit:
                raise EngineError(f"prompt {label}: {len(prompt)} prompt tokens + max_new_tokens {max_new_tokens} do "
                                  f"not fit {setting}={limit}; raise it")

    def completions_path(self) -> str:
        return f"{self.client.prefix}/completions"

    def request_body(self, prompt: list[int], sampling: SamplingConfig, max_new_tokens: int, seed: int,
                     eos_ids: set[int]) -> dict:
        return {"model": self.model, "prompt": prompt, "max_tokens": max_new_tokens, "seed": seed,
                "temperature": sampling.temperature, "top_p": sampling.top_p or 1.0, **PLAIN_SAMPLING,
                "stop_token_ids": sorted(eos_ids),  # vLLM, SGLang: the template's turn end too, not only EOS
                "return_token_ids": True}  # vLLM >= 0.10.2: the sampled ids themselves

    def parse(self, reply: dict, label: str) -> tuple[list[int], bool, dict | None, str]:
        """``(ids, stopped by the model, server timings or None, text)`` of one answer."""
        try:
            choice = reply["choices"][0]
            text = choice.get("text") or ""
        except (KeyError, IndexError, TypeError):
            raise EngineError(f"prompt {label}: {self.client.base_url}: expected an OpenAI completion, got "
                              f"{str(reply)[:300]}") from None
        ids = choice.get("token_ids", choice.get("response_token_ids"))  # vLLM's name; SGLang's
        with self._lock:
            self.ids_from.add("server" if ids is not None else "retokenized")
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(ids), choice.get("finish_reason") == "stop", reply.get("timings"), text

    def _verify_answer(self, ids: list[int], text: str, label: str) -> None:
        if "retokenized" in self.ids_from:
            raise EngineError(f"{self.where} {self.client.base_url}: the server has no /tokenize and returns no "
                              "token ids, so its tokenizer cannot be checked against the target's")
        mine = self.tokenizer.decode(ids, skip_special_tokens=True)
        if mine.strip() != text.strip():
            raise EngineError(f"tokenizer mismatch: prompt {label}: the ids the server at {self.client.base_url} "
                              f"returned decode with the target's tokenizer to {mine[:80]!r}, the server's text is "
                              f"{text[:80]!r}; the server must serve the target's own model")
        self._verify_on_answers = False

    def _count(self, tokens: int, seconds: float, timings: dict | None) -> None:
        with self._lock:
            s = self.stats
            s.requests, s.tokens, s.client_s = s.requests + 1, s.tokens + tokens, s.client_s + seconds
            if timings:
                s.server_s += (timings.get("prompt_ms", 0.0) + timings.get("predicted_ms", 0.0)) / 1000
                s.server_tokens += int(timings.get("predicted_n", 0))

    def record(self) -> dict:
        """What each shard records: the engine, the server, its version and the model (sha256 where known)."""
        ids = "server" if self.ids_from == {"server"} else "retokenized" if self.ids_from else None
        return {"engine": self.name, "server": self.client.base_url, "server_version": self.version,
                "model": self.model, "model_sha256": self.model_sha256, "token_ids": ids}

    def close(self) -> None:
        self.client.close()


# Samplers servers apply unless told not to (llama.cpp: top-k 40, min-p 0.05; vLLM: those of the model's
# generation_config), switched off so tokens are drawn from the target's law at the config's temperature and top-p,
# as the torch sampler draws them; names of vLLM/SGLang and of llama.cpp side by side (each ignores the other's).
PLAIN_SAMPLING = {"top_k": -1, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                   "repetition_penalty": 1.0, "repeat_penalty": 1.0,
                   "samplers": ["temperature", "top_p"]}  # llama.cpp: in this order, as eaglehead.decode.probs


def _cut_at_eos(ids: list[int], eos_ids: set[int], stopped: bool, turn_end: int) -> tuple[list[int], bool]:
    """``ids`` up to and including the first end id, and whether the row ended there (the torch sampler's form). A
    server that stopped on its own end token without returning it (text only) gets ``turn_end`` appended."""
    for i, t in enumerate(ids):
        if t in eos_ids:
            return ids[:i + 1], True
    if stopped:
        return ids + [turn_end], True
    return ids, False
