"""The tree and llama.cpp options of ``eaglehead eval``: defaults, parsing and validation (errors name the
option). :class:`~eaglehead.eval.plan.EvalPlan` calls these once, when it is built.

Trees. The integer a tree method tunes like gamma is ``n``, the number of draft nodes verified per round
(``--tree-tokens``; SGLang's ``--speculative-num-draft-tokens`` is ``n + 1``, it counts the root). Verification
cost grows with ``n`` the way it grows with a chain's gamma, so ``gamma_select.choose_gamma`` (the greedy
rule on a fitted round-time line) applies unchanged. The shape at ``n`` is ``depth = min(--tree-depth, n)``,
``topk = --tree-topk``: the drafter expands ``topk`` frontier nodes ``topk`` ways per level and keeps the
``n`` most probable paths' nodes (EAGLE-2), so a larger ``n`` buys both width and depth.

Defaults, measured on SmolLM2-135M-Instruct with the shipped EAGLE-3 head (8 MT-bench first turns of the
tune split, greedy, 64 tokens; chain tau 1.56 at gamma 3): at n = 16, topk 2/4/8 give tau 1.85/2.03/2.10
(the target's token is among the head's top 4 for .64 of first positions, top 8 .72), and depth 4, 6 or 8
give the same tau (the 16 most probable nodes lie within depth 4: survival at depth 4 is .01), so
``--tree-topk 8 --tree-depth 4``: the width pays, more depth only costs head calls. Candidates
``2,4,8,12,16`` under ``--gamma auto`` / a sweep (verification cost on a CPU grows with n: the rule decides),
``8`` with a fixed ``--gamma``.
"""

from __future__ import annotations

from pathlib import Path

MAX_TREE_TOKENS = 64
MAX_TREE_DEPTH = 16
MAX_TREE_TOPK = 16
DEFAULT_TREE_AXIS = (2, 4, 8, 12, 16)
DEFAULT_TREE_TOKENS = 8  # with a fixed --gamma
DEFAULT_TREE_DEPTH = 4
DEFAULT_TREE_TOPK = 8
LLAMACPP_DTYPES = ("as-is", "float32", "float16")
HEAD_DTYPES = ("float16", "float32", "bfloat16")


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def parse_int_list(text: str, option: str) -> list[int]:
    """``"2,4,8"`` -> [2, 4, 8]; ``"2..5"`` -> [2, 3, 4, 5]; errors name ``option``."""
    text = str(text).strip()
    try:
        if ".." in text:
            lo, hi = (int(v) for v in text.split(".."))
            values = list(range(lo, hi + 1))
        else:
            values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{option} must be comma-separated integers or a range 'a..b', got {text!r}") from None
    if not values:
        raise ValueError(f"{option} must name at least one integer (a range needs a <= b), got {text!r}")
    return values


def parse_budgets(text) -> int | tuple[int, ...]:
    """``"128"`` -> 128 (one budget, as always); ``"64,256,1024"`` -> (64, 256, 1024) (a load sweep's budgets)."""
    if isinstance(text, int):
        return text
    values = parse_int_list(text, "--max-new-tokens")
    return values[0] if len(values) == 1 and "," not in str(text) else tuple(values)


def parse_rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(v) for v in str(text).split(",") if v.strip())
    except ValueError:
        rates = ()
    if not rates:
        raise ValueError(f"--arrival-rate must be comma-separated numbers of requests/s > 0, got {text!r}")
    return rates


def default_tree_tokens(gamma_mode: str) -> tuple[int, ...]:
    return (DEFAULT_TREE_TOKENS,) if gamma_mode == "fixed" else DEFAULT_TREE_AXIS


def max_tree_nodes(depth: int, topk: int) -> int:
    """Candidates a tree of this shape drafts: ``topk`` at depth 1, ``topk**2`` at every later depth."""
    return topk + (depth - 1) * topk * topk


def check_tree_axis(gamma_mode: str, tokens, depth, topk) -> tuple[int, ...]:
    """The validated ``--tree-tokens`` candidates (sorted, unique) for ``--tree-depth``/``--tree-topk``."""
    if not _positive_int(depth) or depth > MAX_TREE_DEPTH:
        raise ValueError(f"--tree-depth must be an integer in 1..{MAX_TREE_DEPTH}, got {depth!r}")
    if not _positive_int(topk) or topk > MAX_TREE_TOPK:
        raise ValueError(f"--tree-topk must be an integer in 1..{MAX_TREE_TOPK}, got {topk!r}")
    tokens = tuple(tokens)
    if not tokens or not all(_positive_int(n) and n <= MAX_TREE_TOKENS for n in tokens):
        raise ValueError(f"--tree-tokens must lie in 1..{MAX_TREE_TOKENS}, got {list(tokens)!r}")
    tokens = tuple(sorted(set(tokens)))
    if gamma_mode == "fixed" and len(tokens) != 1:
        raise ValueError(f"--tree-tokens: a fixed --gamma runs one tree size, got {list(tokens)!r}; give one value "
                         "or tune with --gamma auto (or sweep with --gamma a..b)")
    for n in tokens:
        cap = max_tree_nodes(min(depth, n), topk)
        if n > cap:  # the drafter would verify fewer nodes than asked: two candidates would be one tree
            raise ValueError(f"--tree-tokens {n} exceeds the {cap} nodes a tree of depth {min(depth, n)} and "
                             f"--tree-topk {topk} can hold; raise --tree-topk or --tree-depth")
    return tokens


def head_dtype_ok(dtype: str) -> bool:
    return dtype in HEAD_DTYPES


def llamacpp_source(target: str) -> Path:
    """The GGUF file llama.cpp runs for ``--target``: a ``.gguf`` file, or the file behind
    ``builtin:smollm2-135m-instruct``. Anything else is an error naming ``--target``."""
    from eaglehead.builtin.packages import SMOLLM2, smollm2_gguf_path

    if target == SMOLLM2:
        return smollm2_gguf_path()
    path = Path(target)
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise ValueError(f"--target {target!r}: the llama.cpp methods need a GGUF target (a .gguf file or {SMOLLM2}); "
                     "the torch methods run the same file converted, so both engines read one model")


def check_llamacpp(target: str) -> None:
    """Plan-time checks of the llama.cpp methods: the xllamacpp wheel (the error gives the pip command) and
    a GGUF ``--target``."""
    from eaglehead.engines.llamacpp import INSTALL_HINT, LlamaCppMissing, import_xllamacpp

    try:
        import_xllamacpp()
    except LlamaCppMissing:
        raise ValueError(f"--methods: the llama.cpp methods need the xllamacpp wheel, which is not installed; "
                         f"install it with: {INSTALL_HINT}") from None
    llamacpp_source(target)
