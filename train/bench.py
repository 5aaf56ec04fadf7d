"""Training throughput and memory of the rollout against depth.

    python -m eaglehead.train.bench [--seq 512 --batch 2 --hidden 256 --layers 10 --vocab 4096 --repeats 3]

Prints, for depth 1 and depth 7 (and the steps between with ``--all-depths``): tokens/s of one
optimizer step of the head alone (offline features) and including the frozen target's forward
(online), the cost ratio per token, and the activation memory the step holds for backward. On CPU
that memory is measured exactly as the bytes of tensors autograd saves (``saved_tensors_hooks``); on
CUDA also as ``torch.cuda.max_memory_allocated``. A naive rollout (dense ``[T, T * (i+1)]`` mask
over all earlier steps' keys, no recomputation) is measured beside it to show the difference in growth.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from eaglehead.builtin.devices import sync
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.taps import FeatureTaps

from .rollout import rollout


def _saved_bytes(fn) -> tuple[int, object]:
    """Run ``fn`` and return (bytes of tensors saved for backward, result)."""
    total = [0]
    seen: set[int] = set()

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total[0] += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return total[0], out


def naive_rollout_loss(head: Eagle3Head, batch: dict, lm_w: torch.Tensor, depth: int) -> torch.Tensor:
    """The dense-mask rollout some toolkits use: step i attends to all T*(i+1) keys through a mask."""
    ids, fused = batch["input_ids"], batch["fused"]
    rows = ids.shape[1] - 1
    pos = torch.arange(rows, device=ids.device).expand(ids.shape[0], rows)
    emb_all, h = head.embed(ids), head.project(fused[:, :rows])
    ks, vs, loss = [], [], 0.0
    idx = torch.arange(rows, device=ids.device)
    for i in range(depth):
        emb = torch.cat([emb_all[:, i + 1:], emb_all.new_zeros(ids.shape[0], i, emb_all.shape[-1])], 1)[:, :rows]
        q, k, v, res = head.qkv(emb, h, pos + i)
        ks.append(k)
        vs.append(v)
        k_all, v_all = torch.cat(ks, 2), torch.cat(vs, 2)  # [B, kvH, R*(i+1), d]
        causal = idx[None, :] <= idx[:, None]
        diag = idx[None, :] == idx[:, None]
        mask = torch.cat([causal] + [diag] * i, 1)[None, None]  # [1, 1, R, R*(i+1)]
        groups = q.shape[1] // k.shape[1]
        k_all = k_all.repeat_interleave(groups, 1)
        v_all = v_all.repeat_interleave(groups, 1)
        scores = (q @ k_all.transpose(-1, -2)) / q.shape[-1] ** 0.5  # [B, H, R, R*(i+1)] float32
        attn = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v_all
        h = head.finish(attn.transpose(1, 2).flatten(2), res)
        loss = loss + 0.8 ** i * F.cross_entropy(head.logits(h).flatten(0, 1).float(), ids[:, 1:].flatten() % 2)
    return loss


def measure(args) -> list[dict]:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                      num_key_value_heads=max(1, args.hidden // 64), max_position_embeddings=max(2048, args.seq))
    target = LlamaForCausalLM(cfg).to(dev).eval().requires_grad_(False)
    head = Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=min(args.vocab, 2048))).to(dev)
    head.bind_embedding(target.get_input_embeddings())
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4)
    taps = FeatureTaps(target, head.config.fused_layer_ids, capture_final=True)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    lm_w = target.get_output_embeddings().weight

    def features():
        with torch.no_grad(), taps.capture() as cap:
            target(input_ids=ids)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids),
                "fused": cap.fused(), "final_hidden": cap.final_hidden}

    cached = features()
    depths = list(range(1, 8)) if args.all_depths else [1, 7]
    rows = []
    for depth in depths:
        def step(online: bool, naive: bool = False):
            batch = features() if online else cached
            if naive:
                loss = naive_rollout_loss(head, batch, lm_w, depth)
            else:
                loss = rollout(head, batch, lm_w, depth=depth).loss()
            loss.backward()
            opt.step()
            opt.zero_grad()

        rec = {"depth": depth}
        for name, online in (("offline", False), ("online", True)):
            step(online)  # warm-up
            times = []
            for _ in range(args.repeats):
                sync(dev)
                t0 = time.perf_counter()
                step(online)
                sync(dev)
                times.append(time.perf_counter() - t0)
            rec[f"{name}_tok_s"] = args.batch * args.seq / sorted(times)[len(times) // 2]
        rec["saved_bytes"], _ = _saved_bytes(lambda: rollout(head, cached, lm_w, depth=depth).loss())
        rec["naive_saved_bytes"], _ = _saved_bytes(lambda: naive_rollout_loss(head, cached, lm_w, depth))
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            step(False)
            rec["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - base
        rows.append(rec)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.train.bench", description=__doc__.split("\n")[0])
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--all-depths", action="store_true")
    args = p.parse_args(argv)
    rows = measure(args)
    dev = "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
    print(f"device {dev}; batch {args.batch} x {args.seq} tokens; target {args.layers} layers x {args.hidden}")
    print(f"{'depth':>5} {'offline tok/s':>14} {'online tok/s':>13} {'saved MiB':>10} {'naive MiB':>10}"
          + ("  cuda peak MiB" if "cuda_peak_bytes" in rows[0] else ""))
    for r in rows:
        line = (f"{r['depth']:>5} {r['offline_tok_s']:>14.0f} {r['online_tok_s']:>13.0f} "
                f"{r['saved_bytes'] / 2**20:>10.1f} {r['naive_saved_bytes'] / 2**20:>10.1f}")
        if "cuda_peak_bytes" in r:
            line += f"  {r['cuda_peak_bytes'] / 2**20:>13.1f}"
        print(line)
    first, last = rows[0], rows[-1]
    print(f"cost per token, depth {last['depth']} / depth {first['depth']}: offline "
          f"{first['offline_tok_s'] / last['offline_tok_s']:.2f}x, online {first['online_tok_s'] / last['online_tok_s']:.2f}x "
          f"(goal <= 3x)")
    print(f"saved-for-backward memory, depth {last['depth']} / depth {first['depth']}: "
          f"{last['saved_bytes'] / first['saved_bytes']:.2f}x (naive dense mask: "
          f"{last['naive_saved_bytes'] / first['naive_saved_bytes']:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
