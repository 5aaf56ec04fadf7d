"""Where a chain round stops paying as the context grows: the torch loop's round parts against one decode step.

Usage::

    python -m eaglehead.eval.bench_context [--target builtin:smollm2-135m-instruct] [--draft DIR]
        [--dtype float32] [--contexts 256,1024,2048,4096,7168] [--gammas 3,5] [--threads 2] [--repeats 20]
        [--attention-queries 1,4,8,16,32] [--attention-batch 1] [--attention sdpa,eaglehead_few_query_sdpa]

Side by side in one process, medians over ``--repeats`` after warm-up, batch 1, with a ``context``-token prefix
cached in the target and in the head (packed linear layers, as ``eaglehead eval`` runs them by default): one target
decode step (the unit), the target's verification forward of ``gamma + 1`` tokens, and one self-fed head step
(one token through the head's decoder layer over its cache of ``context`` rows, then its LM head). A chain round
of ``gamma`` drafts costs ``verify(gamma + 1) + gamma x head step`` (the first head call feeds the accepted rows
instead of one: counted as one step), so it pays at batch 1 exactly when the round commits more tokens than it
costs decode steps: the printed **break-even tau**. Compare it with the tau the head reaches on prompts of that
length (``eaglehead eval --prompts long-context``): below it, speculation loses at that context.

Beside the decode step, the share of it that is attention: one query over ``context`` keys in every layer, through
transformers' ``sdpa`` attention and through the grouped matmuls of :mod:`eaglehead.builtin.attention` (the same
attention, float32 softmax), and a second table at ``--attention-queries`` query counts (``--attention-batch`` rows,
left-padded) of three paths: SDPA as transformers calls it (``repeat_kv`` first, for more than one query under a
mask), SDPA with ``enable_gqa`` on the kv heads in place, and the grouped matmuls. In bfloat16 on a CPU, SDPA's
kernel is several times slower at a few queries (BENCHMARKS.md, "Round cost against context length"); and the kv
copy made a float32 verification at batch 4 over 4k tokens cost 1.1 s (BENCHMARKS.md, "The verification's kv
copy"). A target eaglehead loads on a CPU runs :data:`~eaglehead.builtin.attention.NAME`: the grouped path for up
to ``MAX_QUERIES`` half-precision queries, SDPA with ``enable_gqa`` for other masked calls of several queries.
``--attention sdpa,eaglehead_few_query_sdpa,sdpa`` times the rounds once per named implementation, in that order
(the target switched in place): the tables side by side are the kernel's effect, the repeat a drift check.

Prompts are random token ids: cost does not depend on the values.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch

from eaglehead.builtin import attention as few_query
from eaglehead.builtin.models import load_target
from eaglehead.draftheads.config import target_dims

from .bench_dflash import random_ids, target_costs
from .bench_verify import median_ms
from .plan_options import parse_int_list

DEFAULT_DRAFT = "builtin/assets/smollm2_eagle3"


def head_step_s(drafter, context: int, repeats: int) -> float:
    """Seconds of one self-fed step of an EAGLE head (``decode.eagle.Eagle3Drafter``) whose cache holds ``context``
    rows: embed the drafted token, the decoder layer over the cache, the draft LM head; the row is dropped again."""
    head = drafter.head
    dtype = next(head.parameters()).dtype
    ids = random_ids(head.config.target_vocab_size, context + 1, seed=1)
    width = head.config.target_hidden_size * len(head.config.fused_layer_ids)
    feats = torch.randn(1, context, width, generator=torch.Generator().manual_seed(2)).to(dtype)
    with torch.inference_mode():
        drafter.begin(ids, torch.ones_like(ids, dtype=torch.bool), feats)
        h = drafter._feed_pending()  # the cache now holds ``context`` rows
        keep = drafter.cache.lengths.clone()
        token, pos = ids[:, -1:], torch.tensor([[context]])

        def step():
            drafter.cache.crop_to(keep)
            out = head.layer_forward(head.embed(token), h, pos, cache=drafter.cache)
            head.logits(out[:, -1])

        seconds = median_ms(step, repeats) / 1e3
        drafter.cache.crop_to(keep)
        return seconds


PATHS = ("sdpa", "gqa", "grouped")


def attention_paths(config, dtype: torch.dtype, context: int, queries: int = 1, batch: int = 1) -> dict:
    """Callables computing the attention of ``queries`` new tokens over ``context`` random cached keys plus
    themselves in one of the target's layers (its head shape, grouped-query, the additive causal mask the decode
    loop passes; at ``batch`` > 1 row ``b`` also masks ``11 b`` keys of left padding), each returning
    ``[batch, queries, heads, d]``, by :data:`PATHS`: ``sdpa``, transformers' ``sdpa_attention_forward`` as the
    plain ``sdpa`` target runs it (``repeat_kv`` first for more than one query); ``gqa``,
    :func:`eaglehead.builtin.attention.gqa_sdpa` (the same kernel on the kv heads in place: what a loaded target
    runs on a CPU for a masked call of several queries); ``grouped``,
    :func:`eaglehead.builtin.attention.grouped_attention` (what a loaded half-precision target runs on a CPU up to
    ``MAX_QUERIES`` queries)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    t = target_dims(getattr(config, "text_config", None) or config)
    heads, kv, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    g = torch.Generator().manual_seed(3)
    q = torch.randn(batch, heads, queries, d, generator=g).to(dtype)
    k, v = (torch.randn(batch, kv, context + queries, d, generator=g).to(dtype) for _ in range(2))
    keys = torch.arange(context + queries)
    allowed = keys[None, :] <= context + torch.arange(queries)[:, None]  # the cache, then causal in the block
    pad = (11 * torch.arange(batch)).clamp_max(context - 1)  # row b: its first 11 b keys are padding
    allowed = allowed[None] & (keys[None, None, :] >= pad[:, None, None])  # [batch, queries, keys]
    mask = torch.zeros(batch, 1, queries, context + queries, dtype=dtype).masked_fill(~allowed[:, None],
                                                                                      torch.finfo(dtype).min)
    module = SimpleNamespace(num_key_value_groups=heads // kv, is_causal=True)
    return {"sdpa": lambda: sdpa_attention_forward(module, q, k, v, mask)[0],
            "gqa": lambda: few_query.gqa_sdpa(q, k, v, mask),
            "grouped": lambda: few_query.grouped_attention(q, k, v, mask)}


def attention_s(config, dtype: torch.dtype, context: int, repeats: int, queries: int = 1,
                batch: int = 1) -> dict[str, float]:
    """Seconds of each of :func:`attention_paths`' paths over all of the target's layers."""
    layers = target_dims(getattr(config, "text_config", None) or config)["num_hidden_layers"]
    paths = attention_paths(config, dtype, context, queries, batch)
    with torch.inference_mode():
        return {name: layers * median_ms(fn, repeats) / 1e3 for name, fn in paths.items()}


def context_costs(model, drafter, contexts: list[int], gammas: list[int], repeats: int) -> list[dict]:
    """One row per context: seconds of a decode step, of each verification and of a head step, and per gamma the
    round's cost in decode steps (= the break-even tau)."""
    rows = []
    for n in contexts:
        base = target_costs(model, n, [g + 1 for g in gammas], repeats)
        head = head_step_s(drafter, n, repeats)
        attn = attention_s(model.config, next(model.parameters()).dtype, n, repeats)
        row = {"context": n, "token_s": base["token"], "head_step_s": head, "attn_sdpa_s": attn["sdpa"],
               "attn_grouped_s": attn["grouped"]}
        for g in gammas:
            verify = base[f"verify_{g + 1}"]
            row[f"verify_{g + 1}_s"] = verify
            row[f"round_steps_{g}"] = (verify + g * head) / base["token"]
        rows.append(row)
    return rows


def format_table(rows: list[dict], gammas: list[int]) -> str:
    head = ["context", "token ms", "of it 1-query SDPA ms", "grouped matmuls ms", "head step ms"]
    for g in gammas:
        head += [f"verify {g + 1} (steps)", f"gamma {g}: break-even tau"]
    lines = ["  ".join(head)]
    for r in rows:
        cells = [f"{r['context']:>7}", f"{r['token_s'] * 1e3:>8.2f}", f"{r['attn_sdpa_s'] * 1e3:>21.2f}",
                 f"{r['attn_grouped_s'] * 1e3:>18.2f}", f"{r['head_step_s'] * 1e3:>12.2f}"]
        for g in gammas:
            cells += [f"{r[f'verify_{g + 1}_s'] / r['token_s']:>{len(f'verify {g + 1} (steps)')}.2f}",
                      f"{r[f'round_steps_{g}']:>{len(f'gamma {g}: break-even tau')}.2f}"]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def attention_rows(config, dtype: torch.dtype, contexts: list[int], queries: list[int], repeats: int,
                   batch: int = 1) -> list[dict]:
    """Per context and query count, seconds of every attention path over all layers (:func:`attention_s`)."""
    return [{"context": n, "queries": t, **attention_s(config, dtype, n, repeats, t, batch)}
            for n in contexts for t in queries]


def format_attention_table(rows: list[dict]) -> str:
    lines = ["context  queries  SDPA ms (all layers)  SDPA enable_gqa ms  grouped ms  SDPA / gqa  SDPA / grouped"]
    for r in rows:
        lines.append(f"{r['context']:>7}  {r['queries']:>7}  {r['sdpa'] * 1e3:>20.2f}  {r['gqa'] * 1e3:>18.2f}  "
                     f"{r['grouped'] * 1e3:>10.2f}  {r['sdpa'] / r['gqa']:>10.2f}  {r['sdpa'] / r['grouped']:>14.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eaglehead.eval.bench_context", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--draft", default=DEFAULT_DRAFT, help="EAGLE-3 head directory (default: the shipped SmolLM2 head)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--contexts", default="256,1024,2048,4096,7168")
    ap.add_argument("--gammas", default="3,5")
    ap.add_argument("--cpu-linear", default="packed", choices=("packed", "plain"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--attention-queries", default="1,4,8,16,32",
                    help="query counts of the attention table (SDPA as transformers calls it, SDPA with enable_gqa, "
                         "grouped matmuls; '' to skip it)")
    ap.add_argument("--attention-batch", type=int, default=1,
                    help="rows of the attention table's calls (left-padded, so every call carries a mask)")
    ap.add_argument("--attention", default=None,
                    help="attention implementations to time the rounds with, in this order (e.g. "
                         "'sdpa,eaglehead_few_query_sdpa,sdpa'; default: the one the loaded target runs)")
    ap.add_argument("--grouped-float32", action="store_true",
                    help="an experiment: let the few-query kernel's grouped path serve float32 too (it serves half "
                         "precision only); time it with --attention sdpa,eaglehead_few_query_sdpa")
    args = ap.parse_args(argv)
    try:
        contexts = parse_int_list(args.contexts, "--contexts")
        gammas = parse_int_list(args.gammas, "--gammas")
        queries = parse_int_list(args.attention_queries, "--attention-queries") if args.attention_queries else []
    except ValueError as err:
        ap.error(str(err))
    impls = [x.strip() for x in args.attention.split(",") if x.strip()] if args.attention else []
    bad = sorted(set(impls) - {"sdpa", "eager", few_query.NAME})
    if bad:
        ap.error(f"--attention: unknown {bad}; expected names from sdpa, eager, {few_query.NAME}")
    if min(contexts) < 2 or min(gammas) < 1 or min(queries, default=1) < 1:
        ap.error("--contexts: every context needs >= 2 tokens; --gammas: every gamma >= 1; "
                 "--attention-queries: every count >= 1")
    if args.attention_batch < 1:
        ap.error(f"--attention-batch: expected an integer >= 1, got {args.attention_batch}")
    if args.threads:
        torch.set_num_threads(args.threads)
    from eaglehead.decode.eagle import load_eagle_drafter

    few_query.register()  # the name is known before the target switches to it
    if args.grouped_float32:
        few_query.DTYPES = (*few_query.DTYPES, torch.float32)
    model, _ = load_target(args.target, dtype=args.dtype)
    longest = max(contexts) + max(gammas) + 1
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and longest > limit:
        ap.error(f"--contexts: {max(contexts)} + {max(gammas) + 1} verified tokens exceed the target's "
                 f"max_position_embeddings ({limit})")
    drafter = load_eagle_drafter(args.draft, model, dtype=next(model.parameters()).dtype)
    if args.cpu_linear == "packed":
        from eaglehead.decode.packed_linear import pack_linears

        pack_linears(model)
        pack_linears(drafter.head)
    print(f"target {args.target} {args.dtype}, head {args.draft}, {args.cpu_linear} linears, "
          f"{torch.get_num_threads()} threads, batch 1, medians of {args.repeats}")
    for impl in impls or [model.config._attn_implementation]:
        model.set_attn_implementation(impl)
        print(f"\ntarget attention: {impl}")
        print(format_table(context_costs(model, drafter, contexts, gammas, args.repeats), gammas))
    if queries:
        print(f"\nattention of a few queries over the cache, one layer's shape times the layers (additive mask, "
              f"batch {args.attention_batch}):")
        print(format_attention_table(attention_rows(model.config, next(model.parameters()).dtype, contexts, queries,
                                                    args.repeats, args.attention_batch)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
