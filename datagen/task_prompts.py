"""Seed task prompts in the eight kinds of request a chat benchmark such as MT-bench asks: writing,
roleplay, reasoning, math, coding, extraction, stem, humanities.

Each prompt is built from a template and word lists in this file (math and reasoning problems from
random numbers and names, extraction passages from templated facts), so nothing is downloaded and the
same seed gives the same prompts. Each comes with a follow-up user turn of its category ("now make it
shorter", "add tests"): benchmarks ask a second turn that refers to the first answer, and a head that
never saw one drafts it badly. None of this text is taken from a benchmark; the data pipeline still
removes any prompt or follow-up sharing a word n-gram with one (``eaglehead.datagen.chat_data.OverlapFilter``).

This file's makers are version 1 (``synthesis.task_prompts_version: 1``, ~200 unique prompts a category): the
shipped data set was written from them, so they stay as they are. Version 2 (:mod:`eaglehead.datagen.task_prompts_v2`)
has longer lists and more kinds of task, for 1000 and more a category.

    category_task_prompts(800, seed=0)   # [{"source": "task:writing", "prompt": ..., "followup": ...}, ...]
    category_task_prompts(8000, seed=1, version=2)
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable

from .chat_data import words
from .task_prompts_v2 import MAKERS as MAKERS_V2

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")

NAMES = ("Alice", "Bob", "Carmen", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam",
         "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wei", "Yusuf", "Zoe")
CITIES = ("Lisbon", "Nairobi", "Osaka", "Toronto", "Krakow", "Lima", "Melbourne", "Hanoi", "Dublin", "Accra",
          "Austin", "Bergen", "Cordoba", "Tbilisi", "Pune", "Leeds", "Quito", "Tallinn")

# --------------------------------------------------------------------------------------------- writing

_FORMS = ("short story", "poem", "blog post", "persuasive essay", "formal email", "product description",
          "speech", "letter to a friend", "news article", "diary entry", "limerick", "cover letter", "film review",
          "restaurant review", "travel guide entry", "advertisement", "thank-you note", "fable", "opinion piece",
          "social media post", "newsletter introduction", "toast for a wedding", "song chorus", "press release")
_WRITING_TOPICS = (
    "a lighthouse keeper who finds a message in a bottle", "the first warm day of spring", "learning to ride a bicycle",
    "a city without cars", "a robot that wants to paint", "the importance of sleep", "working from home",
    "a small bakery opening on a quiet street", "recycling at school", "a weekend trip to the mountains",
    "a lost dog finding its way home", "the value of public libraries", "a new electric bicycle", "moving to a new country",
    "the last day of summer camp", "a friendship between a fox and a crow", "a community garden", "learning a second language",
    "a storm at sea", "the joy of cooking for others", "a running shoe made from recycled plastic", "an old pocket watch",
    "volunteering at an animal shelter", "a village festival", "why everyone should learn to swim", "a night train journey",
    "a grandmother's secret recipe", "a startup that delivers groceries by drone", "the sound of rain on a tin roof",
    "a student's first day at university", "a chess match between two rivals", "the benefits of walking meetings",
    "a museum that opens at midnight", "an astronaut returning to Earth", "a local football team's surprise win",
    "a bookshop that only sells used books", "kindness between strangers", "a smartphone app for learning birdsong",
    "a winter morning in a small town", "the end of a long friendship", "a solar-powered camping lantern",
    "the first human colony on the Moon", "a teacher who changed your life", "a noisy neighbour", "a perfect cup of tea")
_AUDIENCES = ("children", "a company newsletter", "college students", "retired teachers", "a local newspaper",
              "new employees", "a parents' association", "tourists", "a science club", "busy professionals")
_TONES = ("funny", "heartfelt", "formal", "optimistic", "mysterious", "playful", "serious", "nostalgic")
_WRITING_FOLLOWUPS = (
    "Now rewrite it in exactly four sentences.", "Rewrite it for a much younger audience.",
    "Make the tone more formal and remove any jokes.", "Give it a title and cut its length in half.",
    "Turn your answer into a short poem that rhymes.", "Now write a reply to it from the reader's point of view.",
    "Rewrite it so that every paragraph ends with a question.", "Add a surprising twist at the end.",
    "Rewrite it in the first person.", "Summarise what you wrote in one sentence.")


def _writing(rng: random.Random) -> tuple[str, str]:
    form, topic = rng.choice(_FORMS), rng.choice(_WRITING_TOPICS)
    template = rng.choice((
        "Write a {form} about {topic}.",
        "Compose a {form} on the theme of {topic}. Keep it under {n} words.",
        "Draft a {form} about {topic} for {audience}.",
        "Can you write a {tone} {form} about {topic}?",
        "I need a {form} about {topic}. Make it {tone} and suitable for {audience}.",
    ))
    text = template.format(form=form, topic=topic, n=rng.choice((100, 150, 200, 300)),
                           audience=rng.choice(_AUDIENCES), tone=rng.choice(_TONES))
    return text, rng.choice(_WRITING_FOLLOWUPS)


# -------------------------------------------------------------------------------------------- roleplay

_PERSONAS = (
    "a pirate captain", "a medieval knight", "a detective in 1920s London", "a friendly tour guide in Rome",
    "a spaceship engineer", "a grumpy chef", "a wise old wizard", "a football coach before a final",
    "a museum curator", "a time traveller from the year 3000", "a patient customer support agent",
    "a personal fitness trainer", "a famous nineteenth-century inventor", "a park ranger", "a job interviewer",
    "a Renaissance poet", "a first-time airline pilot", "a late-night radio host", "a marine biologist",
    "a children's librarian", "a mountain guide", "a stand-up comedian", "a nervous magician", "a village doctor",
    "a retired astronaut", "an ambitious mayor", "a jazz musician", "a beekeeper", "a travelling salesperson",
    "a lighthouse keeper", "a robot butler", "a barista who loves philosophy", "a cheerful weather presenter")
_ROLE_TASKS = (
    "Describe your typical day.", "Give advice to someone who is just starting out in your line of work.",
    "Explain what you love most about your work.", "Introduce yourself to a group of students.",
    "Tell me about the hardest challenge you have faced.", "What should I bring on a long journey with you?",
    "Convince me to join your team.", "Describe the strangest thing that ever happened to you.",
    "What is your opinion of modern technology?", "Give me three rules you live by.",
    "How do you deal with a difficult day?", "Tell me a short story from your past.",
    "Answer my question: what makes a good leader?", "Describe your favourite place in the world.")
_ROLE_FOLLOWUPS = (
    "Stay in character and tell me one more thing about yourself.",
    "Now answer the same question as if you were speaking to a child.",
    "What would you say to someone who disagrees with you?",
    "Stay in character: I ask you for one piece of advice for tomorrow.",
    "Describe the same thing again, but in a much more dramatic way.",
    "Drop the character now and explain what you were imitating.")


def _roleplay(rng: random.Random) -> tuple[str, str]:
    persona, task = rng.choice(_PERSONAS), rng.choice(_ROLE_TASKS)
    template = rng.choice((
        "Pretend you are {persona}. {task}", "Act as {persona} and stay in character. {task}",
        "You are {persona}. {task}", "Imagine yourself as {persona}. {task}",
        "Let's play a game: you are {persona} and I am a visitor. {task}",
    ))
    return template.format(persona=persona, task=task), rng.choice(_ROLE_FOLLOWUPS)


# ------------------------------------------------------------------------------------------- reasoning

_REASON_FOLLOWUPS = (
    "Explain how you reached that answer, step by step.", "Are you sure? Check your reasoning once more.",
    "Can you think of another way to reach the same answer?", "What if one of the statements were false?",
    "Make up a similar puzzle and solve it.", "Explain the answer to someone who has never seen this kind of puzzle.")
_ITEMS = ("apples", "marbles", "stamps", "pencils", "books", "coins", "stickers", "cookies", "tickets", "shells")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_SETS = (("cats", "mammals", "pets"), ("roses", "flowers", "red things"), ("squares", "rectangles", "large shapes"),
         ("violinists", "musicians", "teachers"), ("sparrows", "birds", "fast animals"),
         ("poets", "writers", "gardeners"), ("oaks", "trees", "old plants"))


def _reasoning(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = rng.sample(NAMES, 4)
    kind = rng.randrange(7)
    if kind == 0:
        adj = rng.choice((("taller", "shortest"), ("older", "youngest"), ("faster", "slowest"), ("richer", "poorest")))
        text = (f"{a} is {adj[0]} than {b}, and {b} is {adj[0]} than {c}. {d} is {adj[0]} than {a}. "
                f"Who is the {adj[1]}? Explain your reasoning.")
    elif kind == 1:
        n, k, m, item = rng.randint(5, 40), rng.randint(1, 5), rng.randint(2, 12), rng.choice(_ITEMS)
        text = (f"{a} has {n} {item}. {a} gives {k} to {b}, then buys {m} more and shares half of them equally "
                f"with {c}. How many {item} does {a} have in the end? Think step by step.")
    elif kind == 2:
        text = (f"{a} is the parent of {b}, and {b} is the parent of {c}. {d} is a sibling of {b}. "
                f"How is {d} related to {c}, and how is {a} related to {d}?")
    elif kind == 3:
        x, y, z = rng.choice(_SETS)
        text = f"All {x} are {y}. Some {y} are {z}. Does it follow that some {x} are {z}? Explain why or why not."
    elif kind == 4:
        day, n = rng.choice(_DAYS), rng.randint(3, 200)
        text = f"If today is {day}, what day of the week will it be in {n} days? Show how you work it out."
    elif kind == 5:
        diff, k = rng.randint(6, 30), rng.randint(2, 5)
        text = (f"{a} is {diff} years older than {b}. In {k} years, {a} will be twice as old as {b}. "
                f"How old are {a} and {b} now?")
    else:
        text = (f"{a} says: \"{b} is lying.\" {b} says: \"{c} is lying.\" {c} says: \"{a} and {b} are both lying.\" "
                f"Exactly one of them tells the truth. Who is it?")
    return text, rng.choice(_REASON_FOLLOWUPS)


# ------------------------------------------------------------------------------------------------ math

_MATH_FOLLOWUPS = (
    "Check your answer with a different method.", "Now solve the same problem with every number doubled.",
    "Explain each step to a student who finds this topic hard.", "Write a similar problem for me to practise.",
    "Can you express the answer in another form, such as a decimal or a percentage?",
    "Where could someone make a mistake in this problem?")


def _math(rng: random.Random) -> tuple[str, str]:
    r = rng.randint
    kind = rng.randrange(12)
    if kind == 0:
        text = f"Solve for x: {r(2, 12)}x + {r(1, 40)} = {r(41, 200)}."
    elif kind == 1:
        text = f"What is the area and the perimeter of a rectangle {r(3, 40)} cm long and {r(2, 30)} cm wide?"
    elif kind == 2:
        text = f"Find the sum of the first {r(10, 200)} positive integers, and explain the formula you use."
    elif kind == 3:
        item = rng.choice(("notebooks", "shirts", "lamps", "chairs", "mugs"))
        text = (f"A shop sells {item} for ${r(3, 80)} each. How much do {r(2, 15)} of them cost after a "
                f"{rng.choice((5, 10, 15, 20, 25, 30))}% discount?")
    elif kind == 4:
        text = f"What is {rng.choice((5, 12, 15, 20, 35, 40, 75))}% of {r(20, 900)}?"
    elif kind == 5:
        text = f"Differentiate f(x) = {r(2, 9)}x^{r(2, 5)} + {r(2, 20)}x - {r(1, 9)} with respect to x."
    elif kind == 6:
        text = f"A train travels {r(60, 900)} km in {r(2, 9)} hours. What is its average speed in km/h and in m/s?"
    elif kind == 7:
        text = f"Find the greatest common divisor and the least common multiple of {r(12, 240)} and {r(12, 240)}."
    elif kind == 8:
        text = f"Two fair six-sided dice are rolled. What is the probability that their sum is {r(2, 12)}?"
    elif kind == 9:
        s, d = r(4, 60), r(0, 20)
        text = f"Solve the system of equations: x + y = {s} and x - y = {d}."
    elif kind == 10:
        text = (f"Compute the integral of {r(2, 9)}x^{r(1, 4)} from x = 0 to x = {r(1, 5)}.")
    else:
        text = (f"A savings account pays {rng.choice((2, 3, 4, 5, 6))}% interest per year, compounded yearly. "
                f"How much is ${r(1, 20) * 500} worth after {r(2, 10)} years?")
    return text, rng.choice(_MATH_FOLLOWUPS)


# ---------------------------------------------------------------------------------------------- coding

_LANGS = ("Python", "Python", "Python", "JavaScript", "C++", "Java", "Go", "Rust", "TypeScript", "C")
_CODE_TASKS = (
    "reverses a singly linked list", "checks whether a string is a palindrome, ignoring case and punctuation",
    "merges two sorted arrays into one sorted array", "counts how often each word appears in a text",
    "finds the second largest number in a list", "implements binary search on a sorted array",
    "computes the nth Fibonacci number without recursion", "removes duplicates from a list while keeping the order",
    "finds the longest common prefix of a list of strings", "implements a stack with push, pop and peek",
    "converts a Roman numeral to an integer", "rotates a square matrix by 90 degrees clockwise",
    "checks whether a binary tree is height-balanced", "implements a least-recently-used cache with a fixed capacity",
    "flattens an arbitrarily nested list", "counts the vowels in a string",
    "lists all primes below n with the sieve of Eratosthenes", "sorts a list of records by two keys",
    "checks whether two strings are anagrams", "finds the maximum sum of a contiguous subarray",
    "validates that brackets in an expression are balanced", "computes the edit distance between two words",
    "returns the k most frequent elements of an array", "transposes a matrix", "detects a cycle in a linked list",
    "converts a decimal number to binary", "finds the intersection of two lists", "implements a queue with two stacks",
    "performs a breadth-first search on a graph given as an adjacency list", "parses a date string like 2024-03-09")
_SQL_TASKS = (
    "finds the five customers with the highest total order value", "counts the employees in each department",
    "lists products that have never been ordered", "finds the average salary per job title, highest first",
    "returns every order placed in the last 30 days", "finds duplicate email addresses in a users table")
_CODE_FOLLOWUPS = (
    "Add unit tests for your solution.", "Can you make it faster or use less memory?",
    "Rewrite the solution in a different programming language.", "What is the time and space complexity?",
    "Add error handling for invalid input.", "Explain the code line by line.")


def _coding(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.12:
        text = rng.choice(("Write a SQL query that {t}.", "How would you write an SQL query that {t}?")).format(
            t=rng.choice(_SQL_TASKS))
        return text, rng.choice(_CODE_FOLLOWUPS)
    lang, task = rng.choice(_LANGS), rng.choice(_CODE_TASKS)
    template = rng.choice((
        "Write a {lang} function that {task}.", "How would you write a {lang} program that {task}? Explain the code.",
        "Implement a function in {lang} that {task}. Include comments.",
        "Show me {lang} code that {task}, and give an example call.",
        "I need a {lang} function that {task}. Keep it short and readable.",
    ))
    return template.format(lang=lang, task=task), rng.choice(_CODE_FOLLOWUPS)


# ------------------------------------------------------------------------------------------ extraction

_COMPANIES = ("Northwind Labs", "Bluefin Robotics", "Cedar & Stone", "Orbita Foods", "Helix Energy", "Pinecrest Media",
              "Quanta Textiles", "Riverbend Bank", "Solace Health", "Tidewater Logistics", "Umbra Games", "Verdant Farms")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_PRODUCTS = ("wireless headphones", "coffee grinder", "hiking backpack", "smart watch", "desk lamp", "electric kettle",
             "rain jacket", "air purifier", "mechanical keyboard", "blender")
_PRAISE = ("works perfectly", "is well made", "exceeded my expectations", "is worth every penny", "is easy to use")
_COMPLAINTS = ("broke after a week", "is far too loud", "arrived scratched", "has a confusing manual",
               "stopped charging after a month")


def _company_passage(rng: random.Random) -> str:
    rows = []
    for company in rng.sample(_COMPANIES, rng.randint(2, 4)):
        rows.append(f"{company}, based in {rng.choice(CITIES)}, reported revenue of ${rng.randint(5, 900)} million "
                    f"for {rng.randint(2015, 2025)}, {rng.choice(('up', 'down'))} {rng.randint(1, 40)}% on the year "
                    f"before. Its chief executive, {rng.choice(NAMES)} {rng.choice(('Smith', 'Okafor', 'Tanaka', 'Novak', 'Garcia', 'Ivanova'))}, "
                    f"said the company would {rng.choice(('open a new office', 'hire 200 people', 'cut costs', 'enter the Asian market'))}.")
    return " ".join(rows)


def _review_passage(rng: random.Random) -> str:
    rows = []
    for i in range(rng.randint(3, 5)):
        good = rng.random() < 0.5
        rows.append(f"{i + 1}. \"This {rng.choice(_PRODUCTS)} {rng.choice(_PRAISE if good else _COMPLAINTS)}. "
                    f"{'I would buy it again.' if good else 'I asked for a refund.'}\"")
    return "\n".join(rows)


def _event_passage(rng: random.Random) -> str:
    rows = []
    for _ in range(rng.randint(3, 5)):
        rows.append(f"On {rng.randint(1, 28)} {rng.choice(_MONTHS)} {rng.randint(1990, 2025)}, {rng.choice(NAMES)} "
                    f"{rng.choice(('met', 'called', 'wrote to', 'travelled with'))} {rng.choice(NAMES)} in "
                    f"{rng.choice(CITIES)} to {rng.choice(('sign a contract', 'discuss a book', 'plan a concert', 'visit a museum'))}.")
    return " ".join(rows)


_EXTRACT_FOLLOWUPS = (
    "Return the same information as a Markdown table.", "Now give it in YAML instead.",
    "Only keep the entries that mention a number larger than 50.", "Summarise the text in one sentence.",
    "Sort the entries alphabetically and number them.", "Which entry stands out most, and why?")


def _extraction(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(3)
    if kind == 0:
        ask = rng.choice(("Extract each company's name, city, revenue and chief executive from the text below and "
                          "return them as JSON.", "From the passage below, list every company with its revenue "
                          "and whether it grew or shrank."))
        passage = _company_passage(rng)
    elif kind == 1:
        ask = rng.choice(("Rate each of the following product reviews from 1 (very negative) to 5 (very positive) and "
                          "return the ratings as a list of numbers.", "Classify each review below as positive or "
                          "negative, and name the product it is about."))
        passage = _review_passage(rng)
    else:
        ask = rng.choice(("List every date, person and city mentioned in the following text.", "Extract the events "
                          "below as JSON objects with the fields date, people, city and purpose."))
        passage = _event_passage(rng)
    return f"{ask}\n\n{passage}", rng.choice(_EXTRACT_FOLLOWUPS)


# ------------------------------------------------------------------------------------------------ stem

_STEM = (
    "photosynthesis", "Newton's third law of motion", "the greenhouse effect", "DNA replication", "entropy",
    "how vaccines train the immune system", "plate tectonics", "the Doppler effect", "overfitting in machine learning",
    "public-key cryptography", "black holes", "the water cycle", "how enzymes speed up reactions",
    "series and parallel electric circuits", "the periodic table", "nuclear fission and nuclear fusion",
    "quantum entanglement", "gene editing with CRISPR", "ocean tides", "superconductivity", "the speed of light",
    "natural selection", "how a transistor works", "acid rain", "the Big Bang theory", "antibiotic resistance",
    "how batteries store energy", "the structure of an atom", "ecosystem food webs", "how GPS finds your position",
    "the placebo effect", "how airplanes generate lift", "compound interest as exponential growth",
    "the difference between weather and climate", "how the human heart pumps blood", "semiconductors",
    "the Pythagorean theorem", "how neural networks learn", "radioactive half-life", "the nitrogen cycle")
_STEM_FOLLOWUPS = (
    "Give a concrete example from everyday life.", "Explain it again in one paragraph for a ten-year-old.",
    "What questions about it are researchers still working on?", "Write three quiz questions about it, with answers.",
    "What is a common misunderstanding about it?", "How was it discovered?")


def _topic_task(topics: tuple[str, ...], templates: tuple[str, ...], followups: tuple[str, ...]):
    """A maker that fills one of ``templates`` with one of ``topics`` and draws one of ``followups``."""
    def make(rng: random.Random) -> tuple[str, str]:
        topic = rng.choice(topics)
        return rng.choice(templates).format(t=topic), rng.choice(followups)
    return make


_stem = _topic_task(_STEM, (
    "Explain {t} in simple terms.", "What is {t}, and why does it matter?",
    "Describe {t} to a high school student, with an everyday example.",
    "What are common misconceptions about {t}?", "How would you design a simple experiment to demonstrate {t}?",
    "Give me a short, accurate overview of {t}.",
), _STEM_FOLLOWUPS)


# ------------------------------------------------------------------------------------------ humanities

_HUMANITIES = (
    "the causes of the French Revolution", "the influence of the printing press", "Stoic philosophy",
    "supply and demand", "the Renaissance", "utilitarianism", "the role of museums in society",
    "the effect of social media on politics", "inflation and interest rates", "the Silk Road", "Shakespeare's tragedies",
    "the Industrial Revolution", "Impressionist painting", "the separation of powers", "globalisation",
    "the ethics of artificial intelligence", "minimum wage laws", "the Cold War", "Confucianism", "the history of jazz",
    "the fall of the Western Roman Empire", "existentialism", "the welfare state", "colonialism and its legacy",
    "the invention of writing", "free will", "trade tariffs", "the Enlightenment", "propaganda in wartime",
    "the women's suffrage movement", "Greek tragedy", "urbanisation", "the scientific revolution", "game theory",
    "the role of religion in ancient Egypt", "the Harlem Renaissance", "behavioural economics", "the Magna Carta")
_HUMANITIES_FOLLOWUPS = (
    "Summarise your answer in three bullet points.", "What would a critic of this view say?",
    "Give an example from a different country or period.", "Write a short quiz about it, with answers.",
    "How does this connect to life today?", "Recommend two books about it and say why.")


_humanities = _topic_task(_HUMANITIES, (
    "Discuss {t}.", "What were the main consequences of {t}?", "Compare two different views of {t}.",
    "Write a short essay on {t} for a general audience.", "Why is {t} still relevant today?",
    "Explain {t} as a teacher would to a new student.",
), _HUMANITIES_FOLLOWUPS)


MAKERS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "math": _math, "coding": _coding,
    "extraction": _extraction, "stem": _stem, "humanities": _humanities,
}
VERSIONS = {1: MAKERS, 2: MAKERS_V2}  # synthesis.task_prompts_version -> the makers of each category


def category_task_prompts(count: int, seed: int = 0, *, version: int = 1, max_tries: int = 200) -> list[dict]:
    """``count`` unique prompts, spread evenly over :data:`CATEGORIES` (round robin), reproducible by ``seed``,
    made by the makers of ``version`` (:data:`VERSIONS`; 1 reproduces the shipped data's prompts).

    Each is ``{"source": "task:<category>", "prompt": str, "followup": str}``. Raises ``ValueError`` saying how
    many unique prompts a category yielded when it cannot give its share (the word lists are finite).
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if version not in VERSIONS:
        raise ValueError(f"task prompts version must be one of {sorted(VERSIONS)}, got {version!r}")
    makers = VERSIONS[version]
    rngs = {c: random.Random(f"{seed}:{c}") for c in CATEGORIES}
    seen: set[str] = set()
    near: set[bytes] = set()  # from version 2: the one-word masks of every prompt kept
    out = []
    for i in range(count):
        cat = CATEGORIES[i % len(CATEGORIES)]
        for _ in range(max_tries):
            prompt, followup = makers[cat](rngs[cat])
            masks = one_word_masks(prompt) if version > 1 else set()
            if prompt not in seen and not masks & near:
                break
        else:
            made = sum(p["source"] == f"task:{cat}" for p in out)
            raise ValueError(f"synthesis.category_prompts={count}: category {cat!r} gave only {made} unique prompts "
                             f"({max_tries} tries for the next one); ask for fewer")
        seen.add(prompt)
        near |= masks
        out.append({"source": f"task:{cat}", "prompt": prompt, "followup": followup})
    return out


def one_word_masks(text: str) -> set[bytes]:
    """A key for each word of ``text`` (as :func:`~eaglehead.datagen.chat_data.words` splits it) with that word
    masked: two texts that differ in one word only share one. Version 2 keeps no such pair ("Explain entropy" and
    "Explain friction" teach a head one thing twice); blake2b, not ``hash``, so the choice is the same in every
    process."""
    w = words(text)
    return {hashlib.blake2b(" ".join(w[:i] + ["\0"] + w[i + 1:]).encode(), digest_size=8).digest()
            for i in range(len(w))}
