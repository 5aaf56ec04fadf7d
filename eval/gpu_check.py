"""CUDA check of the decode loop on one GPU: identity, distribution, timing (a few minutes, no downloads).

Usage::

    python -m eaglehead.eval.gpu_check [--layers 16 --hidden 2048 --vocab 32000 --new-tokens 128 --repeats 3]

Exit code 0 when every check passes, 1 when one fails, 2 when CUDA is not available.

1. Greedy identity, float32 (a 512-wide, 8-layer random Llama, TF32 off): speculative decoding with
   prompt lookup and with a draft LM vs ``vanilla_generate``, batch 1 and 4 (left-padded).
2. Greedy identity, bfloat16, on the mid-size target (default 16 layers x 2048 wide, about 1.1B
   parameters, built in-process): the same, plus HF ``generate``. Verification feeds gamma + 1
   tokens through one forward while vanilla feeds one: different GEMM shapes accumulate in different
   orders, and in bf16 every layer rounds to 8 significant bits, so two logits closer than that
   noise can swap places. That is not a verifier error. Criterion (both dtypes): a row passes if its
   tokens equal vanilla's, or if at the *first* differing position the two chosen tokens are a
   near-tie in the target's own logits recomputed without cache over the common prefix:
   ``|l[a] - l[b]| <= rel * max(1, |l[a]|, |l[b]|)`` with ``rel = 2**-5`` (4 bf16 ulps) for bf16
   and ``1e-4`` for float32. Anything else fails.
3. Distribution (float32, vocab 64): 40,000 rows of one prompt at temperature 1, speculative with a
   perturbed-copy draft LM, gamma 3; first-token frequencies vs the target's softmax, each within a
   Bernstein bound at family-wise false-alarm rate 1e-4 (union over the vocabulary).
4. Timing, bf16 mid-size target, greedy, batch 1 and 4: vanilla, HF generate, prompt lookup and a
   draft LM (the target's first 2 layers with its embeddings, norm and head), interleaved repeats
   after warm-up, medians (``bench_decode.interleaved_timings``). Printed as a table.
5. A trained head on a real target: the shipped SmolLM2-135M-Instruct EAGLE-3 head (or ``--head``) on
   MT-bench, both turns, float32, greedy, batch 1 and 4, against vanilla and HF generate through
   ``eaglehead eval`` (report in ``--out``); skipped, with a message, when there is no head.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from eaglehead.decode import (DraftModelDrafter, PromptLookupDrafter, SamplingConfig, probs, speculative_generate,
                              vanilla_generate)
from eaglehead.eval.bench_decode import build_llama, hf_config, interleaved_timings, make_prompts

GREEDY = SamplingConfig(temperature=0)
TIE_REL = {torch.float32: 1e-4, torch.bfloat16: 2.0 ** -5}


def truncated_copy(target, layers: int):
    """A draft LM: the target's embeddings, first ``layers`` decoder layers, final norm and head."""
    draft = build_llama(layers, target.config.hidden_size, target.config.vocab_size,
                        intermediate=target.config.intermediate_size, device=str(target.device),
                        dtype=target.dtype, max_positions=target.config.max_position_embeddings)
    draft.load_state_dict(target.state_dict(), strict=False)  # keys of layers >= `layers` are unexpected
    return draft.eval()


@torch.no_grad()
def first_divergence(model, prompt: list[int], ref: list[int], got: list[int]) -> tuple[int, float, float] | None:
    """``None`` if equal; else ``(position, |l[a] - l[b]|, tolerance)`` at the first differing token,
    from a cache-free forward over the prompt and the common prefix."""
    k = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), None)
    if k is None:
        return None if len(ref) == len(got) else (min(len(ref), len(got)), math.inf, 0.0)
    x = torch.tensor([prompt + ref[:k]], device=model.device)
    logits = model(x).logits[0, -1].float()
    la, lb = float(logits[ref[k]]), float(logits[got[k]])
    return k, abs(la - lb), TIE_REL[model.dtype] * max(1.0, abs(la), abs(lb))


def identity_rows(model, prompts: list[list[int]], ref: list[list[int]], got: list[list[int]]) -> tuple[int, int, int]:
    """(identical rows, rows diverging first at a near-tie, failing rows)."""
    same = ties = bad = 0
    for p, a, b in zip(prompts, ref, got):
        d = first_divergence(model, p, a, b)
        if d is None:
            same += 1
        elif d[1] <= d[2]:
            ties += 1
        else:
            bad += 1
    return same, ties, bad


def check_identity(model, draft, label: str, gamma: int = 4, new_tokens: int = 64, with_hf: bool = False) -> bool:
    vocab = model.config.vocab_size
    rows = [x[0].tolist() for x in make_prompts(4, vocab, length=32, seed=1)]
    rows[1], rows[3] = rows[1][10:], rows[3][5:]  # unequal lengths: batch 4 is left-padded
    ok = True
    for bsz in (1, 4):
        outs: dict[str, list[list[int]]] = {}
        for start in range(0, 4, bsz):
            chunk = rows[start:start + bsz]
            width = max(len(r) for r in chunk)
            ids = torch.tensor([[0] * (width - len(r)) + r for r in chunk], device=model.device)
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in chunk], device=model.device)
            common = dict(sampling=GREEDY, max_new_tokens=new_tokens, attention_mask=mask)
            runs = {"vanilla": lambda: vanilla_generate(model, ids, **common).tokens,
                    "prompt-lookup": lambda: speculative_generate(model, PromptLookupDrafter(vocab), ids,
                                                                  gamma=gamma, **common).tokens,
                    "draft-lm": lambda: speculative_generate(model, DraftModelDrafter(draft), ids,
                                                             gamma=gamma, **common).tokens}
            if with_hf:
                runs["hf-generate"] = lambda: model.generate(ids, attention_mask=mask,
                                                             generation_config=hf_config(new_tokens))[:, width:].tolist()
            for name, fn in runs.items():
                outs.setdefault(name, []).extend(fn())
        for name in outs:
            if name == "vanilla":
                continue
            same, ties, bad = identity_rows(model, rows, outs["vanilla"], outs[name])
            ok &= bad == 0
            print(f"[identity {label}] batch {bsz} {name:<14} identical {same}/4, near-tie divergences {ties}, "
                  f"failures {bad}")
    return ok


def bernstein_tol(p: torch.Tensor, n: int, delta: float) -> torch.Tensor:
    """Half-width t with P(|f - p| >= t) <= delta for a frequency f of n Bernoulli(p) draws:
    Bernstein, 2 exp(-n t^2 / (2 p (1 - p) + 2 t / 3)) = delta, solved for t."""
    log_term = math.log(2 / delta)
    a = 2 * log_term / 3
    return (a + torch.sqrt(a * a + 8 * n * p * (1 - p) * log_term)) / (2 * n)


@torch.no_grad()
def check_distribution(device: str, n: int = 40_000, vocab: int = 64, alpha: float = 1e-4) -> bool:
    sampling = SamplingConfig(temperature=1.0)
    target = build_llama(2, 256, vocab, seed=5, device=device)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)  # sharpen: random-init logits are nearly flat
    draft = build_llama(2, 256, vocab, seed=5, device=device)
    draft.load_state_dict(target.state_dict())
    gen = torch.Generator(device=device).manual_seed(6)
    for prm in draft.parameters():
        prm.add_(0.3 * prm.std().clamp_min(1e-3) * torch.randn(prm.shape, generator=gen, device=device))
    prompt = torch.tensor([[3, 17, 5, 3, 17, 9]], device=device)
    p = probs(target(prompt).logits[0, -1], sampling).double()  # [V]
    q = probs(draft(prompt).logits[0, -1], sampling).double()
    counts = torch.zeros(vocab, dtype=torch.float64, device=device)
    half = n // 2
    for _ in range(2):
        res = speculative_generate(target, DraftModelDrafter(draft), prompt.repeat(half, 1), gamma=3,
                                   sampling=sampling, max_new_tokens=4, generator=gen)
        first = torch.tensor([t[0] for t in res.tokens], device=device)
        counts += torch.bincount(first, minlength=vocab).double()
    freq = counts / (2 * half)
    tol = bernstein_tol(p, 2 * half, alpha / vocab)
    worst = float(((freq - p).abs() / tol).max())
    tv_pq = 0.5 * float((p - q).abs().sum())
    tv_fp = 0.5 * float((freq - p).abs().sum())
    ok = worst <= 1.0
    print(f"[distribution] {2 * half} samples, vocab {vocab}: max |f - p| / bound = {worst:.3f} (pass <= 1); "
          f"TV(freq, p) = {tv_fp:.4f} while TV(draft q, p) = {tv_pq:.4f} (what an always-accept bug would show)")
    return ok


def time_methods(model, draft, new_tokens: int, repeats: int, gamma: int = 4) -> list[tuple]:
    vocab = model.config.vocab_size
    prompts = [x.to(model.device) for x in make_prompts(4, vocab, length=48, seed=2)]
    cfg = hf_config(new_tokens)
    rows = []
    for bsz in (1, 4):
        batches = prompts if bsz == 1 else [torch.cat(prompts)]

        def spec(drafter_fn):
            def run(x):
                if drafter_fn is None:
                    res = vanilla_generate(model, x, sampling=GREEDY, max_new_tokens=new_tokens)
                else:
                    res = speculative_generate(model, drafter_fn(), x, gamma=gamma, sampling=GREEDY,
                                               max_new_tokens=new_tokens)
                return res.tokens, len(res.rounds)
            return run

        runners = {
            "vanilla": spec(None),
            "hf-generate": lambda x: (model.generate(x, attention_mask=torch.ones_like(x),
                                                     generation_config=cfg)[:, x.shape[1]:].tolist(), None),
            "prompt-lookup": spec(lambda: PromptLookupDrafter(vocab)),
            "draft-lm": spec(lambda: DraftModelDrafter(draft)),
        }
        timed = interleaved_timings(runners, batches, repeats)
        n_tok = 4 * new_tokens
        base = statistics.median(sum(c) for c in timed["wall"]["vanilla"])
        for name in runners:
            med = statistics.median(sum(c) for c in timed["wall"][name])
            n_rounds = timed["rounds"][name]
            tau = n_tok / (n_rounds * bsz) if n_rounds else None  # per row: rounds serve all rows at once
            rows.append((bsz, name, 1e3 * med / n_tok, base / med, tau))
    return rows


SMOLLM2_TARGET = "builtin:smollm2-135m-instruct"


def shipped_smollm2_head() -> str | None:
    """The shipped SmolLM2-135M-Instruct EAGLE-3 head's directory, if this installation has one."""
    from importlib.resources import files

    path = Path(str(files("eaglehead.builtin") / "assets" / "smollm2_eagle3"))
    return str(path) if (path / "recipe.json").is_file() else None


def check_real_head(head: str, out: str, device: str, *, target: str = SMOLLM2_TARGET, prompts: str = "mt-bench",
                    new_tokens: int = 256, repeats: int = 3, gammas: tuple[int, ...] = (3, 4, 5, 6),
                    max_prompts: int | None = None) -> bool:
    """5. A trained head on its real target (default: the shipped SmolLM2 head on MT-bench, both turns),
    float32, greedy, batch 1 and 4: vanilla, hf-generate and EAGLE-3 side by side through the evaluation
    (gamma chosen on the tune split), the report in ``out``. Passes when every greedy output equals
    vanilla's and the report is consistent."""
    from eaglehead.eval.plan import EvalPlan
    from eaglehead.eval.tables import compact_table
    from eaglehead.eval.runner import run_eval

    plan = EvalPlan(target=target, prompts=prompts, drafts={"eagle3": head},
                    methods=["vanilla", "hf-generate", "eagle3"], gamma_mode="auto", gammas=gammas,
                    batch_sizes=(1, 4), max_new_tokens=new_tokens, repeats=repeats, max_prompts=max_prompts,
                    out=out, overwrite=True, device=device, dtype="float32")
    report = run_eval(plan)
    identical, violations = report["identity"]["all_identical"], report["consistency_violations"]
    print(f"\n[real head] {head} on {target}, {prompts} (float32, greedy; report: {out})")
    print(compact_table(report))
    print(f"[real head] greedy outputs identical to vanilla: {identical}; report consistency violations: "
          f"{len(violations)}")
    return bool(identical) and not violations


def run_checks(args: argparse.Namespace, device: str = "cuda") -> bool:
    """All four checks on ``device``; prints as it goes, the timing table last. True if all pass."""
    t0 = time.perf_counter()
    small = build_llama(8, 512, args.vocab, seed=0, device=device)
    ok = check_identity(small, truncated_copy(small, 2), "float32")
    del small

    big = build_llama(args.layers, args.hidden, args.vocab, seed=0, intermediate=4 * args.hidden, device=device,
                      dtype=torch.bfloat16)
    draft = truncated_copy(big, 2)
    n_params = sum(x.numel() for x in big.parameters()) / 1e9
    print(f"mid-size target: {args.layers} layers x {args.hidden}, vocab {args.vocab}, {n_params:.2f}B params, bf16")
    ok &= check_identity(big, draft, "bf16", with_hf=True)
    ok &= check_distribution(device)

    rows = time_methods(big, draft, args.new_tokens, args.repeats)
    print(f"\nTiming (bf16 target, greedy, {args.new_tokens} new tokens x 4 prompts, median of {args.repeats} "
          "interleaved repeats, warm-up excluded; tau includes the bonus token)")
    print(f"{'batch':>5}  {'method':<14}{'ms/token':>10}{'speedup':>9}{'tau':>7}")
    for bsz, name, ms, speed, tau in rows:
        print(f"{bsz:>5}  {name:<14}{ms:>10.3f}{speed:>9.2f}{('-' if tau is None else f'{tau:.2f}'):>7}")
    head = args.head or shipped_smollm2_head()
    if head:
        ok &= check_real_head(head, args.out, device, new_tokens=args.real_new_tokens, repeats=args.repeats)
    else:
        print("\n[real head] skipped: no --head given and no shipped SmolLM2 head in this installation")
    print(f"\nall checks passed: {bool(ok)} ({time.perf_counter() - t0:.0f} s)")
    return bool(ok)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eaglehead.eval.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--head", default=None, help="an EAGLE-3 head for SmolLM2-135M-Instruct (default: the shipped one)")
    p.add_argument("--real-new-tokens", type=int, default=256, help="token budget per MT-bench turn for check 5")
    p.add_argument("--out", default="runs/gpu_check/smollm2", help="report directory of check 5")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; run it on a CUDA GPU "
              "(nothing was checked)", file=sys.stderr)
        return 2
    torch.set_float32_matmul_precision("highest")  # float32 identity means float32 arithmetic, not TF32
    print(f"gpu_check on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    return 0 if run_checks(args, "cuda") else 1


if __name__ == "__main__":
    raise SystemExit(main())
