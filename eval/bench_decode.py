"""Time our decode loop against transformers' ``generate()`` on one seeded random Llama.

Usage::

    python -m eaglehead.eval.bench_decode [--layers 12 --hidden 256 --vocab 4096 --new-tokens 128
                                           --prompts 4 --repeats 3 --lookup-tokens 10 --device cpu --threads N]
    python -m eaglehead.eval.bench_decode --profile 25   # also cProfile our vanilla loop and HF's

Four methods decode the same prompts (batch 1, greedy, exactly ``--new-tokens`` tokens: the model
has no EOS, and HF also gets ``min_new_tokens``): ``vanilla`` (our ``vanilla_generate``),
``hf-generate`` (``model.generate()``), ``prompt-lookup`` (our ``speculative_generate`` with
``PromptLookupDrafter``, gamma = ``--lookup-tokens``) and ``hf-prompt-lookup``
(``generate(prompt_lookup_num_tokens=--lookup-tokens)``). Both lookups match n-grams of size 2
then 1 (HF's default ``max_matching_ngram_size``); HF takes the earliest match, ours the latest.

Timing: each method runs once on every prompt as warm-up (excluded); then ``--repeats`` rounds,
each running every prompt through every method in turn (A B C D A B C D ..., order rotated per
prompt, so machine drift hits all methods alike). Time per output token of a round = wall time of
the whole calls (prefill included, the same for all four) / tokens; the table shows the median
over rounds, the min..max, and the median of process CPU time per token. Ratios are given as
ratio of medians, of minima, of CPU medians, and as the median of paired ratios (two calls on the
same prompt, seconds apart). Greedy outputs of all four must be token-identical.

Random weights give degenerate repetitive text: fine for timing the loop, not for judging drafts.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from typing import Callable

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.streamers import BaseStreamer

from eaglehead.builtin.devices import sync
from eaglehead.decode import PromptLookupDrafter, SamplingConfig, speculative_generate, vanilla_generate

GREEDY = SamplingConfig(temperature=0)
METHODS = ("vanilla", "hf-generate", "prompt-lookup", "hf-prompt-lookup")
PAIRS = (("vanilla", "hf-generate"), ("prompt-lookup", "hf-prompt-lookup"))


def build_llama(layers: int, hidden: int, vocab: int, *, seed: int = 0, intermediate: int | None = None,
                max_positions: int = 4096, device: str = "cpu", dtype: torch.dtype = torch.float32
                ) -> LlamaForCausalLM:
    """A seeded random-weight Llama without EOS/BOS/PAD ids (so nothing ever stops generation early).

    Heads of width 64 (at least one), half as many KV heads (grouped-query attention)."""
    heads = max(1, hidden // 64)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      max_position_embeddings=max_positions, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def make_prompts(n: int, vocab: int, *, length: int = 48, seed: int = 0) -> list[torch.Tensor]:
    """``n`` prompts ``[1, 2.5 * length]``: random tokens with a repeated span, as code or quoted text has."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randint(0, vocab, (n, length), generator=gen)
    return [torch.cat([row, row[: length // 2], row]).unsqueeze(0) for row in base]


class RoundCounter(BaseStreamer):
    """Counts ``generate()``'s streamer events after the prompt: one per target forward."""

    def __init__(self):
        self.events = -1  # the first put() is the prompt

    def put(self, value) -> None:
        self.events += 1

    def end(self) -> None:
        pass


def hf_config(new_tokens: int, lookup_tokens: int | None = None) -> GenerationConfig:
    """Greedy, exactly ``new_tokens`` new tokens, optionally prompt lookup; nothing else enabled."""
    extra = {} if lookup_tokens is None else {"prompt_lookup_num_tokens": lookup_tokens, "max_matching_ngram_size": 2}
    return GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            pad_token_id=0, eos_token_id=None, **extra)


Runner = Callable[[torch.Tensor], tuple[list[list[int]], int | None]]  # [B, T] -> (new tokens per row, forwards)


def method_runners(model: LlamaForCausalLM, new_tokens: int, lookup_tokens: int) -> dict[str, Runner]:
    """The four methods as ``prompts [B, T] -> (new tokens per row, target forwards)`` (HF: ``None``,
    not counted when timed, since a counting streamer would add per-step work). Rows must have equal
    lengths (no padding)."""
    vocab = model.config.vocab_size
    cfg_plain, cfg_lookup = hf_config(new_tokens), hf_config(new_tokens, lookup_tokens)

    def forwards(res):  # token-making target forwards: the rounds, plus vanilla's prefill (it makes token 1)
        return len(res.rounds) + (1 if res.prefill_tokens else 0)

    def ours(x):
        res = vanilla_generate(model, x, sampling=GREEDY, max_new_tokens=new_tokens)
        return res.tokens, forwards(res)

    def ours_lookup(x):
        res = speculative_generate(model, PromptLookupDrafter(vocab, max_ngram=2), x, gamma=lookup_tokens,
                                   sampling=GREEDY, max_new_tokens=new_tokens)
        return res.tokens, forwards(res)

    def hf(cfg):
        def run(x):
            out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg)
            return out[:, x.shape[1]:].tolist(), None
        return run

    return {"vanilla": ours, "hf-generate": hf(cfg_plain), "prompt-lookup": ours_lookup,
            "hf-prompt-lookup": hf(cfg_lookup)}


def interleaved_timings(runners: dict[str, Runner], prompts: list[torch.Tensor], repeats: int) -> dict:
    """Warm up, then time ``repeats`` interleaved rounds over all prompts.

    Returns ``{"wall": s[method][round][prompt], "cpu": same with process CPU time, "outputs":
    [method][prompt] = new tokens per row (last round), "rounds": target forwards[method] (ours; last
    round)}``."""
    device = prompts[0].device
    names = list(runners)
    for x in prompts:
        for name in names:
            runners[name](x)
    wall = {n: [[0.0] * len(prompts) for _ in range(repeats)] for n in names}
    cpu = {n: [[0.0] * len(prompts) for _ in range(repeats)] for n in names}
    outputs = {n: [[] for _ in prompts] for n in names}
    rounds = {n: 0 for n in names}
    for r in range(repeats):
        for i, x in enumerate(prompts):
            k = (r + i) % len(names)
            for name in names[k:] + names[:k]:  # rotate which method goes first
                sync(device)
                t0, c0 = time.perf_counter(), time.process_time()
                toks, n_rounds = runners[name](x)
                sync(device)
                wall[name][r][i] = time.perf_counter() - t0
                cpu[name][r][i] = time.process_time() - c0
                if r == repeats - 1:
                    outputs[name][i] = toks
                    rounds[name] += n_rounds or 0
    return {"wall": wall, "cpu": cpu, "outputs": outputs, "rounds": rounds}


def hf_rounds(model, prompts: list[torch.Tensor], cfg: GenerationConfig) -> int:
    """Target forwards HF's generate makes (untimed pass with a counting streamer)."""
    total = 0
    for x in prompts:
        counter = RoundCounter()
        model.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg, streamer=counter)
        total += counter.events  # one event per target forward; the first forward is also the prefill
    return total


def profile_call(fn: Callable[[], object], top: int) -> str:
    """cProfile one call; the ``top`` functions by total (own) time, then by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run_benchmark(*, layers: int = 12, hidden: int = 256, vocab: int = 4096, new_tokens: int = 128,
                  prompts: int = 4, repeats: int = 3, lookup_tokens: int = 10, prompt_length: int = 48,
                  device: str = "cpu", seed: int = 0) -> dict:
    """Build the model, time the four methods, compare outputs. Returns the table as a dict:
    ``{"config", "rows": [{method, ms_per_token_median, ms_per_token_min, ms_per_token_max,
    cpu_ms_per_token_median, tau}], "ratios": {"vanilla/hf-generate": {median, min, cpu_median,
    paired_median}, "prompt-lookup/hf-prompt-lookup": {...}}, "identical",
    "mismatches": [(method, prompt index)]}``; tau counts target forwards per output token
    (including the correction/bonus token; a prefill forward counts when it makes the first token, as
    HF's and our vanilla's do, not when it only fills the cache, as our speculative loop's does)."""
    for name, v in dict(layers=layers, hidden=hidden, vocab=vocab, new_tokens=new_tokens, prompts=prompts,
                        repeats=repeats, lookup_tokens=lookup_tokens, prompt_length=prompt_length).items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 1, got {v!r}")
    model = build_llama(layers, hidden, vocab, seed=seed, device=device,
                        max_positions=max(4096, 3 * prompt_length + new_tokens + lookup_tokens + 1))
    xs = [x.to(device) for x in make_prompts(prompts, vocab, length=prompt_length, seed=seed)]
    runners = method_runners(model, new_tokens, lookup_tokens)
    timed = interleaved_timings(runners, xs, repeats)
    rounds, outputs = timed["rounds"], timed["outputs"]
    rounds["hf-generate"] = hf_rounds(model, xs, hf_config(new_tokens))
    rounds["hf-prompt-lookup"] = hf_rounds(model, xs, hf_config(new_tokens, lookup_tokens))

    n_tokens = prompts * new_tokens
    rows = []
    for name in METHODS:
        per_tok = [1e3 * sum(calls) / n_tokens for calls in timed["wall"][name]]  # one value per round
        cpu_tok = [1e3 * sum(calls) / n_tokens for calls in timed["cpu"][name]]
        rows.append({"method": name, "ms_per_token_median": statistics.median(per_tok),
                     "ms_per_token_min": min(per_tok), "ms_per_token_max": max(per_tok),
                     "cpu_ms_per_token_median": statistics.median(cpu_tok),
                     "tau": n_tokens / rounds[name] if rounds[name] else None})
    by = {r["method"]: r for r in rows}
    ratios = {}
    for a, b in PAIRS:
        # Paired: the two calls on the same prompt in the same round ran seconds apart, so their
        # ratio cancels most machine drift; the median over all (round, prompt) pairs.
        paired = [ta / tb for ra, rb in zip(timed["wall"][a], timed["wall"][b]) for ta, tb in zip(ra, rb)]
        ratios[f"{a}/{b}"] = {
            "median": by[a]["ms_per_token_median"] / by[b]["ms_per_token_median"],
            "min": by[a]["ms_per_token_min"] / by[b]["ms_per_token_min"],
            "cpu_median": by[a]["cpu_ms_per_token_median"] / by[b]["cpu_ms_per_token_median"],
            "paired_median": statistics.median(paired),
        }
    mismatches = [(name, i) for name in METHODS for i in range(prompts)
                  if outputs[name][i] != outputs["vanilla"][i] or len(outputs[name][i][0]) != new_tokens]
    config = dict(layers=layers, hidden=hidden, vocab=vocab, new_tokens=new_tokens, prompts=prompts,
                  repeats=repeats, lookup_tokens=lookup_tokens, prompt_length=xs[0].shape[1],
                  device=device, seed=seed, threads=torch.get_num_threads(),
                  params_m=round(sum(p.numel() for p in model.parameters()) / 1e6, 2))
    return {"config": config, "rows": rows, "ratios": ratios, "identical": not mismatches,
            "mismatches": mismatches, "model": model, "prompts": xs}


def format_table(result: dict) -> str:
    cfg = result["config"]
    lines = [f"random Llama: {cfg['layers']} layers, hidden {cfg['hidden']}, vocab {cfg['vocab']}, "
             f"{cfg['params_m']}M params, {cfg['device']}, {cfg['threads']} threads; {cfg['prompts']} prompts of "
             f"{cfg['prompt_length']} tokens, {cfg['new_tokens']} new tokens each, greedy, batch 1, "
             f"lookup gamma {cfg['lookup_tokens']}, {cfg['repeats']} interleaved repeats",
             "", f"{'method':<18}{'wall ms/tok median':>19}{'min..max':>18}{'CPU ms/tok median':>19}{'tau':>7}"]
    for r in result["rows"]:
        spread = f"{r['ms_per_token_min']:.3f}..{r['ms_per_token_max']:.3f}"
        tau = "-" if r["tau"] is None else f"{r['tau']:.2f}"
        lines.append(f"{r['method']:<18}{r['ms_per_token_median']:>19.3f}{spread:>18}"
                     f"{r['cpu_ms_per_token_median']:>19.3f}{tau:>7}")
    lines.append("")
    for name, ratio in result["ratios"].items():
        lines.append(f"ratio {name}: {ratio['median']:.3f} (wall medians), {ratio['min']:.3f} (wall minima), "
                     f"{ratio['cpu_median']:.3f} (CPU medians), {ratio['paired_median']:.3f} (median of paired calls)")
    lines.append("tau = output tokens per target forward, including the correction/bonus token.")
    lines.append(f"greedy outputs token-identical across all four methods: {result['identical']}"
                 + ("" if result["identical"] else f" (mismatches: {result['mismatches']})"))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eaglehead.eval.bench_decode", description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lookup-tokens", type=int, default=10, help="gamma of both prompt-lookup methods")
    p.add_argument("--prompt-length", type=int, default=48, help="random span length; prompts are 2.5x this")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads for this run (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="also cProfile one call of vanilla and hf-generate and print the TOP functions")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print the table (and profiles), return ``run_benchmark``'s dict."""
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)  # this process only: the benchmark's own setting
    result = run_benchmark(layers=args.layers, hidden=args.hidden, vocab=args.vocab, new_tokens=args.new_tokens,
                           prompts=args.prompts, repeats=args.repeats, lookup_tokens=args.lookup_tokens,
                           prompt_length=args.prompt_length, device=args.device, seed=args.seed)
    print(format_table(result))
    if args.profile:
        runners = method_runners(result["model"], args.new_tokens, args.lookup_tokens)
        x = result["prompts"][0]
        for name in ("vanilla", "hf-generate"):
            print(f"\n=== cProfile: {name}, one call, {args.new_tokens} tokens ===")
            print(profile_call(lambda: runners[name](x), args.profile))
    return result


if __name__ == "__main__":
    raise SystemExit(0 if main()["identical"] else 1)
