"""Reasoning prompts, version 2: puzzles generated from random names and numbers. Orderings, seatings and schedules
get clues added until exactly one arrangement fits them (checked by trying all), as do the truth-teller puzzles
and who-owns-what grids, so every puzzle has one answer; calendar facts come from ``datetime``."""

from __future__ import annotations

import datetime
import itertools
import random

from .words import DAYS, ITEMS, MONTHS, NAMES, PETS, join_and, pick

FOLLOWUPS = (
    "Explain how you reached that answer, step by step.", "Are you sure? Check your reasoning once more.",
    "Can you think of another way to reach the same answer?", "Make up a similar puzzle and solve it.",
    "Explain the answer to someone who has never seen this kind of puzzle.", "Which clue was the most useful, "
    "and which could be left out?", "Draw the situation as a small table or diagram in text.", "What would change "
    "if one of the clues were removed?", "How confident are you, and where could the reasoning go wrong?")

# positions framed as days, seats, floors or finishing places: (the n labels' source, what each clue says)
_FRAMES = {
    "days": dict(setup="{people} each have one {thing} this week, on different days from {first} to {last}.",
                 things=("dentist appointment", "piano lesson", "presentation", "turn to cook dinner", "shift at "
                         "the library", "job interview"), labels=DAYS[:5], ask="Which day is each person's?",
                 before="{x}'s is earlier in the week than {y}'s", after="{x}'s is the day after {y}'s",
                 next="{x} and {y} have theirs on consecutive days", apart="{x} and {y} are not on consecutive days",
                 at="{x}'s is on {label}", not_at="{x}'s is not on {label}"),
    "seats": dict(setup="{people} sit in a row of {n} chairs at the {thing}, numbered 1 to {n} from the left.",
                  things=("cinema", "theatre", "concert", "school assembly", "wedding", "lecture"),
                  labels=tuple(f"chair {i}" for i in range(1, 6)), ask="Who sits where?",
                  before="{x} sits somewhere to the left of {y}", after="{x} sits directly to the right of {y}",
                  next="{x} sits next to {y}", apart="{x} does not sit next to {y}", at="{x} is in {label}",
                  not_at="{x} is not in {label}"),
    "floors": dict(setup="{people} live in a {thing} with {n} floors, one person on each floor, floor 1 lowest.",
                   things=("narrow townhouse", "tower block", "converted lighthouse", "student hall"),
                   labels=tuple(f"floor {i}" for i in range(1, 6)), ask="Who lives on which floor?",
                   before="{x} lives below {y}", after="{x} lives on the floor directly above {y}",
                   next="{x} and {y} live on neighbouring floors", apart="{x} and {y} are not on neighbouring floors",
                   at="{x} lives on {label}", not_at="{x} does not live on {label}"),
    "race": dict(setup="{people} ran a {thing} and there were no ties.", things=("fun run", "sack race", "swimming "
                 "race", "cycling sprint", "spelling bee final"), labels=("first", "second", "third", "fourth",
                 "fifth"), ask="In what order did they finish?", before="{x} finished ahead of {y}",
                 after="{x} finished right behind {y}", next="{x} and {y} finished one place apart",
                 apart="{x} and {y} did not finish one place apart", at="{x} finished {label}",
                 not_at="{x} did not finish {label}"),
}


def _fits(clue: tuple, pos: dict) -> bool:
    kind, x, y = clue
    return {"before": lambda: pos[x] < pos[y], "after": lambda: pos[x] == pos[y] + 1,
            "next": lambda: abs(pos[x] - pos[y]) == 1, "apart": lambda: abs(pos[x] - pos[y]) != 1,
            "at": lambda: pos[x] == y, "not_at": lambda: pos[x] != y}[kind]()


def _arrangement(rng: random.Random) -> tuple[str, str]:
    frame = _FRAMES[rng.choice(tuple(_FRAMES))]
    n = rng.randint(3, 5)
    people = rng.sample(NAMES, n)
    truth = dict(zip(people, rng.sample(range(n), n)))
    pairs = [(x, y) for x in people for y in people if x != y]
    candidates = [c for c in [(k, x, y) for k in ("before", "after", "next", "apart") for x, y in pairs]
                  + [(k, x, i) for k in ("at", "not_at", "not_at") for x in people for i in range(n)]
                  if _fits(c, truth)]
    rng.shuffle(candidates)
    worlds = [dict(zip(people, p)) for p in itertools.permutations(range(n))]
    clues = []
    for clue in candidates:
        if len(worlds) == 1:
            break
        left = [w for w in worlds if _fits(clue, w)]
        if len(left) < len(worlds):
            clues.append(clue)
            worlds = left
    labels = frame["labels"]
    said = [frame[k].format(x=x, y=y if k not in ("at", "not_at") else "", label=labels[y] if k in ("at", "not_at")
                            else "") for k, x, y in clues]
    setup = frame["setup"].format(people=join_and(people), thing=rng.choice(frame["things"]), n=n,
                                  first=labels[0], last=labels[n - 1])
    text = f"{setup} " + " ".join(f"{s[0].upper()}{s[1:]}." for s in said) + f" {frame['ask']}"
    if rng.random() < 0.3:
        text = "Solve this logic puzzle and explain each step. " + text
    return text, pick(rng, FOLLOWUPS)


_STATEMENTS = (
    ("{o} is a {good}.", lambda w, s, o: w[o]), ("{o} is a {bad}.", lambda w, s, o: not w[o]),
    ("{o} and I are both {good}s.", lambda w, s, o: w[s] and w[o]),
    ("{o} and I are the same kind.", lambda w, s, o: w[s] == w[o]),
    ("{o} and I are different kinds.", lambda w, s, o: w[s] != w[o]),
    ("At least one of us is a {bad}.", lambda w, s, o: not all(w.values())),
    ("Exactly one of us is a {good}.", lambda w, s, o: sum(w.values()) == 1),
    ("All of us are {bad}s.", lambda w, s, o: not any(w.values())),
    ("{o} would say that I am a {bad}.", lambda w, s, o: (not w[s]) == w[o]))


def _truth_tellers(rng: random.Random) -> tuple[str, str]:
    good, bad = rng.choice((("knight", "knave"), ("truth-teller", "liar"), ("Sunner", "Mooner"),
                            ("member of the Honest Guild", "member of the Tricksters' Guild")))
    setting = rng.choice(("On an island, every inhabitant is either a {g}, who always tells the truth, or a {b}, "
                          "who always lies.", "In a certain village each person is a {g} (never lies) or a {b} "
                          "(never tells the truth).", "You meet some travellers. Each is a {g}, whose every "
                          "statement is true, or a {b}, whose every statement is false."))
    for _ in range(50):
        people = rng.sample(NAMES, rng.randint(2, 3))
        truth = {p: rng.random() < 0.5 for p in people}
        said = {}
        for s in people:
            o = rng.choice([p for p in people if p != s])
            fitting = [t for t, f in _STATEMENTS if f(truth, s, o) == truth[s]]
            said[s] = (rng.choice(fitting), o)
        checks = {t: f for t, f in _STATEMENTS}
        worlds = [dict(zip(people, v)) for v in itertools.product((True, False), repeat=len(people))]
        fits = [w for w in worlds if all(checks[t](w, s, o) == w[s] for s, (t, o) in said.items())]
        if len(fits) == 1:
            break
    lines = " ".join(f"{s} says: \"{t.format(o=o, good=good, bad=bad)}\"" for s, (t, o) in said.items())
    ask = rng.choice(("Who is a {g} and who is a {b}?", "What is each of them?", "Can you tell who is lying?"))
    text = f"{setting.format(g=good, b=bad)} {lines} {ask.format(g=good, b=bad)}"
    return text, pick(rng, ("What if {p} had said the opposite?".format(p=people[0]),), FOLLOWUPS)


_WOMEN = ("Alice", "Carmen", "Elena", "Grace", "Ines", "Kira", "Maya", "Olga", "Rosa", "Tara", "Vera", "Zoe", "Aisha",
          "Chloe", "Esther", "Gita", "Ingrid", "Keiko", "Lucia", "Nadia", "Priya", "Sofia", "Yara", "Freya", "Hana")
_MEN = ("Bob", "David", "Farid", "Hiro", "Jamal", "Liam", "Noah", "Pedro", "Sam", "Umar", "Wei", "Yusuf", "Bruno",
        "Dmitri", "Felix", "Hassan", "Jonas", "Mateo", "Oscar", "Rafael", "Tomas", "Victor", "Kofi", "Marco", "Ivo")
# a step from one person to the next: (word if the next is a woman, word if a man)
_STEPS = (("mother", "father"), ("daughter", "son"), ("sister", "brother"), ("wife", "husband"),
          ("aunt", "uncle"), ("grandmother", "grandfather"), ("niece", "nephew"), ("cousin", "cousin"))


def _family(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(3, 5)
    people, steps = [], []
    for i in range(n):
        woman = rng.random() < 0.5
        people.append(rng.choice([p for p in (_WOMEN if woman else _MEN) if p not in people]))
        if i:
            step = rng.choice(_STEPS[:4] if i < n - 1 or n < 4 else _STEPS)
            if steps and steps[-1] == step == _STEPS[3]:  # a spouse's spouse: back to the start
                step = _STEPS[2]
            steps.append(step)
    said = [f"{people[i + 1]} is {people[i]}'s {step[0] if people[i + 1] in _WOMEN else step[1]}."
            for i, step in enumerate(steps)]
    text = rng.choice(("{s} How is {a} related to {b}?", "Here are some facts about a family. {s} What is {b} to "
                       "{a}? Explain.", "{s} Draw the family tree and say how {a} and {b} are related.")).format(
        s=" ".join(said), a=people[0], b=people[-1])
    return text, pick(rng, ("Is more than one answer possible? Which facts would settle it?",), FOLLOWUPS)


def _calendar(rng: random.Random) -> tuple[str, str]:
    day = datetime.date(rng.randint(1990, 2035), 1, 1) + datetime.timedelta(days=rng.randrange(365))
    later = day + datetime.timedelta(days=rng.randint(20, 400))
    d = f"{day.day} {MONTHS[day.month - 1]} {day.year}"
    d2 = f"{later.day} {MONTHS[later.month - 1]} {later.year}"
    text = rng.choice((
        f"{d} was a {DAYS[day.weekday()]}. What day of the week is {d2}? Show your working.",
        f"How many days are there from {d} to {d2}, counting neither end? Take care with leap years.",
        f"If {d} is a {DAYS[day.weekday()]}, on what weekday does the same date fall one year later?",
        f"A library book borrowed on {d} is due back {rng.choice((14, 21, 28, 30))} days later. On what date and "
        f"weekday is it due, given that {d} is a {DAYS[day.weekday()]}?",
        f"The first day of {MONTHS[day.month - 1]} {day.year} is a {DAYS[day.replace(day=1).weekday()]}. On which "
        f"dates in that month does {rng.choice(DAYS)} fall?",
        f"Is {day.year} a leap year? Explain the rule and say what day of the year {d} is.",
        f"{rng.choice(NAMES)} takes a pill every {rng.randint(3, 9)} days, starting on {d} "
        f"({DAYS[day.weekday()]}). When is the first time it falls on a {rng.choice(DAYS)}?"))
    return text, pick(rng, FOLLOWUPS)


_SYLLOGISMS = (("cats", "mammals", "pets"), ("roses", "flowers", "red things"), ("squares", "rectangles", "large "
               "shapes"), ("violinists", "musicians", "teachers"), ("sparrows", "birds", "fast animals"),
               ("poets", "writers", "gardeners"), ("oaks", "trees", "old plants"), ("salmon", "fish", "river dwellers"),
               ("trains", "vehicles", "electric machines"), ("surgeons", "doctors", "early risers"),
               ("tulips", "bulbs", "imports"), ("laptops", "computers", "portable things"))
_FORMS = ("All {a} are {b}. Some {b} are {c}. Does it follow that some {a} are {c}?",
          "All {a} are {b}. No {b} are {c}. Can any {a} be {c}?", "Some {a} are {c}. All {a} are {b}. Must some {b} "
          "be {c}?", "No {c} are {b}. All {a} are {b}. What can we say about {a} and {c}?", "All {a} are {b}. "
          "{name} owns something that is not one of the {b}. Could it be one of the {a}?",
          "If every {a_one} is one of the {b}, and this object is one of the {b}, is it necessarily one of the {a}?")


def _syllogism(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.choice(_SYLLOGISMS)
    form = rng.choice(_FORMS).format(a=a, b=b, c=c, name=rng.choice(NAMES), a_one=a.rstrip("s"))
    text = rng.choice(("{f} Explain why or why not.", "Logic question: {f}", "{f} Answer yes, no or cannot tell, "
                       "with a reason.", "Is this reasoning valid? {f}")).format(f=form)
    return text, pick(rng, ("Draw a Venn diagram in words for it.", "Give a real-life argument with the same form "
                            "that leads someone astray."), FOLLOWUPS)


_GROUPS = (("apple", "pear", "plum", "cherry", "mango", "fig"), ("violin", "cello", "harp", "guitar", "banjo"),
           ("Mercury", "Venus", "Mars", "Jupiter", "Saturn", "Neptune"), ("iron", "copper", "zinc", "silver", "tin"),
           ("sparrow", "robin", "eagle", "owl", "heron"), ("oak", "birch", "maple", "willow", "pine"),
           ("hammer", "saw", "chisel", "wrench", "pliers"), ("Nile", "Danube", "Amazon", "Mekong", "Volga"),
           ("square", "triangle", "hexagon", "pentagon", "rectangle"), ("whale", "dolphin", "seal", "otter"),
           ("rugby", "tennis", "hockey", "cricket", "golf"), ("sonnet", "haiku", "limerick", "ode", "ballad"),
           ("carrot", "turnip", "radish", "beetroot", "parsnip"), ("bus", "tram", "ferry", "train", "taxi"))


def _odd_one_out(rng: random.Random) -> tuple[str, str]:
    g1, g2 = rng.sample(_GROUPS, 2)
    words = rng.sample(g1, rng.randint(3, 4)) + [rng.choice(g2)]
    rng.shuffle(words)
    text = rng.choice(("Find the odd one out: {w}. Say what the others have in common.", "Which of these is "
                       "unlike the rest, and why? {w}", "Group these words and spot the one that doesn't fit: "
                       "{w}.")).format(w=", ".join(words))
    return text, pick(rng, ("Add two more words that fit with the rest.", "Could a different word be the odd one out "
                            "for another reason?"), FOLLOWUPS[:3])


def _sequence(rng: random.Random) -> tuple[str, str]:
    a, d, k = rng.randint(1, 9), rng.randint(2, 9), rng.randint(4, 6)
    rule = rng.randrange(6)
    terms = ([a + d * i for i in range(k)] if rule == 0 else [a * 2 ** i for i in range(k)] if rule == 1 else
             [(i + a) ** 2 for i in range(k)] if rule == 2 else [a + d * i * (i + 1) // 2 for i in range(k)]
             if rule == 3 else [a * 3 ** i - i for i in range(k)] if rule == 4 else None)
    if terms is None:
        terms = [a, d]
        while len(terms) < k + 1:
            terms.append(terms[-1] + terms[-2])
    text = rng.choice(("What number comes next: {s}, ...? Explain the rule.", "Find the pattern in {s} and give "
                       "the next two terms.", "A sequence starts {s}. What is its rule, and what is the tenth term?"
                       )).format(s=", ".join(map(str, terms)))
    return text, pick(rng, ("Write a formula for the n-th term.", "Make up a harder sequence like it for me."),
                      FOLLOWUPS[:3])


def _walk(rng: random.Random) -> tuple[str, str]:
    moves = [f"{rng.randint(1, 9) * 100} metres {'forward' if i == 0 else rng.choice(('forward', 'on'))}"
             for i in range(rng.randint(3, 5))]
    turns = [rng.choice(("turns left", "turns right", "turns around")) for _ in moves[1:]]
    path = f"walks {moves[0]}" + "".join(f", {t} and walks {m}" for t, m in zip(turns, moves[1:]))
    who, face = rng.choice(NAMES), rng.choice(("north", "south", "east", "west"))
    text = (f"{who} starts facing {face}, {path}. Which way is {who} facing now, and how far is {who} from the start "
            f"in a straight line?")
    return text, pick(rng, FOLLOWUPS[:4])


def _grid(rng: random.Random) -> tuple[str, str]:
    people, pets = rng.sample(NAMES, 3), rng.sample(PETS, 3)
    colours = rng.sample(("red", "blue", "green", "yellow", "white"), 3)
    truth = (dict(zip(people, pets)), dict(zip(people, colours)))
    facts = [(f"{p} owns the {q}", lambda w, p=p, q=q: w[0][p] == q) for p in people for q in pets] + \
        [(f"{p} does not own the {q}", lambda w, p=p, q=q: w[0][p] != q) for p in people for q in pets] + \
        [(f"{p} does not live in the {c} house", lambda w, p=p, c=c: w[1][p] != c) for p in people for c in colours] + \
        [(f"the {q} lives in the {c} house", lambda w, q=q, c=c: any(w[0][p] == q and w[1][p] == c for p in people))
         for q in pets for c in colours]
    facts = [f for f in facts if f[1](truth)]
    rng.shuffle(facts)
    worlds = [(dict(zip(people, a)), dict(zip(people, b))) for a in itertools.permutations(pets)
              for b in itertools.permutations(colours)]
    said = []
    for fact, check in facts:
        if len(worlds) > 1 and any(not check(w) for w in worlds):
            said.append(fact)
            worlds = [w for w in worlds if check(w)]
    text = (f"{join_and(people)} live in three houses, painted {join_and(colours)}, and each keeps one pet: a "
            f"{pets[0]}, a {pets[1]} or a {pets[2]}. " + " ".join(f"{s[0].upper()}{s[1:]}." for s in said) +
            " Who lives where, and with which pet?")
    return text, pick(rng, FOLLOWUPS)


def _counting(rng: random.Random) -> tuple[str, str]:
    n, r, b, g = rng.randint(5, 30), rng.randint(3, 12), rng.randint(3, 12), rng.randint(2, 9)
    who = rng.choice(NAMES)
    text = rng.choice((
        f"At a party of {n} people everyone shakes hands with everyone else once. How many handshakes are there?",
        f"A drawer holds {r} red, {b} blue and {g} green socks, mixed up. In the dark, how many must you take to be "
        f"sure of a matching pair? And to be sure of two blue ones?",
        f"In a league of {n} teams every team plays every other team twice. How many matches are played?",
        f"You have {n} coins that look identical; one is slightly heavier. What is the fewest weighings on a balance "
        f"scale that always finds it?", f"How many squares of any size are there on a {g + 2} by {g + 2} grid?",
        f"{who} had {3 * (r + 7)} {rng.choice(ITEMS)}, gave away a third of them, then received {b} more "
        f"from a friend and lost {g}. How many are left? Explain each step.",
        f"A snail climbs {g + 1} metres up a wall each day and slides back {g} metres each night. The wall is "
        f"{n} metres high. On which day does it reach the top?", f"A clock gains {g} minutes every hour. It is set "
        f"right at noon. What time does it show when the real time is {r % 6 + 5}:00 in the evening?",
        f"A book has {n * 10} pages. How many times is the digit 7 printed in the page numbers?",
        f"{n} people stand in a circle, numbered 1 to {n}. Going round from person 1, every second person leaves "
        f"the circle until one remains. What is the number of the last person?", f"A bat and a ball cost "
        f"${b + 1}.{g}0 together. The bat costs ${b} more than the ball. How much is the ball?", f"You have a "
        f"{g + 2}-litre jug, a {g + 5}-litre jug and a tap. How can you measure exactly {g + 1 if g % 2 else g + 3} "
        f"litres?", f"{who} reads {r} pages on the first day and {b} more pages each day than the day before. "
        f"After how many days has {who} read at least {n * 20} pages in total?"))
    return text, pick(rng, FOLLOWUPS[:5])


KINDS = (_arrangement, _arrangement, _arrangement, _truth_tellers, _truth_tellers, _family, _family, _calendar,
         _calendar, _syllogism, _odd_one_out, _sequence, _walk, _grid, _grid, _counting)


def make(rng: random.Random) -> tuple[str, str]:
    """One reasoning prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
