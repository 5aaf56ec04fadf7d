"""Word lists more than one category of the version-2 task prompts draws from: people, places, things, dates.

All of it written for this project (no benchmark text). Every list here and in the category modules is part of what
a seed gives: editing one changes version 2's prompts, which a data directory written from them cannot mix with (the
tests pin a fingerprint of them), so a larger change is a version 3.
"""

from __future__ import annotations

import random
import re

NAMES = (
    "Alice", "Bob", "Carmen", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam", "Maya",
    "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wei", "Yusuf", "Zoe", "Aisha", "Bruno",
    "Chloe", "Dmitri", "Esther", "Felix", "Gita", "Hassan", "Ingrid", "Jonas", "Keiko", "Lucia", "Mateo", "Nadia",
    "Oscar", "Priya", "Rafael", "Sofia", "Tomas", "Ulla", "Victor", "Wanda", "Xavier", "Yara", "Zeynep", "Amara",
    "Bilal", "Celine", "Dario", "Emeka", "Freya", "Goran", "Hana", "Ivo", "Julia", "Kofi", "Lena", "Marco", "Nina")
SURNAMES = (
    "Smith", "Okafor", "Tanaka", "Novak", "Garcia", "Ivanova", "Kowalski", "Mensah", "Lindqvist", "Haddad", "Rossi",
    "Nguyen", "Fischer", "Silva", "Murphy", "Kaur", "Dubois", "Petrov", "Yilmaz", "Costa", "Schmidt", "Abebe",
    "Moreau", "Park", "Oliveira", "Jansen", "Horvat", "Castillo", "Brennan", "Sato")
CITIES = (
    "Lisbon", "Nairobi", "Osaka", "Toronto", "Krakow", "Lima", "Melbourne", "Hanoi", "Dublin", "Accra", "Austin",
    "Bergen", "Cordoba", "Tbilisi", "Pune", "Leeds", "Quito", "Tallinn", "Porto", "Kigali", "Sapporo", "Winnipeg",
    "Gdansk", "Cusco", "Adelaide", "Da Nang", "Galway", "Kumasi", "Boise", "Stavanger", "Valencia", "Yerevan",
    "Mysore", "Glasgow", "Cuenca", "Tartu", "Ljubljana", "Mombasa", "Fukuoka", "Halifax")
COMPANIES = (
    "Northwind Labs", "Bluefin Robotics", "Cedar & Stone", "Orbita Foods", "Helix Energy", "Pinecrest Media",
    "Quanta Textiles", "Riverbend Bank", "Solace Health", "Tidewater Logistics", "Umbra Games", "Verdant Farms",
    "Amberline Motors", "Brightpath Learning", "Copperleaf Coffee", "Driftwood Outdoor", "Eastgate Pharma",
    "Foxglove Studios", "Granite Peak Insurance", "Harbourlight Hotels", "Ironbark Tools", "Juniper Software",
    "Kestrel Aviation", "Lumen Optics", "Meadowsweet Dairy", "Nimbus Cloud", "Oakhaven Furniture", "Plover Travel")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ITEMS = ("apples", "marbles", "stamps", "pencils", "books", "coins", "stickers", "cookies", "tickets", "shells",
         "postcards", "buttons", "seashells", "trading cards", "oranges", "eggs", "candles", "bottles of juice")
PRODUCTS = (
    "wireless headphones", "coffee grinder", "hiking backpack", "smart watch", "desk lamp", "electric kettle",
    "rain jacket", "air purifier", "mechanical keyboard", "blender", "standing desk", "robot vacuum", "yoga mat",
    "e-reader", "camping stove", "portable speaker", "office chair", "water filter jug", "rice cooker",
    "bike helmet", "travel pillow", "webcam", "garden hose", "toaster", "running watch", "baby monitor")
BRANDS = ("Kettlewell", "Norrland", "Brightloom", "Peakform", "Aurelle", "Tovi", "Quillon", "Marlowe & Finch",
          "Solvik", "Haverly", "Zephra", "Nook & Hollow", "Lumio", "Fennick", "Oda Home", "Ridgeback")
FOODS = ("soup", "pasta", "curry", "salad", "bread", "pancakes", "dumplings", "stew", "risotto", "tacos", "lasagne",
         "fried rice", "lentil soup", "banana bread", "omelette", "flatbread")
PETS = ("cat", "dog", "parrot", "rabbit", "hamster", "goldfish", "tortoise", "ferret")


def pick(rng: random.Random, *pools: tuple[str, ...]) -> str:
    """One item of the pools joined: a kind's own follow-ups and its category's general ones, say."""
    return rng.choice([item for pool in pools for item in pool])


def person(rng: random.Random) -> str:
    """A full name such as "Priya Novak"."""
    return f"{rng.choice(NAMES)} {rng.choice(SURNAMES)}"


_ARTICLE = re.compile(r"\b([Aa]n?) ([\w'-]+)")


def _sounds_like_vowel(word: str) -> bool:
    if re.match(r"[A-Z]{2,}", word):  # an acronym, read letter by letter: an SQL query, a URL
        return word[0] in "AEFHILMNORSX"
    if word[0].isdigit():  # an 8-part plan, an 11-year-old, a 12-line poem
        return word[0] == "8" or re.match(r"1[18](?!\d)", word) is not None
    low = word.lower()
    return (low[0] in "aeiou" and re.match(r"one|once|uni|use|usu|uti|ur|eu", low) is None) or \
        low.startswith(("hour", "honest", "heir"))


def fix_articles(text: str) -> str:
    """``text`` with "a" and "an" matched to the sound of the next word (a slot filled with "electric kettle" after
    "a"), outside code fences, where "a" may be a variable."""
    def fix(m: re.Match) -> str:
        article = "an" if _sounds_like_vowel(m.group(2)) else "a"
        return f"{article.capitalize() if m.group(1)[0] == 'A' else article} {m.group(2)}"
    parts = text.split("```")
    return "```".join(_ARTICLE.sub(fix, p) if i % 2 == 0 else p for i, p in enumerate(parts))


def join_and(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
