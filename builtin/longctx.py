"""The built-in long-context prompt set: standard-library sources of a given length in the target's tokens,
each with a task on it.

Every document is text installed with Python: the source of a standard-library module, located with
``importlib.util.find_spec`` (never a directory listing), from a fixed list per task. Documents are cut at
line boundaries so that the whole prompt, encoded as the target reads it (:func:`~eaglehead.builtin.text.
encode_prompt`: through the chat template when the tokenizer has one), holds about the bucket's number of
tokens (within ``TOLERANCE``); a module too short for its bucket is followed by the next ones of its list.
Lengths depend on the tokenizer (and the texts on the Python version), so the set is built for a tokenizer.

Buckets (:data:`BUCKETS`): ``1k``, ``2k``, ``4k``, ``7k`` prompt tokens. Tasks, ``PER_BUCKET`` prompts each:

* ``summarise``: a module's source from its start: "Summarise what this module does".
* ``qa``: a module's source and a question whose answer is in it: the value of a module-level constant
  (``NAME = literal``) or the parameters of a documented function or method; the document is the excerpt
  that puts the fact about 1/4, 2/4, 3/4 of the way in (later where the file ends first).
  :attr:`LongPrompt.answer` is the answer, :attr:`LongPrompt.evidence` the source lines that hold it (they
  occur in the document).
* ``code``: a module's source cut off mid-file: "Continue this code". Most of its modules are files the
  built-in corpus holds out of training (``builtin:stdlib-heldout``, :func:`~eaglehead.builtin.corpus.is_heldout`).

Category ``f"{task}-{bucket}"`` (so a category-stratified split keeps every bucket and task on both sides),
id ``f"long-{task}-{bucket}-{i}"``. API::

    prompts, notes = build_long_context(tok, max_positions=8192, reserve=128)  # notes: buckets left out
    build_long_context(tok, buckets=("4k",), max_positions=2048)  # ValueError: bucket '4k' does not fit
    parse_buckets("2k,4k")                                        # ("2k", "4k")
"""

from __future__ import annotations

import ast
import bisect
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .text import encode_prompt

NAME = "long-context"
BUCKETS = {"1k": 1024, "2k": 2048, "4k": 4096, "7k": 7168}  # prompt tokens, the target's
TOLERANCE = 0.10  # every prompt holds BUCKETS[b] * (1 +- TOLERANCE) tokens
PER_BUCKET = 3
TASKS = ("summarise", "qa", "code")
_AIM = 0.02  # the fit stops once within 2 % of the bucket
# Bucket k's prompt i reads module MODULES[task][PER_BUCKET * k + i] (followed by the next ones if short). All are
# plain source files on CPython 3.11 to 3.13 (no frozen module, none that PEP 594 removes), longer ones last.
MODULES = {
    "summarise": ("fnmatch", "getopt", "glob", "heapq", "textwrap", "csv",
                  "statistics", "tempfile", "shutil", "argparse", "dataclasses", "difflib"),
    "qa": ("quopri", "poplib", "configparser", "ftplib", "smtplib", "uuid",
           "imaplib", "random", "plistlib", "tarfile", "pickle", "zipfile"),
    "code": ("sched", "copyreg", "bz2", "timeit", "shlex", "gzip",
             "calendar", "trace", "pprint", "subprocess", "enum", "traceback"),
}


@dataclass(frozen=True)
class LongPrompt:
    id: str
    category: str
    task: str
    bucket: str
    text: str  # the user turn: instructions around the document
    document: str
    tokens: int  # len(encode_prompt(tokenizer, text))
    modules: tuple[str, ...]
    question: str = ""  # qa only
    answer: str = ""
    evidence: str = ""


@dataclass(frozen=True)
class _Fact:
    first: int  # 0-based line of the stream where the evidence starts
    end: int  # 0-based line after it
    kind: str  # "constant" | "function"
    question: str
    answer: str
    evidence: str


def parse_buckets(text: str) -> tuple[str, ...]:
    """``"2k,4k"`` -> ``("2k", "4k")``; an unknown bucket is a ValueError naming the known ones."""
    names = tuple(dict.fromkeys(b.strip() for b in str(text).split(",") if b.strip()))
    bad = [b for b in names if b not in BUCKETS]
    if bad or not names:
        raise ValueError(f"{NAME}: unknown bucket(s) {bad or [text]}; expected a comma-separated subset of "
                         f"{list(BUCKETS)}")
    return names


@functools.lru_cache(maxsize=None)
def module_source(name: str) -> tuple[str, ...]:
    """The source lines (ends kept) of standard-library module ``name``, found with ``find_spec``."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py") or not Path(origin).is_file():
        raise RuntimeError(f"{NAME}: the standard-library module {name!r} has no source file ({origin!r})")
    return tuple(Path(origin).read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True))


@functools.lru_cache(maxsize=None)
def _module_tree(name: str) -> ast.Module:
    return ast.parse("".join(module_source(name)))


def _segment(line: str, node: ast.expr) -> str:
    """The source text of a one-line node (ast's offsets count UTF-8 bytes)."""
    return line.encode()[node.col_offset:node.end_col_offset].decode(errors="replace")


@functools.lru_cache(maxsize=None)
def _module_facts(name: str) -> tuple[_Fact, ...]:
    """Constants (``NAME = literal`` once at module level) and documented public functions and methods with
    parameters, each with its question and answer; lines relative to the module."""
    lines = module_source(name)
    tree = _module_tree(name)
    facts, seen = [], {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            seen[node.targets[0].id] = seen.get(node.targets[0].id, 0) + 1
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            key, value = node.targets[0].id, node.value
            if (key.isupper() and seen[key] == 1 and isinstance(value, ast.Constant) and node.lineno == node.end_lineno
                    and not isinstance(value.value, bool) and value.value is not None):
                answer = _segment(lines[node.lineno - 1], value)
                if answer and len(answer) <= 60:
                    q = f"What is the value of the constant `{key}` defined in the module `{name}`?"
                    facts.append(_Fact(node.lineno - 1, node.lineno, "constant", q, answer, lines[node.lineno - 1]))
    functions = [(n.name, n, False) for n in tree.body if isinstance(n, ast.FunctionDef)]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        functions += [(f"{cls.name}.{n.name}", n, True) for n in cls.body if isinstance(n, ast.FunctionDef)]
    counts: dict[str, int] = {}
    for qualname, _, _ in functions:
        counts[qualname] = counts.get(qualname, 0) + 1
    for qualname, node, method in functions:
        params = _parameters(node.args, method)
        if node.name.startswith("_") or counts[qualname] > 1 or not params or not ast.get_docstring(node):
            continue
        end = max(node.lineno, node.body[0].lineno - 1)
        what = f"method `{qualname}`" if method else f"function `{qualname}`"
        q = f"Which parameters does the {what} of the module `{name}` take? List their names in order."
        facts.append(_Fact(node.lineno - 1, end, "function", q, ", ".join(params),
                           "".join(lines[node.lineno - 1:end])))
    return tuple(sorted(facts, key=lambda f: f.first))


def _parameters(args: ast.arguments, method: bool) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    names += [f"*{args.vararg.arg}"] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    return names + ([f"**{args.kwarg.arg}"] if args.kwarg else [])


@functools.lru_cache(maxsize=None)
def _module_tops(name: str) -> tuple[int, ...]:
    """0-based first lines (decorators included) of the module's top-level statements and of every class and
    function in it: where excerpts start."""
    tree = _module_tree(name)
    nodes = list(tree.body) + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    return tuple(sorted({0} | {min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1
                               for n in nodes}))


def _stream(modules: tuple[str, ...]) -> tuple[list[str], list[_Fact], list[int], list[int]]:
    """The lines of the modules one after another (each later one under a header line), their facts, the
    lines an excerpt may start at and the line each module starts at."""
    lines: list[str] = []
    facts: list[_Fact] = []
    tops: list[int] = []
    firsts: list[int] = []
    for k, name in enumerate(modules):
        firsts.append(len(lines))
        if k:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            tops.append(len(lines))
            lines.append(f"# ---- the source of the module `{name}` follows ----\n")
        base = len(lines)
        facts += [_Fact(f.first + base, f.end + base, f.kind, f.question, f.answer, f.evidence)
                  for f in _module_facts(name)]
        tops += [t + base for t in _module_tops(name) if t or not k]
        lines += module_source(name)
    return lines, facts, tops, firsts


def _title(modules: tuple[str, ...]) -> str:
    if len(modules) == 1:
        return f"the Python standard-library module `{modules[0]}`"
    return "the Python standard-library modules " + ", ".join(f"`{m}`" for m in modules)


def _render(task: str, modules: tuple[str, ...], doc: str, excerpt: bool, question: str = "") -> str:
    what = "this module does" if len(modules) == 1 else "these modules do"
    head = f"Below is {'an excerpt of ' if excerpt else ''}the source of {_title(modules)}."
    if task == "summarise":
        return (f"{head}\n\n```python\n{doc}```\n\nSummarise what {what}: the purpose, the main classes and "
                "functions, and how they are meant to be used.")
    if task == "qa":
        return f"{head}\n\n```python\n{doc}```\n\nQuestion: {question}\nAnswer from the source above."
    return (f"Continue this code. It is the source of {_title(modules)}, cut off mid-file; write the lines "
            f"that come next.\n\n```python\n{doc}")


def _document(body: list[str], n: int) -> str:
    doc = "".join(body[:n])
    return doc if doc.endswith("\n") or not doc else doc + "\n"


def _count(tok, text: str) -> int:
    return len(encode_prompt(tok, text))


def _fit(tok, lines: list[str], target: int, text_of, snap) -> tuple[int, int]:
    """(lines kept, prompt tokens): the number of leading lines whose prompt ``text_of(n)`` holds about
    ``target`` tokens, by a few secant steps on the characters per token (each step encodes once)."""
    cum = [0]
    for line in lines:
        cum.append(cum[-1] + len(line))
    overhead = _count(tok, text_of(0))

    def lines_for(ratio: float) -> int:
        n = bisect.bisect_right(cum, (target - overhead) * ratio) - 1
        return snap(min(max(n, 1), len(lines)))

    n, best = lines_for(4.0), None
    for _ in range(8):
        tokens = _count(tok, text_of(n))
        if best is None or abs(tokens - target) < abs(best[1] - target):
            best = (n, tokens)
        if abs(tokens - target) <= _AIM * target:
            break
        following = lines_for(cum[n] / max(1, tokens - overhead))
        if following == n:
            break
        n = following
    return best


def _snap_for(task: str, body: list[str]):
    """Code ends on a line of code with more of the file after it; the other tasks end anywhere."""
    def snap(n: int) -> int:
        n = min(n, len(body) - 1)
        while n > 1 and not body[n - 1].strip():
            n -= 1
        return max(n, 1)
    return snap if task == "code" else (lambda n: n)


def _fact_order(facts: list[_Fact], i: int) -> list[_Fact]:
    """The facts prompt ``i`` may ask about, best first: prompt 0 (mod 3) a constant when the module has one, the
    others a function's parameters; first the fact ``(i + 1) / (PER_BUCKET + 1)`` of the way through those of
    its kind, then its neighbours (earlier ones first)."""
    kind = "constant" if i % 3 == 0 else "function"
    pool = [f for f in facts if f.kind == kind] or facts
    if not pool:
        return []
    k = len(pool) * (i + 1) // (PER_BUCKET + 1)
    ranked = sorted(enumerate(pool), key=lambda jf: (abs(jf[0] - k), jf[0] > k))
    return [f for _, f in ranked]


def _qa_start(fit, fact: _Fact, tops: list[int], depth: float, target: int) -> int | None:
    """The first line of the qa excerpt that holds ``fact`` about ``depth`` of the way in (it starts at a
    statement), moved earlier when the file ends before the bucket is full; None if the fact falls outside."""
    _, n, _ = fit(0)
    for again in (depth, 0.5):  # again with the fact mid-way if it fell outside
        start = max([t for t in tops if t <= fact.first - round(n * again)] or [0])
        for _ in range(3):
            body, n, tokens = fit(start)
            if start == 0 or n < len(body) or tokens >= target * (1 - _AIM):
                break
            back = start - round((target - tokens) * n / max(tokens, 1) * 1.1)  # the file ended: start earlier
            start = max([t for t in tops if t <= back] or [0])
        if fact.first >= start and fact.end - start <= n:
            return start
    return None


def _one(tok, task: str, bucket: str, i: int, modules: tuple[str, ...]) -> LongPrompt | None:
    """Prompt ``i`` of ``bucket`` on ``modules`` (None when they are too short or hold no fact to ask). A qa
    document is the excerpt that puts its fact about ``(i + 1) / (PER_BUCKET + 1)`` of the way in."""
    target = BUCKETS[bucket]
    lines, facts, tops, firsts = _stream(modules)

    def fitter(question: str):
        @functools.lru_cache(maxsize=None)
        def fit(start: int) -> tuple[list[str], int, int]:
            body = lines[start:]
            n, tokens = _fit(tok, body, target, lambda m: _render(task, modules, _document(body, m),
                                                                  start > 0 or m < len(body), question),
                             _snap_for(task, body))
            return body, n, tokens
        return fit

    fact, start = None, 0
    if task == "qa":
        for fact in _fact_order(facts, i)[:4]:  # a fact the excerpt cannot hold gives way to its neighbour
            fit = fitter(fact.question)
            start = _qa_start(fit, fact, tops, (i + 1) / (PER_BUCKET + 1), target)
            if start is not None:
                break
        if start is None or fact is None:
            return None
    else:
        fit = fitter("")
    question = fact.question if fact else ""
    body, n, tokens = fit(start)
    shown = tuple(m for m, first, after in zip(modules, firsts, firsts[1:] + [len(lines)])
                  if first < start + n and after > start)  # the modules the excerpt reaches
    doc = _document(body, n)
    text = _render(task, shown, doc, start > 0 or n < len(body), question)
    tokens = tokens if shown == modules else _count(tok, text)
    if abs(tokens - target) > TOLERANCE * target or (task == "code" and n >= len(body)):
        return None
    return LongPrompt(f"long-{task}-{bucket}-{i}", f"{task}-{bucket}", task, bucket, text, doc, tokens, shown,
                      *((fact.question, fact.answer, fact.evidence) if fact else ()))


def _bucket(tok, bucket: str) -> list[LongPrompt]:
    """Every task's ``PER_BUCKET`` prompts of one bucket."""
    k = list(BUCKETS).index(bucket)
    out = []
    for task in TASKS:
        names = MODULES[task]
        for i in range(PER_BUCKET):
            start = (PER_BUCKET * k + i) % len(names)
            for extra in range(len(names)):  # too short: the next modules of the list follow it
                modules = tuple(names[(start + j) % len(names)] for j in range(extra + 1))
                prompt = _one(tok, task, bucket, i, modules)
                if prompt is not None:
                    out.append(prompt)
                    break
            else:
                raise RuntimeError(f"{NAME}: cannot build prompt {i} of {task}-{bucket} from {list(names)}")
    return out


def build_long_context(tokenizer, *, buckets: tuple[str, ...] | None = None, max_positions: int | None = None,
                       reserve: int = 0) -> tuple[list[LongPrompt], list[str]]:
    """(prompts, notes): the set for ``tokenizer``, bucket by bucket (tasks in :data:`TASKS` order).

    A bucket whose longest prompt plus ``reserve`` (the output budget) exceeds ``max_positions`` is left out,
    with a note saying so; when ``buckets`` names it explicitly it is a ValueError naming it instead. No bucket
    left is a ValueError. ``max_positions=None``: no limit."""
    if tokenizer is None:
        raise ValueError(f"prompt set {NAME!r} needs the target's tokenizer: its buckets are measured in the "
                         "target's tokens")
    explicit = buckets is not None
    names = parse_buckets(",".join(buckets)) if explicit else tuple(BUCKETS)
    prompts, notes = [], []
    for bucket in names:
        room = None if max_positions is None else max_positions - reserve
        size = BUCKETS[bucket]
        built, longest, bound = [], round(size * (1 - TOLERANCE)), "at least"
        if room is None or longest <= room:
            built = _bucket(tokenizer, bucket)
            longest, bound = max(p.tokens for p in built), "the longest"
        if room is not None and longest > room:
            why = (f"bucket {bucket!r} (prompts of ~{size} tokens, {bound} {longest}) + {reserve} positions of "
                   f"output budget do not fit the target's context of {max_positions} positions")
            if explicit:
                raise ValueError(f"{NAME}: {why}")
            notes.append(f"{NAME}: left out {why}")
            continue
        prompts += built
    if not prompts:
        raise ValueError(f"{NAME}: no bucket fits the target's context of {max_positions} positions with {reserve} "
                         f"positions of output budget (the smallest, {min(BUCKETS.values())} tokens, needs "
                         f"{round(min(BUCKETS.values()) * (1 - TOLERANCE)) + reserve} or more)")
    return prompts, notes
