"""Regeneration throughput of every way eaglehead can write chat data, on the same prompts, interleaved (A B C ...
then ... C B A) so all see the same machine load: the torch sampler (float32, bfloat16), ``transformers.generate``,
the built-in llama.cpp server on the target's GGUF as shipped or as a float copy (slots chosen per method), and any
running OpenAI-compatible server.

    python -m eaglehead.datagen.bench --target builtin:smollm2-135m-instruct --prompts 128 --max-new-tokens 512 \\
        --repeats 2 --engines torch:float32,torch:bfloat16,hf-generate,llama.cpp:as-is:8,llama.cpp:float16:8
    python -m eaglehead.datagen.bench --engines openai --base-url http://127.0.0.1:8000/v1 --model <name>

Engines (``--engines``, comma-separated): ``torch[:dtype[:batch[:plain]]]`` (the sampler of ``regenerate.engine:
torch``, one per ``--samplers``; batch: rows decoded together, default ``--batch-size``; ``plain``: decode attention
over the whole padded cache instead of row segments, the sampler before segments), ``hf-generate[:dtype[:batch]]``,
``llama.cpp[:as-is|float32|float16[:slots]]`` (``regenerate.engine: llama.cpp``; the server starts before the first
timed call and is not timed), ``openai`` (``--base-url``, ``--model``,
``--api-key-env``). Prompts are standard-library seed prompts, chat-templated, sorted by length as the data
generator sorts them; tokens counted = new tokens up to and including the first EOS. Per call: tokens/s, this
process's CPU seconds, the server process's CPU seconds and the hypervisor's steal; for a server, the client's
overhead: the share of each request's time (sent -> parsed) not spent in the server's own prompt + decode timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from eaglehead.builtin.devices import SPEED_FLAGS, cpu_info
from eaglehead.builtin.models import load_target
from eaglehead.builtin.text import encode_prompt, eos_token_ids, left_pad, pad_token_id
from eaglehead.decode import SamplingConfig

from .chat_data import stdlib_task_prompts
from .config import SAMPLERS, ChatDataConfig, LlamaCppEngineConfig, OpenAIEngineConfig, RegenerateConfig, sampler_named
from .engines import request_seed
from .stream import sample_stream


class _Torch:
    def __init__(self, model, args, sampler: str, batch_size: int, segments: bool = True):
        self.model, self.args, self.sampler, self.batch_size = model, args, sampler, batch_size
        self.segments = segments

    def __call__(self, rows, eos, pad, seed) -> int:
        a = self.args
        toks, _ = sample_stream(self.model, rows, batch_size=self.batch_size,
                                sampling=SamplingConfig(temperature=a.temperature),
                                max_new_tokens=a.max_new_tokens, eos_ids=eos, pad_id=pad,
                                generator=torch.Generator().manual_seed(seed), sampler=self.sampler,
                                segments=self.segments)
        return sum(map(len, toks))


class _HFGenerate:
    def __init__(self, model, args, batch_size: int):
        self.model, self.args, self.batch_size = model, args, batch_size

    def __call__(self, rows, eos, pad, seed) -> int:
        a, n = self.args, 0
        torch.manual_seed(seed)
        for j in range(0, len(rows), self.batch_size):
            ids, mask = left_pad(rows[j:j + self.batch_size], pad, "cpu")
            out = self.model.generate(ids, attention_mask=mask, do_sample=True, temperature=a.temperature, top_k=0,
                                      top_p=1.0, max_new_tokens=a.max_new_tokens, eos_token_id=sorted(eos),
                                      pad_token_id=pad)
            for row in out[:, ids.shape[1]:].tolist():
                ends = [i for i, t in enumerate(row) if t in eos]
                n += ends[0] + 1 if ends else len(row)
        return n


class _Engine:
    """A serving engine; remembers its client/server time split and the server process's CPU time per call."""

    def __init__(self, engine, args):
        self.engine, self.args = engine, args
        self.last: dict = {}

    def __call__(self, rows, eos, pad, seed) -> int:
        s0, cpu0 = _copy(self.engine.stats), self.server_cpu()
        toks, _ = self.engine.complete(rows, sampling=SamplingConfig(temperature=self.args.temperature),
                                       max_new_tokens=self.args.max_new_tokens, eos_ids=eos,
                                       seeds=[request_seed(seed, i) for i in range(len(rows))],
                                       labels=[f"prompt {i}" for i in range(len(rows))])
        s1, cpu1 = self.engine.stats, self.server_cpu()
        self.last = {"client_s": s1.client_s - s0.client_s, "server_s": s1.server_s - s0.server_s,
                     "server_cpu": None if cpu0 is None else cpu1 - cpu0}
        return sum(map(len, toks))

    def server_cpu(self) -> float | None:
        """CPU seconds of the built-in server's process so far (from /proc; None for a server elsewhere)."""
        server = getattr(self.engine, "process", None)
        try:
            fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (AttributeError, OSError, IndexError, ValueError):
            return None


def _copy(stats):
    from dataclasses import replace

    return replace(stats)


def _steal_seconds() -> float | None:
    """CPU time the hypervisor gave other guests, all CPUs, from /proc/stat (None where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_line() -> str:
    """CPU model, cores and the flags that decide the fast path (``eaglehead.builtin.devices.cpu_info``)."""
    info = cpu_info()
    have = " ".join(info["flags"]) or f"none of {', '.join(SPEED_FLAGS)}"
    return f"{info['model'] or '?'}, {os.cpu_count()} cores, flags: {have}; load average {os.getloadavg()[0]:.2f}"


def _parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m eaglehead.datagen.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--batch-size", type=int, default=32, help="rows decoded together by torch and hf-generate")
    ap.add_argument("--prompts", type=int, default=128)  # the data configs' shard size
    ap.add_argument("--max-new-tokens", type=int, default=512)  # the data configs' cap
    ap.add_argument("--temperature", type=float, default=0.7)  # the data configs' temperature
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads and llama.cpp decode threads")
    ap.add_argument("--samplers", default="inverse-cdf",
                    help=f"comma-separated draw functions of the torch engine ({', '.join(SAMPLERS)}), "
                         "each its own method")
    ap.add_argument("--engines", default="torch,hf-generate",
                    help="comma-separated: torch[:dtype[:batch[:plain]]], hf-generate[:dtype[:batch]], "
                         "llama.cpp[:as-is|float32|float16[:slots]], openai")
    ap.add_argument("--base-url", help="engine openai: the server's URL, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="engine openai: the served model's name")
    ap.add_argument("--api-key-env", help="engine openai: the environment variable holding the API key")
    ap.add_argument("--max-concurrency", type=int, default=None, help="requests in flight (default: slots, or 32)")
    args = ap.parse_args(argv)
    for x in args.samplers.split(","):
        try:
            sampler_named(x.strip())
        except ValueError as err:
            ap.error(f"--samplers: {err}")
    return ap, args


def _methods(ap, args, tok, model, stack) -> list[tuple[str, object]]:
    """``(name, callable)`` for each ``--engines`` entry; servers are started here and stopped by ``stack``."""
    models = {"float32": model}
    methods = []
    for spec in [e.strip() for e in args.engines.split(",") if e.strip()]:
        kind, *opts = spec.split(":")
        if kind in ("torch", "hf-generate"):
            dtype = opts[0] if opts else "float32"
            plain = kind == "torch" and len(opts) == 3 and opts[2] == "plain"
            batch = _batch_option(ap, spec, opts[1:2] if plain else opts[1:], args.batch_size)
            if dtype not in models:
                models[dtype] = load_target(args.target, dtype=dtype, device="cpu")[0]
            if kind == "hf-generate":
                methods.append((f"hf-generate/{dtype}/batch {batch}", _HFGenerate(models[dtype], args, batch)))
            else:
                methods += [(f"torch/{dtype}/{x.strip()}/batch {batch}{'/plain' if plain else ''}",
                             _Torch(models[dtype], args, x.strip(), batch, segments=not plain))
                            for x in args.samplers.split(",")]
        elif kind in ("llama.cpp", "openai"):
            label, server = _server(ap, args, tok, kind, opts)
            methods.append((label, _Engine(stack.enter_context(server), args)))
        else:
            ap.error(f"--engines: unknown engine {kind!r} in {spec!r} (torch, hf-generate, llama.cpp, openai)")
    return methods


def _batch_option(ap, spec: str, opts: list[str], default: int) -> int:
    """The rows decoded together named by ``torch:dtype:BATCH`` (else ``--batch-size``)."""
    if not opts:
        return default
    if len(opts) > 1 or not opts[0].isdigit() or int(opts[0]) < 1:
        ap.error(f"--engines: {spec!r}: expected torch[:dtype[:batch[:plain]]] with a batch size >= 1")
    return int(opts[0])


def _server(ap, args, tok, kind, opts):
    """``(label, context manager of the started/connected engine)`` for one ``--engines`` entry."""
    from contextlib import closing

    from .engine_llamacpp import LlamaCppEngine
    from .engine_openai import OpenAIEngine

    common = dict(max_concurrency=args.max_concurrency, max_new_tokens=args.max_new_tokens, retries=1)
    turn_end = tok.convert_tokens_to_ids(tok.eos_token)
    if kind == "openai":
        if not (args.base_url and args.model):
            ap.error("--engines openai needs --base-url and --model")
        rc = RegenerateConfig(engine="openai", **common, openai=OpenAIEngineConfig(
            base_url=args.base_url, model=args.model, api_key_env=args.api_key_env))
        return f"openai/{args.model}", closing(OpenAIEngine.connect(rc, tok, turn_end))
    gguf, slots = (opts + ["as-is"])[0], int(opts[1]) if len(opts) > 1 else 8
    cfg = ChatDataConfig(target=args.target, out_dir=os.devnull, threads=args.threads, regenerate=RegenerateConfig(
        engine="llama.cpp", **common, llamacpp=LlamaCppEngineConfig(gguf=gguf, slots=slots)))
    return f"llama.cpp/{gguf}/{slots} slots", closing(LlamaCppEngine.start(cfg, tok, turn_end))


def _timed(name, fn, rows, eos, pad, seed, r) -> tuple[float, float]:
    """``(tokens/s, tokens per CPU second of this process and the server's)`` of one call, printed."""
    t0, cpu0, steal0 = time.perf_counter(), time.process_time(), _steal_seconds()
    n = fn(rows, eos, pad, seed=seed)
    dt, cpu, steal1 = time.perf_counter() - t0, time.process_time() - cpu0, _steal_seconds()
    # CPU seconds of this process (and of the server's) and the hypervisor's steal over the call: a slow call with
    # little steal and CPU = threads x wall was slowed inside the machine (memory bandwidth, frequency, neighbours);
    # tokens per CPU second compare methods that got unequal shares of a machine other processes also use
    extra = "" if steal0 is None or steal1 is None else f", steal {steal1 - steal0:5.1f} s"
    last = getattr(fn, "last", {})
    if last.get("server_cpu") is not None:
        extra += f", server cpu {last['server_cpu']:6.1f} s"
        cpu += last["server_cpu"]
    if last.get("server_s"):
        extra += f", client overhead {1 - last['server_s'] / last['client_s']:5.1%}"
    print(f"repeat {r} {name:32s} {n:7d} tokens {dt:7.1f} s {n / dt:7.1f} tok/s {n / cpu:6.1f} tok/cpu-s "
          f"(cpu {cpu:6.1f} s{extra})", flush=True)
    return n / dt, n / cpu


def main(argv: list[str] | None = None) -> int:
    from contextlib import ExitStack

    ap, args = _parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine_line()}", flush=True)
    model, tok = load_target(args.target, dtype="float32", device="cpu")
    eos = eos_token_ids(model, tok)
    pad = pad_token_id(tok, eos)
    rows = sorted((encode_prompt(tok, p["prompt"]) for p in stdlib_task_prompts(args.prompts, seed=123)), key=len)
    with ExitStack() as stack:  # servers stop here, on success, error and Ctrl-C
        methods = _methods(ap, args, tok, model, stack)
        rates: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in methods}
        for r in range(args.repeats):
            for name, fn in methods[:: 1 if r % 2 == 0 else -1]:
                rates[name].append(_timed(name, fn, rows, eos, pad, r, r))
    med = {k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for k, v in rates.items()}
    base = next((k for k in med if k.startswith("hf-generate")), None)
    print(f"median ({args.prompts} prompts, max_new_tokens {args.max_new_tokens}, T={args.temperature}, "
          f"threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f}):")
    for name, (value, per_cpu) in sorted(med.items(), key=lambda kv: -kv[1][0]):
        ratio = f", {value / med[base][0]:.2f}x {base}" if base else ""
        print(f"  {name:32s} {value:7.1f} tok/s {per_cpu:6.1f} tok/cpu-s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
