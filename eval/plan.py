"""What ``eaglehead eval`` runs, as one typed plan validated once: :class:`EvalPlan`.

The command line parses its options into a plan with :func:`plan_from_args`; Python callers (the demo,
tests) build one directly::

    plan = EvalPlan(target="runs/target", prompts="humaneval", drafts={"eagle3": "runs/head"},
                    gamma_mode="auto", gammas=(2, 3, 4, 5, 6), temperatures=(0.0, 1.0), batch_sizes=(1, 4))
    report = run_eval(plan)

Every error names the command-line option it comes from (``--gamma``, ``--batch-sizes``, ...).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import torch
from torch import nn

from eaglehead.builtin.devices import DTYPES
from eaglehead.builtin.models import check_model_name, resolve_target
from eaglehead.builtin.text import encode_prompt
from eaglehead.decode import DEFAULT_GAMMA

from .journal import CALLS
from .plan_options import (DEFAULT_TREE_DEPTH, DEFAULT_TREE_TOPK, LLAMACPP_DTYPES, check_llamacpp, check_tree_axis,
                           default_tree_tokens, head_dtype_ok, parse_budgets, parse_int_list,
                           parse_rates)
from .prompts import MT_BENCH, Prompt, is_long_context, load_prompt_set, split_prompts
from .vllm_methods import HEAD_FORMATS, VLLM_METHODS, check_vllm_plan

TREE_METHODS = ("eagle3-tree", "eagle1-tree")  # our exact tree loop (decode.tree_generate)
LLAMACPP_METHODS = ("llamacpp", "llamacpp-eagle3", "llamacpp-ngram", "llamacpp-dflash")  # llama.cpp in process (eval/llamacpp_engine.py)
METHODS = ("vanilla", "hf-generate", "eagle3", "eagle1", "dflash", "draft-lm", "prompt-lookup", "hf-assisted",
           *TREE_METHODS, *LLAMACPP_METHODS, *VLLM_METHODS)
ENGINE_METHODS = (*LLAMACPP_METHODS, *VLLM_METHODS)  # answered by a server process, not by our loops
ENGINE_OF = {**{m: "llama.cpp" for m in LLAMACPP_METHODS}, **{m: "vllm" for m in VLLM_METHODS}}
ENGINE_PLAIN = {"llama.cpp": "llamacpp", "vllm": "vllm"}  # each engine's own exact decoding (identity reference)
DRAFTER_METHODS = ("eagle3", "eagle1", "dflash", "draft-lm", "prompt-lookup", *TREE_METHODS)  # our loops with a drafter
ENGINE_DRAFTS = ("llamacpp-eagle3", "llamacpp-ngram", "llamacpp-dflash", "vllm-eagle3", "vllm-ngram",
                 "vllm-dflash")  # draft length 0 = the engine's plain server
GAMMA_METHODS = (*DRAFTER_METHODS, "hf-assisted", *ENGINE_DRAFTS)
# The head checkpoint a method reads (tree and llama.cpp methods reuse the chain methods' heads).
# llamacpp-eagle3 reads its own head when one is given (drafts["llamacpp-eagle3"], --llamacpp-draft: llama.cpp
# cannot run an EAGLE 3.1 head), else eagle3's.
HEAD_OF = {"eagle3-tree": "eagle3", "eagle1-tree": "eagle1", "llamacpp-eagle3": "eagle3", "vllm-eagle3": "eagle3",
           "llamacpp-dflash": "dflash", "vllm-dflash": "dflash"}
PATH_OPTION = {"eagle3": "--draft", "eagle1": "--eagle1", "dflash": "--dflash", "draft-lm": "--draft-lm",
               "eagle3-tree": "--draft",
               "eagle1-tree": "--eagle1", "llamacpp-eagle3": "--draft (or --llamacpp-draft)", "vllm-eagle3": "--draft",
               "llamacpp-dflash": "--dflash", "vllm-dflash": "--dflash"}
DRAFT_KEYS = ("eagle3", "eagle1", "dflash", "draft-lm", "llamacpp-eagle3")  # EvalPlan.drafts' keys
BATCH1_METHODS = ("hf-assisted", *LLAMACPP_METHODS)  # one request at a time (transformers, our llama.cpp wrapper;
# vLLM's methods take a batch as concurrent requests)
AUTO_GAMMAS = tuple(range(1, 9))
MAX_GAMMA = 16
CPU_LINEAR = ("packed", "plain")  # EvalPlan.cpu_linear: see decode/packed_linear.py
CPU_LINEAR_HELP = ("on the CPU, the linear layers of every model loaded (target, draft LM, heads): packed (oneDNN on "
                   "weights packed once; every method alike) or plain (F.linear as loaded)")
DrafterFactory = Callable[[nn.Module], Any]  # target -> a Drafter, called once per method
GammaMode = Literal["fixed", "sweep", "auto"]


@dataclass
class EvalPlan:
    """One evaluation: the target, its drafters, the prompt set, the methods and every serving state.

    ``drafts`` maps a method (``eagle3``, ``eagle1``, ``dflash``, ``draft-lm``; ``llamacpp-eagle3`` when llama.cpp runs
    another EAGLE-3 head than ``eagle3``'s) to its checkpoint path;
    ``drafter_factories`` maps a drafter method to a ``target -> Drafter`` callable that replaces the
    built-in loader (tests, custom drafters). ``methods=None`` means vanilla, hf-generate,
    prompt-lookup and every method with a path or a factory; vanilla is always run first (it is the
    baseline). ``gamma_mode`` is ``fixed`` (one gamma), ``sweep`` (every gamma measured on the test
    split) or ``auto`` (each gamma tried on the tune split, the chosen one reported on the test split).
    """

    target: str
    prompts: str  # a prompt JSONL file (MT-bench/Spec-Bench format), humaneval, mt-bench or long-context[:buckets]
    drafts: dict[str, str] = field(default_factory=dict)
    methods: list[str] | None = None
    gamma_mode: GammaMode = "fixed"
    gammas: tuple[int, ...] = (DEFAULT_GAMMA,)
    temperatures: tuple[float, ...] = (0.0,)
    batch_sizes: tuple[int, ...] = (1,)
    max_new_tokens: int | tuple[int, ...] = 128  # the token budget of every request; several: a load sweep
    # (--concurrency / --arrival-rate) runs each; EvalPlan keeps the largest here and all of them in ``budgets``
    budgets: tuple[int, ...] = field(default=(), init=False)  # from max_new_tokens: the output budgets, in order
    concurrency: tuple[int, ...] = ()  # load sweep (eval/load_sweep.py): closed loops with N requests in flight
    arrival_rates: tuple[float, ...] = ()  # load sweep: open loops of Poisson arrivals, requests/s
    load_requests: int | None = None  # requests per load state (None: eval/load_sweep.py's default)
    repeats: int = 1  # interleaved repeats of every timed pass: medians and min-max over them
    tune_fraction: float = 0.25
    max_prompts: int | None = None
    out: str = "runs/eval"
    overwrite: bool = False
    resume: bool = False  # replay the calls a killed run journaled in ``out`` (eval/journal.py)
    seed: int = 0
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    dtype: str = "float32"
    # packed: on the CPU, the torch methods' linear layers (target, draft LM, heads) run oneDNN on weights packed
    # once (decode/packed_linear.py); plain: F.linear as loaded. Ignored on other devices.
    cpu_linear: str = "packed"
    # Trees (eagle3-tree, eagle1-tree): the axis tuned like gamma is the number of verified draft nodes
    # ``tree_tokens``; each tree has depth min(tree_depth, n) and tree_topk children per node (plan_options.py).
    tree_tokens: tuple[int, ...] | None = None  # None: the default of the gamma mode (plan_options.py)
    tree_depth: int = DEFAULT_TREE_DEPTH
    tree_topk: int = DEFAULT_TREE_TOPK
    llamacpp_dtype: str = "as-is"  # as-is | float32 | float16: the target GGUF llama.cpp runs
    llamacpp_head_dtype: str = "float16"  # the exported EAGLE-3 head GGUF's matrices
    threads: int | None = None  # llama.cpp and vLLM threads; None: torch.get_num_threads()
    vllm_python: str | None = None  # vLLM's venv interpreter (eaglehead.engines.vllm_python's search when None)
    vllm_head_format: str = "eagle3"  # the layout vllm-eagle3's head is exported in: eagle3 | speculators
    vllm_enforce_eager: bool = True  # vLLM without its warm-up compilation (start-up ~30 s instead of ~95 s)
    report_to: Literal["none", "wandb"] = "none"  # wandb: the tables and figures also go to a wandb run
    wandb_project: str = "eaglehead"
    drafter_factories: dict[str, DrafterFactory] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.drafter_factories) - set(DRAFTER_METHODS))
        if unknown:
            raise ValueError(f"drafter_factories: unknown method(s) {unknown}; expected keys among "
                             f"{list(DRAFTER_METHODS)}")
        bad_drafts = sorted(set(self.drafts) - set(DRAFT_KEYS))
        if bad_drafts:
            raise ValueError(f"drafts: unknown method(s) {bad_drafts}; expected keys among {list(DRAFT_KEYS)}")
        self.drafts = {m: str(p) for m, p in self.drafts.items() if p}
        out = Path(self.out)
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite contradict each other: --resume continues the run in --out, "
                             "--overwrite starts it again")
        if self.resume and not (out / CALLS).is_file():
            raise ValueError(f"--resume: --out {str(out)!r} holds no journal of an earlier run ({CALLS}); "
                             "drop --resume to start one")
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (self.overwrite or self.resume):
            hint = " or --resume to continue the run it holds" if (out / CALLS).is_file() else ""
            raise ValueError(f"--out {str(out)!r} exists and is not empty; pass --overwrite to write into it{hint}")
        self.temperatures = tuple(self.temperatures)
        if not self.temperatures or any(not (isinstance(t, (int, float)) and not isinstance(t, bool) and
                                             math.isfinite(t) and t >= 0) for t in self.temperatures):
            raise ValueError(f"--temperature values must be finite numbers >= 0, got {list(self.temperatures)!r}")
        self.temperatures = tuple(float(t) for t in self.temperatures)
        self._check_budgets_and_load()
        if not _positive_int(self.repeats):
            raise ValueError(f"--repeats must be an integer >= 1, got {self.repeats!r}")
        if self.report_to not in ("none", "wandb"):
            raise ValueError(f"--report-to must be none or wandb, got {self.report_to!r}")
        if self.max_prompts is not None and not _positive_int(self.max_prompts):
            raise ValueError(f"--max-prompts must be >= 1, got {self.max_prompts!r}")
        tf = self.tune_fraction
        if isinstance(tf, bool) or not isinstance(tf, (int, float)) or not 0.0 <= tf < 1.0:
            raise ValueError(f"--tune-fraction must be in [0, 1), got {tf!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        try:
            torch.device(self.device)
        except RuntimeError:
            raise ValueError(f"--device: expected a torch device such as cpu or cuda, got {self.device!r}") from None
        check_model_name(self.target, "--target")
        self.gammas = _check_gammas(self.gamma_mode, self.gammas)
        self.batch_sizes = tuple(dict.fromkeys(self.batch_sizes))
        if not self.batch_sizes or not all(_positive_int(b) for b in self.batch_sizes):
            raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {list(self.batch_sizes)!r}")
        self.methods = self._resolve_methods()
        self._check_engines()
        named = [m for m in (self.methods if self.load else []) if m in ("hf-generate", "hf-assisted")]
        if named and self.methods_given:
            raise ValueError(f"--methods {','.join(named)}: transformers' generate takes pre-formed batches only, so it "
                             "cannot serve a load sweep (--concurrency / --arrival-rate); leave it out")

    def _check_budgets_and_load(self) -> None:
        """``--max-new-tokens`` (one integer, or several for a load sweep), ``--concurrency``, ``--arrival-rate``."""
        many = isinstance(self.max_new_tokens, (list, tuple))
        budgets = tuple(self.max_new_tokens) if many else (self.max_new_tokens,)
        if not budgets or not all(_positive_int(b) for b in budgets):
            raise ValueError(f"--max-new-tokens must be an integer >= 1 or comma-separated integers >= 1, got "
                             f"{self.max_new_tokens!r}")
        self.budgets = tuple(dict.fromkeys(budgets))
        self.max_new_tokens = max(self.budgets)  # the context checks reserve the largest budget
        self.concurrency = tuple(dict.fromkeys(self.concurrency))
        if not all(_positive_int(n) for n in self.concurrency):
            raise ValueError(f"--concurrency must be comma-separated integers >= 1, got {list(self.concurrency)!r}")
        self.arrival_rates = tuple(self.arrival_rates)
        if not all(not isinstance(r, bool) and isinstance(r, (int, float)) and math.isfinite(r) and r > 0
                   for r in self.arrival_rates):
            raise ValueError(f"--arrival-rate must be comma-separated numbers of requests/s > 0, got "
                             f"{list(self.arrival_rates)!r}")
        self.arrival_rates = tuple(dict.fromkeys(float(r) for r in self.arrival_rates))
        if self.load_requests is not None and not _positive_int(self.load_requests):
            raise ValueError(f"--load-requests must be an integer >= 1, got {self.load_requests!r}")
        if len(self.budgets) > 1 and not self.load:
            raise ValueError(f"--max-new-tokens {','.join(map(str, self.budgets))}: several budgets run in a load "
                             "sweep only; add --concurrency (e.g. 1,2,4) or --arrival-rate, or give one budget")

    @property
    def load(self) -> bool:
        """A load sweep (eval/load_sweep.py): requests arrive instead of pre-formed batches."""
        return bool(self.concurrency or self.arrival_rates)

    def _check_engines(self) -> None:
        """Tree shape and llama.cpp options (errors name the option)."""
        if self.tree_tokens is None:
            self.tree_tokens = default_tree_tokens(self.gamma_mode)
        self.tree_tokens = check_tree_axis(self.gamma_mode, self.tree_tokens, self.tree_depth, self.tree_topk)
        if self.llamacpp_dtype not in LLAMACPP_DTYPES:
            raise ValueError(f"--llamacpp-dtype must be one of {list(LLAMACPP_DTYPES)}, got {self.llamacpp_dtype!r}")
        if not head_dtype_ok(self.llamacpp_head_dtype):
            raise ValueError(f"--llamacpp-head-dtype must be float16, float32 or bfloat16, got "
                             f"{self.llamacpp_head_dtype!r}")
        if self.cpu_linear not in CPU_LINEAR:
            raise ValueError(f"--cpu-linear must be one of {list(CPU_LINEAR)}, got {self.cpu_linear!r}")
        if self.threads is not None and not _positive_int(self.threads):
            raise ValueError(f"--threads must be an integer >= 1, got {self.threads!r}")
        if any(m in LLAMACPP_METHODS for m in self.methods):
            check_llamacpp(self.target)
        if any(m in VLLM_METHODS for m in self.methods):
            check_vllm_plan(self)

    @property
    def methods_given(self) -> bool:
        return self._methods_given

    def _resolve_methods(self) -> list[str]:
        self._methods_given = self.methods is not None
        if self.methods is None:
            names = ["vanilla", "hf-generate", "prompt-lookup"] + [
                m for m in DRAFT_KEYS if m in self.drafts or m in self.drafter_factories]
        else:
            names = list(self.methods)
        unknown = [m for m in names if m not in METHODS]
        if unknown or not names:
            raise ValueError(f"--methods: unknown method(s) {unknown}; expected a comma-separated subset of "
                             f"{list(METHODS)}")
        names = ["vanilla"] + [m for m in dict.fromkeys(names) if m != "vanilla"]
        if any(m in LLAMACPP_METHODS for m in names) and "llamacpp" not in names:
            names.insert(1, "llamacpp")  # plain llama.cpp: the identity and speedup reference of its methods
        if any(m in VLLM_METHODS for m in names) and "vllm" not in names:
            names.insert(1, "vllm")  # plain vLLM, likewise
        for m in names:
            head = HEAD_OF.get(m, m)
            # an engine exports the head checkpoint itself: a Python drafter factory cannot stand in for it.
            factory = m not in ENGINE_METHODS and (m in self.drafter_factories or head in self.drafter_factories)
            if m in PATH_OPTION and not factory and head not in self.drafts and m not in self.drafts:
                raise ValueError(f"--methods {m} needs {PATH_OPTION[m]} PATH")
        return names

    def axis(self, method: str) -> tuple[int, ...]:
        """The candidates of a drafting method's tuned integer: draft length gamma for chains, the number of
        verified tree nodes for trees, the engines' draft length (with 0 = no speculation under --gamma auto)."""
        if method in TREE_METHODS:
            return tuple(self.tree_tokens)
        if method in ENGINE_DRAFTS and self.gamma_mode == "auto":
            return (0, *self.gammas)
        return tuple(self.gammas)

    def tree_shape(self, n: int) -> tuple[int, int, int]:
        """(depth, topk, tokens) of the tree with ``n`` verified draft nodes."""
        return min(self.tree_depth, n), self.tree_topk, n

    @property
    def prompt_set(self) -> str:
        """The prompt set's name in the report: ``humaneval`` or the file's stem."""
        return self.prompts if self.prompts in ("humaneval", MT_BENCH) else Path(self.prompts).stem

    def state_methods(self, batch_size: int) -> tuple[list[str], list[str]]:
        """(methods run at ``batch_size``, those of them that draft with a gamma); hf-assisted and the llama.cpp
        methods are batch 1 only."""
        methods = [m for m in self.methods if m not in BATCH1_METHODS or batch_size == 1]
        return methods, [m for m in methods if m in GAMMA_METHODS]

    def load_prompts(self, tokenizer=None, max_positions: int | None = None) -> tuple[list[Prompt], list[Prompt]]:
        """(tune, test) prompts; errors name ``--prompts`` (or the option that emptied a split).

        ``tokenizer`` and ``max_positions`` are the target's; when no tokenizer is given both are read from
        ``--target`` (its tokenizer and config, not its weights). ``long-context`` is built in the target's
        tokens up to its context, the output budget (``--max-new-tokens`` and the longest draft) kept free; a
        prompt of any set whose tokens (through the chat template; first turn) plus that budget exceed the
        context is refused, naming the prompt, its tokens, the context and ``--max-new-tokens``."""
        if tokenizer is None and is_long_context(self.prompts):
            tokenizer, max_positions = self._target_text()
        reserve = self.max_new_tokens + self.draft_headroom()
        try:
            prompts = load_prompt_set(self.prompts, tokenizer=tokenizer, max_positions=max_positions, reserve=reserve)
            tune, test = split_prompts(prompts, tune_fraction=self.tune_fraction)
        except ValueError as err:
            raise ValueError(f"--prompts: {err}") from None
        if self.max_prompts:
            tune, test = tune[: self.max_prompts], test[: self.max_prompts]
        if not test:
            raise ValueError(f"--prompts: the test split of {len(prompts)} prompts is empty; lower --tune-fraction")
        if self.gamma_mode == "auto" and not tune and any(m in GAMMA_METHODS for m in self.methods):
            raise ValueError(f"--gamma auto needs a non-empty tune split; {len(prompts)} prompts gave none "
                             "(raise --tune-fraction)")
        if tokenizer is None:
            tokenizer, max_positions = self._target_text()
        if max_positions is not None:
            self._check_context(tune + test, tokenizer, max_positions)
        return tune, test

    def draft_headroom(self) -> int:
        """Positions a drafting loop may verify past the token budget (``decode`` refuses prompt +
        max_new_tokens + gamma over the context): the longest chain gamma, or a tree's depth."""
        methods = self.methods or []
        chain = [m for m in methods if m in DRAFTER_METHODS and m not in TREE_METHODS]
        depth = min(self.tree_depth, max(self.tree_tokens)) if any(m in TREE_METHODS for m in methods) else 0
        return max(max(self.gammas) if chain else 0, depth)

    def _target_text(self) -> tuple[Any, int | None]:
        """(tokenizer, context length in positions or None) of ``--target``, without loading its weights."""
        from transformers import AutoConfig, AutoTokenizer

        path = resolve_target(self.target, self.dtype)
        try:
            tok = AutoTokenizer.from_pretrained(path)
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as err:
            raise ValueError(f"--target {self.target!r}: cannot load its tokenizer and config to measure the "
                             f"prompts ({err})") from None
        return tok, getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)

    def _check_context(self, prompts: list[Prompt], tokenizer, max_positions: int) -> None:
        headroom = self.draft_headroom()
        for p in prompts:
            n = len(encode_prompt(tokenizer, p.text))
            if n + self.max_new_tokens + headroom > max_positions:
                drafts = f" + {headroom} draft positions" if headroom else ""
                raise ValueError(
                    f"--prompts: prompt {p.id!r} is {n} tokens; with --max-new-tokens {self.max_new_tokens}{drafts} "
                    f"it needs {n + self.max_new_tokens + headroom} positions, more than the target's context of "
                    f"{max_positions} (max_position_embeddings); lower --max-new-tokens or leave the prompt out")

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data for the report (the factories are code: only their method names)."""
        out = {k: v for k, v in vars(self).items() if k != "drafter_factories" and not k.startswith("_")}
        out.update(gammas=list(self.gammas), tree_tokens=list(self.tree_tokens), temperatures=list(self.temperatures),
                   batch_sizes=list(self.batch_sizes), prompt_set=self.prompt_set, budgets=list(self.budgets),
                   concurrency=list(self.concurrency), arrival_rates=list(self.arrival_rates),
                   drafter_factories=sorted(self.drafter_factories))
        return out


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _check_gammas(mode: str, gammas) -> tuple[int, ...]:
    gammas = tuple(gammas)
    if mode not in ("fixed", "sweep", "auto"):
        raise ValueError(f"--gamma: mode must be fixed, sweep or auto, got {mode!r}")
    if not gammas or not all(_positive_int(g) and g <= MAX_GAMMA for g in gammas):
        raise ValueError(f"--gamma must lie in 1..{MAX_GAMMA}, got {list(gammas)!r}")
    if mode == "fixed" and len(gammas) != 1:
        raise ValueError(f"--gamma: a fixed gamma is one value, got {list(gammas)!r}")
    return gammas


# ------------------------------------------------------------------------------------ command line

def parse_gamma(text: str) -> tuple[GammaMode, list[int]]:
    """``"4"`` -> ("fixed", [4]); ``"2..5"`` -> ("sweep", [2, 3, 4, 5]); ``"auto"`` -> ("auto", [1..8]);
    ``"auto:2..6"`` -> ("auto", [2..6]) (tune over a narrower range)."""
    text = str(text).strip()
    if text == "auto":
        return "auto", list(AUTO_GAMMAS)
    if text.startswith("auto:"):
        mode, gammas = parse_gamma(text[5:])
        if mode != "sweep":
            raise ValueError(f"--gamma auto:a..b needs a range, got {text!r}")
        return "auto", gammas
    try:
        if ".." in text:
            lo, hi = (int(v) for v in text.split(".."))
            mode, gammas = "sweep", list(range(lo, hi + 1))
        else:
            mode, gammas = "fixed", [int(text)]
    except ValueError:
        raise ValueError(f"--gamma must be an integer, a range 'a..b' or 'auto', got {text!r}") from None
    if not gammas or not all(1 <= g <= MAX_GAMMA for g in gammas):
        raise ValueError(f"--gamma must lie in 1..{MAX_GAMMA} (a range needs a <= b), got {text!r}")
    return mode, gammas


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}")
    return sizes


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``eaglehead eval`` options to ``parser``."""
    a = parser.add_argument
    a("--target", required=True, help="Hugging Face causal LM directory (with its tokenizer), a hub id, a .gguf "
      "file or a builtin: name (the llama.cpp methods need a .gguf or builtin:smollm2-135m-instruct)")
    a("--prompts", required=True, help="a prompt JSONL file (MT-bench/Spec-Bench format), 'humaneval', 'mt-bench' "
      "(both turns) or 'long-context' (standard-library documents of ~1k/2k/4k/7k target tokens with summarise, qa "
      "and code tasks; the buckets that do not fit the target's context are left out; 'long-context:2k,4k' names "
      "buckets)")
    a("--draft", help="EAGLE-3 head directory (methods eagle3, eagle3-tree, llamacpp-eagle3, vllm-eagle3)")
    a("--llamacpp-draft", help="EAGLE-3 head directory for llamacpp-eagle3 when it is not --draft (llama.cpp "
      "cannot run an EAGLE 3.1 head: give a plain EAGLE-3 head of the same target here)")
    a("--eagle1", help="EAGLE-1 head directory (methods eagle1, eagle1-tree)")
    a("--dflash", help="DFlash block drafter directory (method dflash: one drafter call drafts the round; "
      "gamma at most its block size - 1)")
    a("--draft-lm", help="small causal LM sharing the target's vocabulary (methods draft-lm, hf-assisted)")
    a("--methods", default=None, help=f"comma-separated subset of {','.join(METHODS)}; default: vanilla, "
      "hf-generate, prompt-lookup and every method whose path is given")
    a("--gamma", default=str(DEFAULT_GAMMA),
      help="draft length 1..16, a sweep 'a..b', or 'auto' (1..8 tuned on the tune split)")
    a("--tree-tokens", default=None, help="tree methods: draft nodes verified per round, the axis tuned like "
      "gamma: one value with a fixed --gamma (default 8), candidates '2,4,8' or 'a..b' with --gamma auto or a "
      "sweep (default 2,4,8,12,16)")
    a("--tree-depth", type=int, default=DEFAULT_TREE_DEPTH,
      help="tree methods: the depth of a tree of n nodes is min(this, n)")
    a("--tree-topk", type=int, default=DEFAULT_TREE_TOPK,
      help="tree methods: children drafted per node (EAGLE-2's topk)")
    a("--llamacpp-dtype", default="as-is", help="llama.cpp methods: run the target GGUF as-is, or a float32 / "
      "float16 GGUF written from it (float32 is the torch methods' model exactly)")
    a("--llamacpp-head-dtype", default="float16", help="llama.cpp methods: dtype of the EAGLE-3 head GGUF "
      "exported from --draft into --out (float16, float32, bfloat16)")
    a("--threads", type=int, default=None, help="llama.cpp and vLLM threads (default: torch.get_num_threads())")
    a("--vllm-python", default=None, help="vLLM methods: the interpreter of vLLM's venv (default: "
      "$EAGLEHEAD_VLLM_PYTHON, else .venv-vllm/bin/python, which make install builds)")
    a("--vllm-head-format", default="eagle3", choices=HEAD_FORMATS, help="vllm-eagle3: the layout --draft is "
      "exported in for vLLM (both load)")
    a("--vllm-compile", action="store_true", help="vLLM methods: let vLLM compile its graphs at start-up (faster "
      "decoding, ~95 s a server start on 2 cores instead of ~30 s eager)")
    a("--temperature", type=float, nargs="+", default=[0.0], help="one or more temperatures (0 = greedy)")
    a("--batch-sizes", default="1", help="comma-separated batch sizes, e.g. 1,4,8")
    a("--max-new-tokens", default="128", help="the output budget of every request; comma-separated budgets "
      "(e.g. 64,256,1024) run each in a load sweep (--concurrency / --arrival-rate)")
    a("--concurrency", default=None, help="load sweep: closed loops with N requests in flight, comma-separated "
      "(e.g. 1,2,4,8): the engines batch continuously, the torch loop forms static batches of the waiting requests")
    a("--arrival-rate", default=None, help="load sweep: open loops of seeded Poisson arrivals, requests/s, "
      "comma-separated; in-flight capacity = the largest --concurrency (default 4); a rate the engine cannot keep "
      "up with is reported as saturated")
    a("--load-requests", type=int, default=None, help="load sweep: requests per state (default: the split's "
      "prompts of the context bucket, cycled to at least 2 x the concurrency)")
    a("--repeats", type=int, default=1, help="interleaved repeats of every timed pass; the report gives medians "
      "and min-max, and --gamma auto chooses on medians (3 or more make single outliers harmless)")
    a("--tune-fraction", type=float, default=0.25, help="share of each category used to tune gamma")
    a("--max-prompts", type=int, default=None, help="use at most this many prompts per split (quick runs)")
    a("--out", default="runs/eval", help="output directory (must be empty unless --overwrite)")
    a("--overwrite", action="store_true", help="write into a non-empty --out (an earlier run there starts over)")
    a("--resume", action="store_true", help="continue the run journaled in --out (calls.jsonl): finished "
      "batches are replayed, the rest measured; the plan must be the same")
    a("--seed", type=int, default=0)
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--dtype", default="float32", help="float32 | bfloat16 | float16")
    a("--cpu-linear", default="packed", choices=CPU_LINEAR, help=CPU_LINEAR_HELP)
    a("--report-to", default="none", choices=("none", "wandb"),
      help="also log the tables and figures to a wandb run (WANDB_MODE=offline works without a network)")
    a("--wandb-project", default="eaglehead")


def plan_from_args(args: argparse.Namespace,
                   drafter_factories: dict[str, DrafterFactory] | None = None) -> EvalPlan:
    """The plan of parsed ``eaglehead eval`` options (see :func:`add_eval_arguments`), validated."""
    mode, gammas = parse_gamma(args.gamma)
    methods = None if args.methods is None else [m.strip() for m in str(args.methods).split(",") if m.strip()]
    drafts = {"eagle3": args.draft, "eagle1": args.eagle1, "dflash": args.dflash, "draft-lm": args.draft_lm,
              "llamacpp-eagle3": args.llamacpp_draft}
    tree_tokens = None if args.tree_tokens is None else tuple(parse_int_list(args.tree_tokens, "--tree-tokens"))
    return EvalPlan(target=args.target, prompts=args.prompts, drafts={m: p for m, p in drafts.items() if p},
                    methods=methods, gamma_mode=mode, gammas=tuple(gammas), temperatures=tuple(args.temperature),
                    batch_sizes=tuple(parse_batch_sizes(args.batch_sizes)),
                    max_new_tokens=parse_budgets(args.max_new_tokens),
                    concurrency=tuple(parse_int_list(args.concurrency, "--concurrency")) if args.concurrency else (),
                    arrival_rates=parse_rates(args.arrival_rate) if args.arrival_rate else (),
                    load_requests=args.load_requests,
                    repeats=args.repeats, tree_tokens=tree_tokens, tree_depth=args.tree_depth,
                    tree_topk=args.tree_topk, llamacpp_dtype=args.llamacpp_dtype,
                    llamacpp_head_dtype=args.llamacpp_head_dtype, threads=args.threads, report_to=args.report_to,
                    vllm_python=args.vllm_python, vllm_head_format=args.vllm_head_format,
                    vllm_enforce_eager=not args.vllm_compile,
                    wandb_project=args.wandb_project,
                    tune_fraction=args.tune_fraction, max_prompts=args.max_prompts, out=str(args.out),
                    overwrite=args.overwrite, resume=args.resume, seed=args.seed, device=args.device, dtype=args.dtype,
                    cpu_linear=args.cpu_linear, drafter_factories=dict(drafter_factories or {}))
