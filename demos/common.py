"""What the demo pipelines share: stage stamps, input keys, the run picker, the first-token check, stage timing.

Each stage of a demo writes into its output directory and stamps it with :func:`input_key` of what it was
built from; :func:`stamped` tells a later run whether the stage can be reused.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from importlib.resources import files
from pathlib import Path

# The YAML configs ship as package data (``configs/`` in the repository), found the same way in an
# editable checkout and in an installed wheel.
CONFIGS = Path(str(files("eaglehead.configs")))


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def has_stamp(path: Path, key: str) -> bool:
    """Whether ``path`` was built from the inputs hashed into ``key`` (its ``demo_key`` file says so)."""
    stamp = path / "demo_key"
    return stamp.is_file() and stamp.read_text() == key


def write_stamp(path: Path, key: str) -> None:
    (path / "demo_key").write_text(key)


def input_key(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pick_run(report: dict, method: str, temperature: float = 0.0, batch: int = 1) -> dict | None:
    for r in report["runs"]:
        if (r["method"], r["temperature"], r["batch_size"], r["category"]) == (method, temperature, batch, "all"):
            return r
    return None


def first_token_check(target_dir: str, head_dir: Path, prompt: str, rows: int, temperature: float = 1.0, *,
                      chat: bool = False, chunk: int = 500, gamma: int = 4, seed: int = 0, alpha: float = 1e-3) -> dict:
    """Frequencies of the first token generated through EAGLE-3 speculative decoding (``gamma`` drafts,
    so it passes the verifier) from ``rows`` copies of ``prompt`` (chat-templated when ``chat``) at
    ``temperature``, against the target's own distribution. Bound: Bernstein per token, union over the
    whole vocabulary at family-wise level ``alpha`` (valid for any ``rows``; fewer rows only widen it)."""
    import torch
    from tqdm.auto import tqdm

    from eaglehead.builtin.models import load_target
    from eaglehead.builtin.text import encode_prompt
    from eaglehead.decode import SamplingConfig, probs, speculative_generate
    from eaglehead.decode.eagle import load_eagle_drafter

    target, tok = load_target(target_dir, dtype=torch.float32)
    ids = torch.tensor([encode_prompt(tok, prompt, chat=chat)])
    sampling = SamplingConfig(temperature=temperature)
    with torch.no_grad():
        p = probs(target(ids).logits[0, -1], sampling).double()
    drafter = load_eagle_drafter(str(head_dir), target)
    gen = torch.Generator().manual_seed(seed)
    first, accepted = [], 0
    with tqdm(total=rows, desc=f"first-token check (T={temperature:g})", unit="sample") as bar:
        for start in range(0, rows, chunk):  # chunks bound the KV-cache memory of thousands of copies
            n = min(chunk, rows - start)
            res = speculative_generate(target, drafter, ids.repeat(n, 1), gamma=gamma, sampling=sampling,
                                       max_new_tokens=gamma + 1, generator=gen)
            first += [t[0] for t in res.tokens]
            accepted += sum(res.rounds[0].accepted)
            bar.update(n)
    freq = torch.bincount(torch.tensor(first), minlength=p.numel()).double() / rows
    worst = bernstein_excess(freq, p, rows, alpha)
    return {"rows": rows, "temperature": temperature, "prompt": prompt, "prompt_tokens": ids.shape[1],
            "first_round_acceptance": accepted / (gamma * rows), "tv_distance": float(0.5 * (freq - p).abs().sum()),
            "max_excess_over_bound": worst, "alpha": alpha, "passed": worst <= 0}


def bernstein_excess(freq, p, n: int, alpha: float) -> float:
    """max over tokens of |freq - p| minus its Bernstein tolerance (> 0: a violation). With L = log(2 V /
    alpha), P(|freq - p| >= t) <= alpha / V at t = (2L/3 + sqrt((2L/3)^2 + 8 n p (1 - p) L)) / (2n)."""
    import torch

    log_term = math.log(2 * p.numel() / alpha)
    tol = (2 * log_term / 3 + torch.sqrt((2 * log_term / 3) ** 2 + 8 * n * p * (1 - p) * log_term)) / (2 * n)
    return float(((freq - p).abs() - tol).max())


def stage_timer(timings: dict[str, float]):
    """``lap(name)`` records in ``timings`` the seconds since the previous lap (or since this call)."""
    last = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name], last[0] = now - last[0], now

    return lap
