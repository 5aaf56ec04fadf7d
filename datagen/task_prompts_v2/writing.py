"""Writing prompts, version 2: compose a piece, edit a given paragraph, outlines, dialogues, titles and slogans,
descriptions, constrained forms, letters with a purpose, product copy."""

from __future__ import annotations

import random

from .words import BRANDS, CITIES, COMPANIES, NAMES, PRODUCTS, join_and, pick

FORMS = (
    "short story", "poem", "blog post", "persuasive essay", "formal email", "product description", "speech",
    "letter to a friend", "news article", "diary entry", "limerick", "cover letter", "film review", "fable",
    "restaurant review", "travel guide entry", "advertisement", "thank-you note", "opinion piece", "haiku sequence",
    "social media post", "newsletter introduction", "toast for a wedding", "song chorus", "press release",
    "bedtime story", "sonnet", "radio advert script", "museum exhibit label", "eulogy for a houseplant",
    "campfire ghost story", "motivational speech", "graduation address", "podcast intro", "book jacket blurb",
    "short memoir passage", "letter to your future self", "apology note", "fairy tale", "mystery opening scene")
TOPICS = (
    "a lighthouse keeper who finds a message in a bottle", "the first warm day of spring", "learning to ride a bicycle",
    "a city without cars", "a robot that wants to paint", "the importance of sleep", "working from home",
    "a small bakery opening on a quiet street", "a weekend trip to the mountains", "a lost dog finding its way home",
    "the value of public libraries", "moving to a new country", "the last day of summer camp", "a community garden",
    "a friendship between a fox and a crow", "learning a second language", "a storm at sea", "an old pocket watch",
    "volunteering at an animal shelter", "a village festival", "a night train journey", "a grandmother's recipe book",
    "the sound of rain on a tin roof", "a student's first week at university", "a chess match between two rivals",
    "a museum that opens at midnight", "an astronaut's first morning back on Earth", "a bookshop that sells only "
    "used books", "kindness between strangers", "a winter morning in a small town", "a perfect cup of tea",
    "a power cut that lasts all evening", "the town's oldest tree being moved", "a postcard that arrives forty years "
    "late", "a family road trip gone wrong", "a dragon who is afraid of the dark", "the smell of a new notebook",
    "a cat who runs the neighbourhood", "the last video shop in the city", "a choir of retired firefighters",
    "a girl who collects thunderstorms", "a market stall that sells memories", "the first snow of the year",
    "a ferry crossing in thick fog", "a teenager's first paid job", "an inventor whose machines never work",
    "a garden on a city rooftop", "a hiking trail that is never the same twice", "a wedding in the rain",
    "a second-hand piano", "a detective who cannot remember faces", "the joy of doing nothing on a Sunday",
    "an island with one shop", "a letter from a soldier in 1916", "a bicycle courier's busiest day",
    "the day the internet stopped", "a marathon runner in last place", "a ghost who haunts a laundromat",
    "saying goodbye to a childhood home", "a festival of lanterns", "a beekeeper and her hives",
    "a city seen from a hot-air balloon", "two strangers sharing an umbrella", "an abandoned amusement park")
AUDIENCES = ("children aged eight", "a company newsletter", "college students", "retired teachers", "tourists",
             "a local newspaper", "new employees", "a parents' association", "a science club", "busy parents",
             "teenagers", "a gardening society", "first-time home buyers", "hospital volunteers", "a book club")
TONES = ("funny", "heartfelt", "formal", "optimistic", "mysterious", "playful", "serious", "nostalgic", "eerie",
         "gentle", "sarcastic", "dramatic", "calm", "hopeful", "bittersweet")
FOLLOWUPS = (
    "Now rewrite it in exactly four sentences.", "Rewrite it for a much younger audience.",
    "Make the tone more formal and remove any jokes.", "Give it a title and cut its length in half.",
    "Turn your answer into a short poem that rhymes.", "Now write a reply to it from the reader's point of view.",
    "Add a surprising twist at the end.", "Rewrite it in the first person.", "Summarise what you wrote in one "
    "sentence.",
    "Rewrite it from the point of view of a minor character.", "Make it twice as long, adding more concrete detail.",
    "Replace every adjective you can with a stronger verb or noun.", "Write three alternative opening lines for it.",
    "Which sentence is the weakest? Rewrite it.", "Change the setting to a different century and rewrite it.",
    "Now write it as if it were a news headline and a two-line summary.", "Cut every sentence longer than 15 words.",
    "Make it sound like it was written by an excited ten-year-old.", "Rewrite the ending so that it is sad.",
    "List the changes you would make in a second draft, then make them.")


def _compose(rng: random.Random) -> tuple[str, str]:
    form, topic, tone, audience = rng.choice(FORMS), rng.choice(TOPICS), rng.choice(TONES), rng.choice(AUDIENCES)
    text = rng.choice((
        "Write a {form} about {topic}.", "Compose a {tone} {form} on the theme of {topic}. Keep it under {n} words.",
        "Draft a {form} about {topic} for {audience}.", "Can you write a {tone} {form} about {topic}?",
        "I need a {form} about {topic}. Make it {tone} and suitable for {audience}.",
        "Please write me a {form} inspired by {topic}.", "Our class is collecting writing about {topic}. "
        "Contribute a {tone} {form} of about {n} words.", "Write a {form} about {topic} that ends with a question.",
        "Using the image of {topic}, write a {tone} {form}.", "For {audience}, write a {form} centred on {topic}.",
        "Give me a {form}, no longer than {n} words, about {topic}.", "Try your hand at a {tone} {form}: the "
        "subject is {topic}.", "Write a {form} about {topic} in which the word \"{w}\" appears exactly once.",
        "Tell the story of {topic} as a {form}.", "I run a small blog for {audience}. Write a {form} about {topic}.",
    )).format(form=form, topic=topic, tone=tone, audience=audience, n=rng.choice((80, 100, 150, 200, 250, 300)),
              w=rng.choice(("window", "silver", "promise", "lantern", "yesterday", "bridge", "orange")))
    return text, pick(rng, FOLLOWUPS)


# A paragraph to edit: a short note from slots, with an edit to ask for.
_NOTES = (
    "{a} and {b} met in {city} last {month} to plan the club's summer trip. They decided the group will travel by "
    "train, stay {n} nights in a guesthouse and spend one day walking along the coast. Everyone must pay a deposit "
    "by the end of the month, and anyone with questions should write to {a}.",
    "Our new {product} is finally here. It is lighter than the old model, it costs ${p}, and it comes in three "
    "colours. Customers who order before {month} will get free delivery and a two-year guarantee. We think it is "
    "the best thing we have ever made.",
    "Yesterday the library in {city} reopened after {n} months of repairs. The roof has been fixed, the children's "
    "room has new shelves and there is now a small cafe on the ground floor. The head librarian, {a}, thanked the "
    "volunteers who moved every book by hand.",
    "I am writing to tell you that the meeting on Thursday has been moved to Friday at {h} o'clock. The room is the "
    "same as before. Please bring the figures for the last quarter and your ideas for the spring campaign. {a} will "
    "take notes and send them round afterwards.",
    "When {a} started running, she could not finish a single kilometre. She kept going anyway, three mornings a "
    "week, in rain and in wind. After {n} months she entered a race in {city}, and although she finished near the "
    "back, she said it was the best day of her year.",
    "The town council of {city} has agreed to close the main street to cars every Sunday from {month}. Shop owners "
    "are divided: some expect more visitors on foot, others fear that deliveries will be harder. The plan will be "
    "reviewed after {n} weeks.",
    "Thank you for staying at our hotel. Breakfast is served from seven until ten, the pool is open until nine in "
    "the evening and towels can be borrowed at reception. If anything in your room does not work, call {a} on "
    "extension {p}. We hope you enjoy your stay in {city}.",
    "{company} has announced that it will open a second workshop in {city}. The new site will employ about {p} "
    "people and should be ready by {month} next year. A spokesperson, {b}, said the company chose the city "
    "because of its port and its technical college.")
_EDITS = (
    "Make the following paragraph more concise without losing any facts.", "Rewrite this paragraph in the past "
    "tense.", "Rewrite the paragraph below so it sounds friendly and informal.", "Turn the following text into a "
    "bulleted list of its key points.", "Make the paragraph below more formal, as if for an official report.",
    "Expand this paragraph into three paragraphs with more detail.", "Rewrite the text below for a reader who "
    "is learning English: short sentences, simple words.", "Proofread the paragraph below and correct any "
    "spelling or grammar mistakes; then list what you changed.", "Rewrite this paragraph from the point of view of "
    "someone who disagrees with it.", "Give the following paragraph a headline and a one-sentence summary.",
    "Improve the flow of this paragraph by varying the sentence length.", "Rewrite the paragraph below as a "
    "short, upbeat social media post.")


def _misspell(rng: random.Random, text: str, k: int) -> str:
    """``text`` with ``k`` words of five letters or more given two swapped letters (something to proofread)."""
    words = text.split(" ")
    long = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    for i in rng.sample(long, min(k, len(long))):
        w, j = words[i], rng.randrange(1, len(words[i]) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def _edit(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    note = rng.choice(_NOTES).format(a=a, b=b, city=rng.choice(CITIES), month=rng.choice(("March", "May", "June",
                                     "September", "October")), n=rng.randint(2, 9), p=rng.randint(20, 400),
                                     h=rng.randint(2, 5), product=rng.choice(PRODUCTS), company=rng.choice(COMPANIES))
    ask = rng.choice(_EDITS)
    if "spelling" in ask:
        note = _misspell(rng, note, rng.randint(3, 6))
    return f"{ask}\n\n{note}", pick(rng, ("Now make it half as long.", "Explain why each of your changes helps.",
                                          "Write a different version in a humorous tone."), FOLLOWUPS)


_LONG_FORMS = ("a non-fiction book", "a ten-minute talk", "a school report", "a podcast series", "a documentary",
               "a training course", "a long-form magazine article", "a novel", "a workshop for beginners",
               "a research poster", "a museum audio tour", "a six-part newsletter series")
_OUTLINE_TOPICS = (
    "the history of bicycles", "how to start a vegetable garden", "saving money as a student", "the future of "
    "public transport", "learning to cook on a budget", "ocean plastic", "the science of sleep", "running a small "
    "online shop", "raising chickens in a backyard", "the life of honeybees", "first aid for hikers", "public "
    "speaking for shy people", "the architecture of bridges", "the history of coffee", "how maps are made",
    "the rise of electric scooters", "caring for elderly parents", "volcanoes", "the art of letter writing",
    "digital privacy for families", "a year of living without a car", "building a treehouse")


def _outline(rng: random.Random) -> tuple[str, str]:
    form, topic, n = rng.choice(_LONG_FORMS), rng.choice(_OUTLINE_TOPICS), rng.randint(3, 8)
    text = rng.choice((
        "Create an outline for {form} about {topic}, with {n} main sections and two or three points under each.",
        "I'm planning {form} on {topic}. Give me a structure: section headings and a line on what each covers.",
        "Sketch a {n}-part plan for {form} about {topic}.", "What would a good table of contents look like for "
        "{form} on {topic}? Suggest {n} chapters.", "Plan {form} on {topic}: list the sections in order and the "
        "main message of each.")).format(form=form, topic=topic, n=n)
    return text, pick(rng, ("Now write the opening paragraph of the first section.", "Which section would you cut "
                            "if the piece had to be shorter, and why?", "Add a catchy title and a subtitle."),
                      FOLLOWUPS[:6])


_PAIRS = (
    ("a shop assistant", "a customer who wants to return a broken kettle"), ("a coach", "a player who was dropped "
    "from the team"), ("two neighbours", "a fence that one of them painted bright pink"), ("a time traveller",
    "a suspicious border guard"), ("a job candidate", "an interviewer who asks only strange questions"),
    ("a grandfather", "his granddaughter, who is teaching him to use a smartphone"), ("a ghost", "the new family "
    "who moved into its house"), ("two astronauts", "the last chocolate bar on the station"), ("a waiter",
    "a diner who cannot decide what to order"), ("a cat", "a dog who have to share one sunny windowsill"),
    ("a student", "a teacher, about a late essay"), ("a detective", "a witness who remembers too much"),
    ("two friends", "whether to go camping in the rain"), ("a robot", "a child who asks why the sky is blue"),
    ("a ship's captain", "a stowaway"), ("a baker", "an inspector who hates bread"))


def _dialogue(rng: random.Random) -> tuple[str, str]:
    a, b = rng.choice(_PAIRS)
    text = rng.choice((
        "Write a dialogue between {a} and {b}.", "Write a short scene, mostly dialogue, in which {a} talks to {b}.",
        "Script a {tone} conversation of about {n} lines between {a} and {b}.", "Imagine {a} meets {b}. "
        "Write their conversation.", "Write a comic sketch for two actors: {a} and {b}.")).format(
        a=a, b=b, tone=rng.choice(TONES), n=rng.choice((10, 12, 16, 20)))
    return text, pick(rng, ("Continue the scene with a third character arriving.", "Rewrite it so that the other "
                            "person wins the argument.", "Turn the dialogue into a short narrative paragraph."),
                      FOLLOWUPS[:8])


_VENTURES = (
    "a bicycle repair shop", "a vegan bakery", "a dog-walking service", "a language school for adults", "a "
    "second-hand clothing app", "a mobile library van", "a rock-climbing gym", "a podcast about local history",
    "a board-game cafe", "a solar panel installer", "a tutoring service for maths", "a zero-waste grocery store",
    "a family-run campsite", "a recycling campaign at a school", "a charity run for a children's hospital",
    "a night market in {city}", "a film festival in {city}", "a new ferry route to {city}")


def _titles(rng: random.Random) -> tuple[str, str]:
    what = rng.choice(_VENTURES).format(city=rng.choice(CITIES))
    n = rng.randint(3, 10)
    text = rng.choice((
        "Suggest {n} names for {what}.", "Come up with {n} slogans for {what}, each under eight words.",
        "I need a short, memorable tagline for {what}. Give me {n} options and say which you like best.",
        "Write {n} possible headlines for a local news story about {what}.", "Brainstorm {n} ideas for a "
        "poster campaign advertising {what}.", "Write the text for a flyer announcing {what}, with two possible "
        "headlines.")).format(n=n, what=what)
    return text, pick(rng, ("Which option would work best on a small sign, and why?", "Now make them funnier.",
                            "Translate your favourite into French and Spanish.", "Write a short radio jingle "
                            "around the best one."))


_SCENES = (
    "a railway station at dawn", "a fishing harbour after a storm", "a school playground at lunchtime",
    "a kitchen on a holiday morning", "a night bus crossing the city", "a mountain hut in a blizzard",
    "an empty theatre after the show", "a flower market in spring", "a hospital corridor at night", "a desert "
    "road at noon", "a crowded ferry deck", "a forest after rain", "a laundromat at midnight", "a football stadium "
    "before kick-off", "a grandmother's attic", "a ski lift in fog", "a rice field at sunset", "an airport gate "
    "during a long delay")


def _describe(rng: random.Random) -> tuple[str, str]:
    scene = rng.choice(_SCENES)
    text = rng.choice((
        "Describe {s} in one paragraph, so the reader can hear and smell it.", "Paint a picture in words of {s}.",
        "Write a {tone} description of {s} without using the words \"very\" or \"beautiful\".",
        "In about {n} words, describe {s} through the eyes of a child.", "Describe {s} as a nervous visitor "
        "would see it.", "Write a description of {s} in which nothing happens but the mood changes.")).format(
        s=scene, tone=rng.choice(TONES), n=rng.choice((80, 120, 150)))
    return text, pick(rng, ("Now describe the same place fifty years later.", "Rewrite it from the point of view of "
                            "an animal that lives there."), FOLLOWUPS)


def _constrained(rng: random.Random) -> tuple[str, str]:
    topic, word = rng.choice(TOPICS), rng.choice(("HOPE", "RIVER", "MUSIC", "SPRING", "FRIEND", "OCEAN", "LIGHT",
                                                  "GARDEN", "TRAVEL", "WINTER", "COFFEE", "STARS"))
    text = rng.choice((
        "Write an acrostic poem on the word {w}, with every line about {t}.", "Tell a story about {t} in exactly "
        "{n} sentences.", "Write a story about {t} using only words of one syllable.", "Write a {n}-line poem about "
        "{t} in which each line is shorter than the one before.", "Write six-word memoirs for {n} different people "
        "who lived through {t}.", "Write a story about {t} told backwards, from the end to the beginning.",
        "Write a paragraph about {t} without using the letter e.", "Write a story about {t} as a series of {n} "
        "text messages.", "Write two versions of a short paragraph about {t}: one hopeful and one gloomy.")).format(
        t=topic, w=word, n=rng.randint(4, 9))
    return text, pick(rng, ("Did you keep to the rule everywhere? Check and fix any slip.", "Now do the same with "
                            "a different rule of your choice, and say what it is."), FOLLOWUPS)


_PURPOSES = (
    ("your landlord", "asking for the heating to be repaired"), ("a hotel", "complaining about a noisy room"),
    ("a school", "explaining why your child missed three days"), ("a neighbour", "inviting them to a street party"),
    ("a former teacher", "thanking them for their help"), ("a local council", "asking for a new bus stop"),
    ("an airline", "requesting a refund for a cancelled flight"), ("a colleague", "handing over a project before "
    "your holiday"), ("a customer", "apologising for a late delivery"), ("a gym", "cancelling your membership"),
    ("a friend", "declining a wedding invitation kindly"), ("a company", "applying for a summer internship"),
    ("a newspaper", "responding to an article about cycling lanes"), ("a volunteer group", "welcoming new members"),
    ("your team", "announcing that you are leaving the company"), ("a shop", "praising an especially helpful "
    "employee"), ("a museum", "proposing a talk you could give"), ("a client", "asking for payment of an overdue "
    "invoice"))


def _letter(rng: random.Random) -> tuple[str, str]:
    to, why = rng.choice(_PURPOSES)
    kind = rng.choice(("an email", "a letter", "a short message", "a polite note"))
    text = rng.choice((
        "Write {k} to {to} {why}.", "Help me write {k} to {to} {why}. My name is {me}.", "Draft {k} to {to} {why}; "
        "keep it under {n} words.", "I have to send {k} to {to} {why}. Can you write it, firm but polite?",
        "{me} here. Please write {k} for me to {to} {why}, and suggest a subject line.")).format(
        k=kind, to=to, why=why, me=rng.choice(NAMES), n=rng.choice((100, 150, 200)))
    return text, pick(rng, ("Make it shorter and more direct.", "Now write the reply I might receive.", "Make it "
                            "warmer in tone.", "Rewrite it as a text message of two sentences."))


def _product_copy(rng: random.Random) -> tuple[str, str]:
    product, company = rng.choice(PRODUCTS), rng.choice(BRANDS)
    features = rng.sample(("weighs under a kilogram", "has a ten-year guarantee", "is made from recycled "
                           "materials", "folds flat for storage", "runs for two days on one charge", "is quiet",
                           "comes in six colours", "can be repaired at home", "is dishwasher safe", "costs less "
                           "than its rivals", "was designed with nurses", "needs no tools to set up"), 3)
    text = rng.choice((
        "Write a product description for a {p} from {c} that {f}.", "Write an online shop listing for a {p}. "
        "Selling points: it {f}.", "Write three short adverts for a {p} that {f}: one for a magazine, one for a bus "
        "shelter and one for the radio.")).format(p=product, c=company, f=join_and(features))
    return text, pick(rng, ("Now write it for a customer who is very sceptical.", "Cut it to fifty words.",
                            "Write five customer questions about it and answer them."))


KINDS = (_compose, _compose, _compose, _edit, _edit, _outline, _dialogue, _titles, _describe, _constrained,
         _letter, _product_copy)


def make(rng: random.Random) -> tuple[str, str]:
    """One writing prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
