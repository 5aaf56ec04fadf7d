"""Math prompts, version 2: problems generated from random numbers. Equations, percentages, geometry, probability,
sequences, word problems, unit conversion, number theory, statistics, calculus, combinatorics. Equations are built
from their answers (a quadratic from two integer roots), so the numbers stay friendly."""

from __future__ import annotations

import random

from .words import CITIES, ITEMS, NAMES, pick

FOLLOWUPS = (
    "Check your answer with a different method.", "Now solve the same problem with every number doubled.",
    "Explain each step to a student who finds this topic hard.", "Write a similar problem for me to practise.",
    "Can you express the answer in another form, such as a decimal or a percentage?",
    "Where could someone make a mistake in this problem?", "Show how to estimate the answer quickly in your head.",
    "Turn this into a multiple-choice question with three plausible wrong answers.", "Which formula did you use, "
    "and why does it work?", "Solve it again, but round every intermediate result to one decimal place. How much "
    "does the answer change?")


def _coef(rng: random.Random, lo: int = 2, hi: int = 12) -> int:
    return rng.choice([k for k in range(-hi, hi + 1) if abs(k) >= lo])


def _signed(k: int) -> str:
    return f"+ {k}" if k >= 0 else f"- {-k}"


def _algebra(rng: random.Random) -> str:
    x, a, b, c = rng.randint(-9, 15), rng.randint(2, 12), rng.randint(1, 40), _coef(rng)
    r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
    form = rng.randrange(7)
    if form == 0:
        return f"Solve for x: {a}x {_signed(b)} = {a * x + b}."
    if form == 1:
        return f"Solve {a}(x {_signed(b)}) = {a * (x + b)} and check your answer."
    if form == 2:
        return f"Find x if {a}x {_signed(b)} = {c}x {_signed(a * x + b - c * x)}." if a != c else \
            f"Solve for y: {a}y - {b} = {a * x - b}."
    if form == 3:
        return (f"Solve the quadratic equation x^2 {_signed(-(r1 + r2))}x {_signed(r1 * r2)} = 0 by factoring, "
                f"then check with the quadratic formula.")
    if form == 4:
        y = rng.randint(-8, 12)
        return (f"Solve the system: {a}x + {b}y = {a * x + b * y} and x {_signed(c)}y = {x + c * y}. "
                f"Use {rng.choice(('substitution', 'elimination', 'any method you like'))}.")
    if form == 5:
        return f"For which values of x is {a}x {_signed(b)} < {a * x + b}? Write the answer as an interval."
    return (f"Simplify ({a}x^2 {_signed(b)}x) - ({c}x^2 {_signed(_coef(rng))}x {_signed(b)}) and evaluate it at "
            f"x = {r1}.")


def _percent(rng: random.Random) -> str:
    p, q, n = rng.choice((5, 8, 10, 12, 15, 20, 25, 30, 40, 60)), rng.choice((5, 10, 15, 20, 25)), rng.randint(20, 900)
    item, who = rng.choice(("jacket", "bicycle", "laptop", "sofa", "concert ticket", "lawn mower")), rng.choice(NAMES)
    return rng.choice((
        f"What is {p}% of {n}?", f"A {item} costs ${n}. Its price rises by {p}% and then falls by {p}%. Is it back "
        f"to ${n}? What does it cost now?", f"{who} paid ${n} for a {item} after a {p}% discount. What was the price "
        f"before the discount?", f"A town's population grew from {n * 10} to {n * 10 + p * n}. By what percentage "
        f"did it grow?", f"A shop takes {p}% off and then a further {q}% off the reduced price. Is that the same as "
        f"{p + q}% off? Work it out for a {item} that costs ${n}.", f"{who} scored {min(n, 95) // 2 + p // 5} out of "
        f"{min(n, 95) // 2 + 20} in a test. What percentage is that, to one decimal place?",
        f"Sales tax is {q}%. What is the price before tax of an item that costs ${n}.{rng.randint(10, 99)} with tax?",
        f"A {item} loses {q}% of its value every year. It cost ${n * 10} new. What is it worth after "
        f"{rng.randint(2, 6)} years?"))


def _geometry(rng: random.Random) -> str:
    a, b, r, h = rng.randint(3, 30), rng.randint(2, 25), rng.randint(2, 15), rng.randint(3, 40)
    k = rng.choice(((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (6, 8, 10), (9, 12, 15)))
    return rng.choice((
        f"A circle has radius {r} cm. Find its circumference and its area, using pi = 3.14.",
        f"A right triangle has legs of {k[0]} m and {k[1]} m. How long is the hypotenuse, and what is the area?",
        f"A cylindrical tank is {h} dm tall with a radius of {r} dm. How many litres does it hold?",
        f"Find the volume and surface area of a cube with edges of {a} cm.", f"A trapezoid has parallel sides of "
        f"{a} cm and {a + b} cm and a height of {r} cm. What is its area?", f"What is the sum of the interior angles "
        f"of a polygon with {r + 3} sides, and how big is each angle if it is regular?", f"Find the distance between "
        f"the points ({a}, {b}) and ({a + k[0]}, {b - k[1]}), and the midpoint of the segment joining them.",
        f"A line passes through ({b}, {r}) and ({b + a}, {r + h}). What is its slope, and what is its equation?",
        f"A rectangular garden is {a} m by {b} m. A path {rng.choice((1, 2))} m wide runs all the way round the "
        f"outside. What is the area of the path?", f"A sphere has a diameter of {2 * r} cm. What is its volume?",
        f"A cone is {h} cm tall with a base radius of {r} cm. Find its volume and its slant height.",
        f"A ladder {k[2]} m long leans against a wall with its foot {k[0]} m from the wall. How high up the wall "
        f"does it reach?", f"Two angles of a triangle are {a + 20} degrees and {b + 30} degrees. What is the third, "
        f"and what kind of triangle is it?"))


def _probability(rng: random.Random) -> str:
    r, b, g, n = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 6), rng.randint(2, 6)
    return rng.choice((
        f"A bag holds {r} red, {b} blue and {g} green marbles. Two are drawn without replacement. What is the "
        f"probability that both are red?", f"A fair coin is tossed {n + 2} times. What is the probability of "
        f"exactly {n} heads?", f"Two fair dice are thrown. What is the probability that the product of the numbers "
        f"is even? And that at least one shows a {rng.randint(1, 6)}?", f"A card is drawn from a standard deck of "
        f"52. What is the probability that it is a {rng.choice(('heart', 'king', 'face card', 'red ace'))}?",
        f"A quiz has {n + 4} true-or-false questions. If you guess every answer, what is the probability of getting "
        f"all of them right? At least one right?", f"In a class of {r + b + 20}, {r + 10} students play chess, "
        f"{b + 8} play football and {min(r, b) + 3} play both. A student is picked at random. What is the chance "
        f"they play neither?", f"A spinner has {n + 3} equal sections numbered 1 to {n + 3}. It is spun twice. What "
        f"is the probability the two numbers add up to {n + 3}?", f"The chance of rain is {r * 10}% on Saturday and "
        f"{b * 10}% on Sunday, independently. What is the probability of a dry weekend?"))


def _sequences(rng: random.Random) -> str:
    a, d, n, q = rng.randint(1, 20), rng.randint(2, 9), rng.randint(8, 40), rng.choice((2, 3, 4, 5))
    return rng.choice((
        f"An arithmetic sequence starts at {a} with a common difference of {d}. What is its {n}th term, and what "
        f"is the sum of the first {n} terms?", f"A geometric sequence starts {a}, {a * q}, {a * q * q}, ... Find the "
        f"{n % 10 + 5}th term and the sum of the first {n % 10 + 5} terms.", f"Find the sum of all multiples of "
        f"{d} between 1 and {n * 25}.", f"{rng.choice(NAMES)} saves ${a} in the first week and ${d} more each week "
        f"than the week before. How much has been saved after {n} weeks?", f"Does the series {a} + {a}/{q} + "
        f"{a}/{q * q} + ... converge? If so, to what?", f"Find the sum of the first {n} odd numbers and explain the "
        f"pattern you notice."))


def _word_problem(rng: random.Random) -> str:
    a, b, n, who, who2 = rng.randint(2, 12), rng.randint(3, 15), rng.randint(20, 120), *rng.sample(NAMES, 2)
    c1, c2 = rng.sample(CITIES, 2)
    return rng.choice((
        f"One pipe fills a tank in {a} hours and another in {b} hours. How long do they take together?",
        f"{who} can paint a fence in {a} hours; {who2} takes {b} hours. Working together, how long will it take?",
        f"A train leaves {c1} at {n} km/h. An hour later a second train leaves on the same track at {n + 30} km/h. "
        f"How long after the second train leaves does it catch up?", f"{who} and {who2} share ${n * 10} in the "
        f"ratio {a}:{b}. How much does each receive?", f"How many litres of a {a * 5}% salt solution must be mixed "
        f"with {b} litres of a {a * 5 + 20}% solution to make a {a * 5 + 10}% solution?", f"A recipe for {a} people "
        f"needs {b * 50} g of flour and {a + 1} eggs. How much of each is needed for {a + b} people?",
        f"{who} is {a + 20} and {who2} is {b}. In how many years will {who} be exactly twice as old as {who2}, if "
        f"ever?", f"A cyclist rides {n} km at {b + 10} km/h and comes back at {b + 15} km/h. What is the average "
        f"speed for the whole trip?", f"Tickets cost ${a} for children and ${b + a} for adults. {n} tickets were sold "
        f"for ${n * a + 10 * b}. How many adult tickets were sold?", f"{who} buys {a} {rng.choice(ITEMS)} at ${b} "
        f"each and sells them all for ${a * b + n}. What is the profit as a percentage of the cost?",
        f"A phone plan costs ${b} a month plus ${a / 10:.2f} per gigabyte. Another costs ${b + 12} a month with no "
        f"extra charge. At how many gigabytes do they cost the same?"))


def _units(rng: random.Random) -> str:
    n, t = rng.randint(3, 500), rng.randint(-20, 45)
    return rng.choice((
        f"Convert {n} km to miles and {n} miles to kilometres.", f"Convert {t} degrees Celsius to Fahrenheit, and "
        f"explain the formula.", f"A car does {rng.randint(5, 9)} litres per 100 km. What is that in miles per "
        f"(US) gallon?", f"How many seconds are there in {rng.randint(2, 30)} days? And in a year of 365 days?",
        f"A runner finishes {rng.choice((5, 10, 21.1, 42.2))} km in {rng.randint(20, 240)} minutes. What is the "
        f"average pace in minutes per kilometre and the speed in km/h?", f"Convert {n} kg to pounds and {n} "
        f"pounds to kilograms.", f"A room is {rng.randint(3, 9)} m by {rng.randint(3, 9)} m. What is its floor area "
        f"in square feet?", f"Water flows at {rng.randint(2, 40)} litres per minute. How many cubic metres is that "
        f"per day?", f"Convert {n} km/h to metres per second and to knots.", f"A recipe from the US needs "
        f"{rng.randint(1, 4)} cups of flour and an oven at {rng.choice((325, 350, 375, 400, 425))} F. What are these "
        f"in grams and Celsius?", f"How many litres are in {n} cubic feet?", f"A plot of land is {n} acres. How "
        f"many hectares and square metres is that?", f"A screen is {rng.randint(13, 85)} inches across the "
        f"diagonal. How many centimetres is that?", f"Light takes about 8.3 minutes to reach us from the Sun. "
        f"Use that to estimate the distance in kilometres and in miles."))


def _number_theory(rng: random.Random) -> str:
    a, b, m = rng.randint(40, 2000), rng.randint(12, 360), rng.randint(3, 12)
    return rng.choice((
        f"Write {a} as a product of prime factors.", f"Find the greatest common divisor of {a} and {b} with "
        f"Euclid's algorithm, showing each step.", f"What is the remainder when {a}^{m} is divided by "
        f"{rng.choice((3, 5, 7, 9, 11))}? Explain without computing the whole power.", f"How many positive "
        f"divisors does {a} have? List them.", f"Is {a * 2 + 1} prime? Explain how you check.", f"What is the "
        f"smallest number that leaves a remainder of 1 when divided by {m}, by {m + 1} and by {m + 2}?",
        f"Write {a} in binary and in hexadecimal.", f"Find the last digit of {m}^{a}.", f"What is the least common "
        f"multiple of {m}, {m + 4} and {b}?", f"Find all two-digit numbers that are divisible by {m} and whose "
        f"digits add up to {m + 3}.", f"Show that the product of any {m % 3 + 2} consecutive integers is divisible "
        f"by {2 if m % 3 == 0 else 6}.", f"What is {a} in base {m % 5 + 3}?", f"Simplify the fraction "
        f"{a * m}/{b * m} and write it as a mixed number."))


def _statistics(rng: random.Random) -> str:
    data = [rng.randint(1, 60) for _ in range(rng.randint(6, 11))]
    shown = ", ".join(map(str, data))
    return rng.choice((
        f"Find the mean, median, mode and range of: {shown}.", f"Compute the standard deviation of these values: "
        f"{shown}. Show the steps.", f"Here are the minutes {rng.choice(NAMES)} spent on homework each day: "
        f"{shown}. Which is a better summary, the mean or the median, and why?", f"A teacher records these scores: "
        f"{shown}. A late score of {rng.randint(0, 60)} is added. How do the mean and the median change?",
        f"Draw a stem-and-leaf plot for {shown} and describe the shape of the data.",
        f"Find the quartiles and the interquartile range of {shown}. Are there any outliers?"))


def _calculus(rng: random.Random) -> str:
    a, b, n, k = rng.randint(2, 9), rng.randint(1, 12), rng.randint(2, 5), rng.randint(1, 4)
    return rng.choice((
        f"Differentiate f(x) = {a}x^{n} {_signed(-b)}x^{n - 1} + {k} with respect to x.", f"Find the derivative of "
        f"g(x) = x^{n} * e^({k}x).", f"Differentiate h(x) = sin({a}x) / x.", f"Find the maximum and minimum of "
        f"f(x) = x^3 - {3 * a * a}x on the interval [-{a + 1}, {a + 1}].", f"Evaluate the integral of ({a}x^{n} "
        f"{_signed(b)}) dx from 0 to {k}.", f"Find the area between y = x^2 and y = {a}x.", f"Compute the limit of "
        f"(x^2 - {a * a}) / (x - {a}) as x approaches {a}.", f"Find the equation of the tangent line to y = "
        f"{a}x^2 {_signed(-b)}x at x = {k}.", f"A ball is thrown upward; its height is "
        f"h(t) = {b + 1} + {a * 5}t - 5t^2 metres. When does it reach its highest point, and how high is it?",
        f"Integrate x * e^({k}x) by parts."))


def _combinatorics(rng: random.Random) -> str:
    n, k = rng.randint(6, 14), rng.randint(2, 5)
    word = rng.choice(("LETTER", "BANANA", "PEPPER", "GARDEN", "PUZZLE", "CASTLE", "SEASON", "RIVER", "COFFEE"))
    return rng.choice((
        f"In how many ways can the letters of the word {word} be arranged?", f"A committee of {k} is chosen from "
        f"{n} people. How many committees are possible? How many if two of the people refuse to serve together?",
        f"How many {k}-digit PIN codes have no repeated digit?", f"In how many ways can {n} runners finish first, "
        f"second and third?", f"A pizza shop offers {n} toppings. How many pizzas with exactly {k} different "
        f"toppings can you order?", f"How many paths are there from the bottom-left to the top-right corner of a "
        f"{k} by {n - k} grid, moving only right or up?", f"How many ways are there to seat {k + 3} people around "
        f"a round table, if rotations count as the same?", f"A password has {k + 2} lowercase letters. How many "
        f"passwords are possible, and how many have no repeated letter?", f"In how many ways can {n} identical "
        f"sweets be shared among {k} children so that each gets at least one?", f"How many diagonals does a "
        f"polygon with {n} sides have?", f"From a class of {n + 10} students, in how many ways can you choose a "
        f"captain, a vice-captain and a team of {k} more players?"))


KINDS = (_algebra, _algebra, _percent, _percent, _geometry, _geometry, _probability, _probability, _sequences,
         _word_problem, _word_problem, _units, _number_theory, _statistics, _calculus, _calculus, _combinatorics)
# follow-ups that fit one kind of problem only, drawn beside the general ones
KIND_FOLLOWUPS = {
    _algebra: ("Plot or sketch the equation and show where the solution appears.", "Substitute your answer back "
               "in to prove it is right."),
    _percent: ("Why can't you simply add or subtract the percentages here?", "Redo it for a price ten times as "
               "high. Does the answer scale?"),
    _geometry: ("Describe the figure in words, with every length labelled.", "What happens to the answer if every "
                "length doubles?"),
    _probability: ("Write a short Python simulation that checks your answer.", "List the sample space, or a "
                   "representative part of it."),
    _sequences: ("Derive the formula you used for the sum.", "What is the first term that is larger than 1000?"),
    _word_problem: ("Set the problem up as an equation first, then solve it.", "Change one number so that the "
                    "answer becomes a whole number, and solve it again."),
    _units: ("Which conversion factors did you use, and where do they come from?", "Give a quick way to do this "
             "conversion in your head."),
    _number_theory: ("Prove that your method always works.", "Is there a faster way for much larger numbers?"),
    _statistics: ("Which of these measures would an outlier change most?", "Present the data as a simple text "
                  "chart."),
    _calculus: ("Check the result by differentiating or integrating back.", "Explain the meaning of the result "
                "on a graph."),
    _combinatorics: ("Check your formula on a smaller case by listing everything.", "Why does order matter, or "
                     "not, here?"),
}


def make(rng: random.Random) -> tuple[str, str]:
    """One math problem (now and then with a preamble) and its follow-up."""
    kind = rng.choice(KINDS)
    text = kind(rng)
    if rng.random() < 0.25:
        text = rng.choice(("Please solve this step by step. ", "Quick question: ", "I'm stuck on my homework. ",
                           "Show your working: ", "Can you help with this? ")) + text
    return text, pick(rng, FOLLOWUPS, KIND_FOLLOWUPS[kind])
