"""The version-2 makers of the eight categories' task prompts (``synthesis.task_prompts_version: 2``): many more
topics, templates and follow-ups than version 1 (:mod:`eaglehead.datagen.task_prompts`, kept unchanged because the
shipped data was written from it), and new kinds of task in every category, enough for over 1000 unique prompts a
category. One module a category; a maker draws one of its category's kinds of task, then fills that kind's template.

    from eaglehead.datagen.task_prompts import category_task_prompts
    category_task_prompts(8000, seed=1, version=2)   # 1000 a category
"""

from __future__ import annotations

import random
from typing import Callable

from . import coding, extraction, humanities, math_problems, reasoning, roleplay, stem, writing
from .words import fix_articles


def _with_articles(make: Callable[[random.Random], tuple[str, str]]) -> Callable[[random.Random], tuple[str, str]]:
    """``make`` with "a"/"an" fixed in its prompt and follow-up: templates write "a {product}" whatever it holds."""
    def made(rng: random.Random) -> tuple[str, str]:
        prompt, followup = make(rng)
        return fix_articles(prompt), fix_articles(followup)
    return made


MAKERS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    name: _with_articles(make) for name, make in {
        "writing": writing.make, "roleplay": roleplay.make, "reasoning": reasoning.make, "math": math_problems.make,
        "coding": coding.make, "extraction": extraction.make, "stem": stem.make, "humanities": humanities.make,
    }.items()}
