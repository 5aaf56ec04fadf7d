"""STEM prompts, version 2: explain a concept, compare two, walk through a process, what-if scenarios, worked
physics and chemistry calculations from random numbers, designs and experiments, estimates."""

from __future__ import annotations

import random

from .words import CITIES, NAMES, pick

TOPICS = (
    "the greenhouse effect", "DNA replication", "entropy", "how vaccines train the immune system", "plate tectonics",
    "the Doppler effect", "overfitting in machine learning", "public-key cryptography", "black holes",
    "the water cycle", "how enzymes speed up reactions", "the periodic table", "ocean tides", "superconductivity",
    "natural selection", "how a transistor works", "acid rain", "antibiotic resistance", "how batteries store "
    "energy", "the structure of an atom", "ecosystem food webs", "how GPS finds your position", "the placebo "
    "effect", "how airplanes generate lift", "the difference between weather and climate", "how the human heart "
    "pumps blood", "semiconductors", "how neural networks learn", "radioactive half-life", "the nitrogen cycle",
    "the carbon cycle", "how the eye focuses light", "chemical equilibrium", "the immune system's memory",
    "how earthquakes are measured", "the life cycle of a star", "the electromagnetic spectrum", "how a refrigerator "
    "moves heat", "Bernoulli's principle", "friction", "the conservation of momentum", "buoyancy", "centripetal "
    "force", "how lenses form images", "static electricity", "electromagnetic induction", "how a nuclear reactor "
    "is controlled", "the Krebs cycle", "mitosis and meiosis", "how neurons send signals", "the gut microbiome",
    "how hormones regulate blood sugar", "blood types", "how the kidneys filter blood", "the ozone layer",
    "ocean acidification", "how clouds form", "the jet stream", "El Nino", "how rivers shape valleys", "the rock "
    "cycle", "how fossils form", "carbon dating", "the expansion of the universe", "exoplanet detection",
    "the seasons on Earth", "phases of the Moon", "how rockets reach orbit", "the speed of sound", "resonance",
    "how a microwave oven heats food", "how solar panels turn light into electricity", "wind turbines", "how "
    "hydrogen fuel cells work", "the internet's packet switching", "how hash tables work", "the halting problem",
    "Big O notation", "how compression algorithms shrink files", "error-correcting codes", "how a CPU executes "
    "instructions", "how databases use indexes", "recursion", "prime numbers in cryptography", "probability "
    "distributions", "the central limit theorem", "Bayes' theorem", "exponential growth", "fractals",
    "the concept of a derivative", "what an integral measures", "complex numbers", "vectors", "matrices and what "
    "they transform", "how bridges carry loads", "how concrete gets its strength", "reinforced concrete", "how "
    "a suspension bridge works", "how water is made safe to drink", "how soap removes grease", "catalytic "
    "converters", "how plastics are made", "polymers", "pH and buffers", "oxidation and reduction", "isotopes",
    "how a vaccine trial is designed", "how the body regulates temperature", "sleep cycles", "how muscles "
    "contract", "photosynthesis in algae", "pollination", "invasive species", "biodiversity", "the tragedy of the "
    "commons in fisheries", "how tsunamis form", "volcanic eruptions", "desalination", "3D printing", "lasers",
    "fibre-optic cables", "quantum tunnelling", "the uncertainty principle", "dark matter", "gravitational waves",
    "how a camera sensor records an image", "noise-cancelling headphones", "how touchscreens detect a finger",
    "the half-adder circuit", "pseudo-random number generators", "how search engines rank pages")
TEMPLATES = (  # fit a noun ("entropy") and a process ("how a transistor works") alike
    "Explain {t} in simple terms.", "Describe {t} to a high school student, with an everyday example.", "What are "
    "common misconceptions about {t}?", "How would you design a simple experiment to demonstrate {t}?", "Give me a "
    "short, accurate overview of {t}.", "I'm a {who} with no science background. Help me understand {t}.",
    "Summarise {t} in five bullet points.", "Explain {t} using an analogy, then say where the analogy breaks down.",
    "What are the key equations or quantities behind {t}?", "How would you explain {t} to a curious eight-year-old?",
    "What did scientists believe before they understood {t}?", "Create a one-page study sheet on {t}.", "What is "
    "the single most important idea behind {t}?", "Explain {t} and give a worked example.", "Teach me {t} in three "
    "short steps, from basic to advanced.", "Walk me through {t}, one stage at a time.", "Write a short script for "
    "a two-minute science video about {t}.")
NOUN_TEMPLATES = ("What is {t}, and why does it matter?", "Write a short encyclopedia entry on {t}.", "What are "
                  "the practical uses of {t}?", "Where in my home or town could I see {t} at work?")
FOLLOWUPS = (
    "Give a concrete example from everyday life.", "Explain it again in one paragraph for a ten-year-old.",
    "What questions about it are researchers still working on?", "Write three quiz questions about it, with answers.",
    "What is a common misunderstanding about it?", "How was it discovered?", "What assumptions does your "
    "explanation make?", "Can you add a simple diagram described in words?", "How does this connect to something "
    "I could see at home?", "Point out the part of your answer that is most simplified, and make it precise.",
    "Which technology depends on this most?", "What experiment first showed this, and what did it measure?",
    "Give the same explanation with one equation and the units of each quantity.", "Write a multiple-choice "
    "question that catches the most common mistake.", "How would you check that a student really understood it?")


def _concept(rng: random.Random) -> tuple[str, str]:
    topic = rng.choice(TOPICS)
    templates = TEMPLATES if topic.startswith(("how ", "the difference")) else TEMPLATES + NOUN_TEMPLATES
    who = rng.choice(("nurse", "lawyer", "painter", "retired bus driver", "history teacher", "chef", "musician"))
    return rng.choice(templates).format(t=topic, who=who), pick(rng, FOLLOWUPS)


_PAIRS = (
    ("a virus", "a bacterium"), ("mass", "weight"), ("speed", "velocity"), ("heat", "temperature"), ("nuclear "
    "fission", "nuclear fusion"), ("AC", "DC electricity"), ("mitosis", "meiosis"), ("an element", "a compound"),
    ("a meteor", "a meteorite"), ("weather", "climate"), ("RAM", "storage"), ("an algorithm", "a heuristic"),
    ("accuracy", "precision"), ("correlation", "causation"), ("innate", "adaptive immunity"), ("ionic",
    "covalent bonds"), ("a planet", "a dwarf planet"), ("potential", "kinetic energy"), ("series", "parallel "
    "circuits"), ("DNA", "RNA"), ("renewable", "non-renewable energy"), ("a hurricane", "a tornado"), ("lossy",
    "lossless compression"), ("supervised", "unsupervised learning"), ("stress", "strain in materials"),
    ("a comet", "an asteroid"), ("diffusion", "osmosis"), ("an acid", "a base"), ("refraction", "diffraction"),
    ("a median", "a mean"))


def _compare(rng: random.Random) -> tuple[str, str]:
    a, b = rng.choice(_PAIRS)
    text = rng.choice(("What is the difference between {a} and {b}?", "Compare {a} and {b} in a table.",
                       "People often mix up {a} and {b}. Clear it up for me.", "How are {a} and {b} alike, and how "
                       "do they differ?")).format(a=a, b=b)
    return text, pick(rng, ("Give an example where mixing them up leads to a real mistake.", "Which of the two "
                            "matters more in daily life?"), FOLLOWUPS[:5])


_WHAT_IFS = (
    "the Moon suddenly disappeared", "Earth's axis had no tilt", "the speed of light were 100 km/h", "all the ice "
    "on Greenland melted", "humans could photosynthesise", "the Earth spun twice as fast", "bees went extinct",
    "we stopped using antibiotics tomorrow", "gravity were 10% stronger", "the Sun were a red dwarf", "there were "
    "no friction", "water did not expand when it froze", "a large volcano erupted in Iceland this year", "the "
    "internet's undersea cables were cut", "every car in {city} became electric overnight", "you dropped a ball "
    "down a tunnel through the centre of the Earth", "the Earth had two moons", "plants could not fix carbon "
    "any more", "oxygen made up 35% of the air", "a day on Earth lasted 30 hours", "the ocean were fresh water",
    "we could see infrared light", "copper became as rare as gold", "the Gulf Stream stopped", "mosquitoes "
    "disappeared", "the sea level rose by one metre", "electricity stopped working for a week", "a city the size "
    "of {city} were built on the Moon", "humans lived to 150 on average", "the Sun went dark for one minute")


def _what_if(rng: random.Random) -> tuple[str, str]:
    case = rng.choice(_WHAT_IFS).format(city=rng.choice(CITIES))
    text = rng.choice(("What would happen if {c}?", "Scientifically speaking, what would follow if {c}?",
                       "Imagine {c}. Walk me through the consequences, from the first minutes to the long "
                       "term.", "A science-fiction writer asks: what if {c}? Keep the physics and biology "
                       "honest.", "Suppose {c}. Which sciences would help us predict what comes next, and what "
                       "would they say?")).format(c=case)
    return text, pick(rng, ("Which of these effects are you least sure about, and why?",), FOLLOWUPS[:5])


def _calculation(rng: random.Random) -> str:
    m, v, h, r = rng.randint(2, 90), rng.randint(2, 40), rng.randint(2, 80), rng.randint(2, 60)
    return rng.choice((
        f"A {m} kg cart is pushed with a force of {v * 5} N. What is its acceleration, ignoring friction?",
        f"How much kinetic energy does a {m} kg object moving at {v} m/s have?", f"A stone is dropped from {h} m. "
        f"How long does it take to hit the ground, and how fast is it going? Ignore air resistance.",
        f"A {v} V battery drives a current through a {r} ohm resistor. What current flows, and how much power is "
        f"dissipated?", f"Two resistors of {r} and {h} ohms are connected in parallel. What is the combined "
        f"resistance?", f"A sample has a half-life of {rng.randint(2, 30)} days. What fraction remains after "
        f"{rng.randint(30, 120)} days?", f"How many moles are in {m * 3} g of water? How many molecules?",
        f"A wave has a frequency of {v * 10} Hz and a wavelength of {r / 10} m. What is its speed?",
        f"How much energy does it take to heat {m / 10:.1f} litres of water from {rng.randint(5, 25)} C to "
        f"boiling? Give the answer in kJ and in kWh.", f"A car brakes from {v + 50} km/h to rest in {h} m. What "
        f"is its average deceleration?", f"What is the pressure {h} m under the surface of fresh water?",
        f"A {m * 10} W lamp is left on for {r % 16 + 1} hours a day. How many kWh does it use in a year, and what "
        f"does that cost at 0.{rng.randint(10, 40)} euros per kWh?", f"Balance the equation for burning propane "
        f"(C3H8) in oxygen and find how much CO2 comes from {m * 10} g of propane.", f"What is the pH of a "
        f"{rng.choice((0.1, 0.01, 0.001, 0.05))} M solution of hydrochloric acid?",
        f"A satellite orbits {h * 100} km above Earth's surface. Estimate its orbital period."))


def _worked(rng: random.Random) -> tuple[str, str]:
    text = _calculation(rng)
    if rng.random() < 0.3:
        text = rng.choice(("Physics homework: ", "Show the formula you use. ", "Work this out step by step: ")) + text
    return text, pick(rng, ("What assumptions did you make, and how would the answer change without them?",
                            "Explain the physics behind the formula you used.", "Check the units in every step."))


_DESIGNS = (
    "a water filter for a village with no electricity", "a greenhouse heated only by the sun", "a bridge of "
    "drinking straws that holds a 1 kg weight", "a device that warns hikers of lightning", "an egg-drop container "
    "for a fall of {h} m", "a way to keep vaccines cold without a fridge", "a rainwater collection system for a "
    "school in {city}", "a quieter classroom fan", "a system to measure air quality on a bicycle", "a test of "
    "which paper towel absorbs most water", "an experiment to find how temperature affects yeast", "a study "
    "of whether music helps plants grow", "a small wind turbine for a balcony", "a cheap seismometer for a "
    "school", "a way to cool a bus shelter on hot days", "a pendulum clock from household items", "an "
    "experiment to compare how fast ice melts on different surfaces", "a cheap way to measure the speed of sound "
    "at school", "a bird feeder that squirrels cannot raid", "a solar oven for {city}'s summer", "a test of "
    "whether bottled water tastes different from tap water", "a sensor that tells plants' owners when to water",
    "a study of how screen time affects sleep in teenagers", "a battery made from lemons that lights an LED",
    "an app that counts traffic from a phone camera")


def _design(rng: random.Random) -> tuple[str, str]:
    what = rng.choice(_DESIGNS).format(h=rng.randint(3, 20), city=rng.choice(CITIES))
    text = rng.choice(("How would you design {w}? List the main parts and the science behind each.", "Plan {w}: "
                       "materials, steps and how you would test it.", "{n} wants to build {w}. What should they "
                       "consider?", "Propose {w} and point out its weak points.", "Our school science fair is "
                       "next month. Help me plan {w}, including a hypothesis and controls.")).format(
        w=what, n=rng.choice(NAMES))
    return text, pick(rng, ("What are the key disadvantages of your design?", "Estimate what it would cost.",
                            "How would you measure whether it works?"))


_ESTIMATES = (
    "how many litres of water a person drinks in a lifetime", "how much the atmosphere weighs", "how many grains of "
    "sand fit in a bucket", "how many times a heart beats in a year", "how much energy a city of a million people "
    "uses in a day", "how many piano tuners work in {city}", "how far light travels in a nanosecond", "how many "
    "trees it takes to offset one transatlantic flight", "how much data a phone sends in a month of video calls",
    "how many breaths you take in a lifetime", "how long it would take to walk around the equator",
    "how many words a person speaks in a year", "how much paper a school uses in a term", "how many footballs "
    "would fill a classroom", "how much rain falls on {city} in a year, in tonnes", "how many people are in the "
    "air on planes right now", "how much electricity all the phones in a country use to charge", "how many "
    "cells there are in a human body", "how much food an elephant eats in its lifetime", "how many bricks a "
    "three-bedroom house needs", "how long a 1 kWh battery could run a laptop", "how much CO2 a tree absorbs "
    "in its life")


def _estimate(rng: random.Random) -> tuple[str, str]:
    what = rng.choice(_ESTIMATES).format(city=rng.choice(CITIES))
    text = rng.choice(("Estimate {w}. Show your assumptions.", "Make a back-of-the-envelope estimate of {w}.",
                       "Give me an order-of-magnitude estimate: {w}. Reason it out step by step.", "A Fermi "
                       "problem: estimate {w}, and say how far off you might be.")).format(w=what)
    return text, pick(rng, ("Which assumption matters most? Redo the estimate with it halved.",), FOLLOWUPS[:4])


KINDS = (_concept, _concept, _concept, _concept, _compare, _what_if, _worked, _worked, _design, _estimate)


def make(rng: random.Random) -> tuple[str, str]:
    """One STEM prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
