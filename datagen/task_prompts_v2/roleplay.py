"""Roleplay prompts, version 2: a persona answering a question, a scene with the user as the other party,
practice conversations (interviews, language partners, negotiations), games run by a narrator, objects and animals
that speak, and a persona bound by a style."""

from __future__ import annotations

import random

from .words import CITIES, NAMES, PRODUCTS, pick

PERSONAS = (
    "a pirate captain", "a medieval knight", "a detective in 1920s London", "a friendly tour guide in Rome",
    "a spaceship engineer", "a grumpy chef", "a wise old wizard", "a football coach before a final",
    "a museum curator", "a time traveller from the year 3000", "a patient customer support agent",
    "a personal fitness trainer", "a nineteenth-century inventor", "a park ranger", "a Renaissance poet",
    "a first-time airline pilot", "a late-night radio host", "a marine biologist", "a children's librarian",
    "a mountain guide", "a stand-up comedian", "a nervous magician", "a village doctor in the 1800s",
    "a retired astronaut", "an ambitious mayor", "a jazz musician", "a beekeeper", "a travelling salesperson",
    "a robot butler", "a barista who loves philosophy", "a cheerful weather presenter", "a Viking trader",
    "an Antarctic explorer in 1911", "a Roman centurion on Hadrian's Wall", "a silent-film actor", "a cartographer "
    "in the age of sail", "a lighthouse keeper on a remote island", "a monk copying manuscripts", "a clockmaker",
    "a zookeeper", "a submarine cook", "a wedding planner", "a librarian in a haunted library", "a circus ringmaster",
    "a crossword puzzle setter", "a volcano scientist", "an over-excited game-show host", "a night-shift nurse",
    "a sommelier", "a carnival fortune teller", "an alien tourist visiting Earth", "a grumpy lighthouse cat",
    "a kind dragon who guards a library", "a sports commentator", "a sheepdog trainer", "a perfume maker",
    "an ice-cream van driver", "a hotel concierge", "a professional mountaineer", "a tailor", "a gardener at a "
    "royal palace", "a train conductor on a sleeper train", "a retired spy", "a theatre prompter", "a mapmaker "
    "on Mars", "a medieval town crier", "a cheesemonger", "a bridge engineer", "a puppeteer", "a chess grandmaster")
QUESTIONS = (
    "Describe your typical day.", "Give advice to someone who is just starting out in your line of work.",
    "Explain what you love most about your work.", "Introduce yourself to a group of students.",
    "Tell me about the hardest challenge you have faced.", "What should I bring if I join you for a week?",
    "Convince me to join your team.", "Describe the strangest thing that ever happened to you.",
    "What is your opinion of modern technology?", "Give me three rules you live by.",
    "How do you deal with a difficult day?", "Tell me a short story from your past.",
    "What makes a good leader, in your view?", "Describe your favourite place in the world.",
    "What do you do on your day off?", "What mistake taught you the most?", "What is in your pockets right now?",
    "Describe the tools you could not work without.", "What would you change about the world if you could?",
    "Tell me about your best friend.", "What are you most proud of?", "What do people usually get wrong about you?",
    "Plan my next holiday for me.", "What should I cook for dinner tonight?", "Teach me one useful skill.",
    "How did you get started in your profession?", "Describe the view from where you are standing.",
    "What is your greatest fear?", "Give me a pep talk before my exam tomorrow.", "Recommend me a book and say why.",
    "Tell me about a celebration you will never forget.", "What does a perfect morning look like for you?",
    "I am bored. Entertain me for a minute.", "How would you explain your job to a five-year-old?",
    "What do you think of the city of {city}?", "I'm thinking of buying a {product}. Talk me into it or out of it.")
STYLES = (
    "Answer in rhyming couplets.", "Keep every answer under 50 words.", "Use plenty of expressions from your trade.",
    "Speak very formally.", "Be as dramatic as possible.", "Answer as if you were in a great hurry.",
    "Include one piece of practical advice in every answer.", "Never admit that you are an AI.",
    "Whisper, as if you are telling a secret.", "End every answer with a question for me.")
FOLLOWUPS = (
    "Stay in character and tell me one more thing about yourself.",
    "Now answer the same question as if you were speaking to a child.",
    "What would you say to someone who disagrees with you?", "Stay in character: give me one piece of advice for "
    "tomorrow.", "Describe the same thing again, but in a much more dramatic way.", "Drop the character now and "
    "explain what you were imitating.", "Still in character: what do you think of me so far?", "A stranger "
    "interrupts us and asks who you are. What do you tell them?", "Stay in character and tell me about your family.",
    "Now, suddenly, something goes wrong nearby. How do you react?", "Sum up our conversation in your own voice.",
    "Stay in role and tell me a joke that only someone like you would make.")


def _persona(rng: random.Random) -> tuple[str, str]:
    persona = rng.choice(PERSONAS)
    question = rng.choice(QUESTIONS).format(city=rng.choice(CITIES), product=rng.choice(PRODUCTS))
    text = rng.choice((
        "Pretend you are {p}. {q}", "Act as {p} and stay in character. {q}", "You are {p}. {q}",
        "For this conversation you are {p}. {q}", "Let's play a game: you are {p} and I am a visitor. {q}",
        "Take on the voice of {p}. {q}", "I'd like you to answer as {p} would. {q}", "Speak to me as {p}. {s} {q}",
        "From now on, you are {p}. {s} First question: {q}", "Role-play {p} talking to a curious reporter. {q}",
    )).format(p=persona, q=question, s=rng.choice(STYLES))
    return text, pick(rng, FOLLOWUPS)


# (your role, my role, the situation, the first thing I say)
SCENES = (
    ("a hotel receptionist", "a guest", "my booking has disappeared and it is midnight", "Hello, I booked a room "
     "weeks ago but you say there is nothing under my name."),
    ("a shop assistant in an electronics store", "a customer", "the {product} I bought last week has stopped "
     "working", "Hi, I bought this here and it already broke."),
    ("a market trader in {city}", "a tourist who wants a discount", "we are haggling over a hand-woven rug",
     "How much for this rug? It looks a bit worn."),
    ("a ship's captain", "a passenger", "a storm is coming and I am frightened", "Captain, are we going to be safe?"),
    ("a librarian", "a student", "I have an essay due tomorrow and no idea where to start", "Can you help me find "
     "something about the history of {city}?"),
    ("a vet", "a worried pet owner", "my {pet} has stopped eating", "My {pet} hasn't touched its food for two days."),
    ("a driving instructor", "a nervous learner", "it is my first lesson on a busy road", "I'm not sure I'm ready "
     "for this."),
    ("a travel agent", "a customer", "I want a cheap week somewhere warm in {month}", "What can you offer me for "
     "under 800 euros?"),
    ("a landlord", "a tenant", "the boiler has broken for the third time", "The hot water is gone again."),
    ("an air traffic controller", "a pilot of a small plane", "my radio is crackling and I am low on fuel",
     "Tower, this is {name}, requesting priority landing."),
    ("a restaurant owner", "a food critic", "I have just been served a cold soup", "Excuse me, this soup is cold."),
    ("a police officer", "a tourist who has lost a wallet", "we are at the station in {city}", "Someone took my "
     "wallet on the tram, I think."),
    ("a head teacher", "a parent", "my child was sent home for wearing the wrong shoes", "I'd like to talk about "
     "what happened this morning."),
    ("a tech support agent", "a customer", "my laptop will not turn on before an important presentation", "Please, "
     "my presentation is in an hour and the screen is black."),
    ("a museum guard", "a visitor", "I have accidentally set off an alarm", "Sorry! I only leaned on the rope."),
    ("a tailor", "a groom", "the wedding is tomorrow and the suit is too small", "It won't button. What do we do?"),
    ("a bookshop owner", "a customer", "I want a present for a friend but only remember that the cover was blue",
     "I'm looking for a book. I think it had a blue cover?"),
    ("a mountain hut warden", "a hiker", "the weather is turning and I want to go on to the summit", "I'll be fine, "
     "I just need to know which path is quickest."),
    ("a bank clerk", "a customer", "my card was swallowed by the cash machine outside", "Your machine just ate my "
     "card!"),
    ("a campsite manager", "a camper", "my tent flooded in the night", "Good morning. My tent is a swimming pool."),
    ("a flight attendant", "a nervous first-time flyer", "we are about to take off", "Is that noise normal?"),
    ("a nursery teacher", "a parent", "it is my child's first day and I do not want to leave", "Maybe I should "
     "stay for the morning?"),
    ("a plumber", "a home owner", "water is dripping through the kitchen ceiling", "Thank goodness you're here. "
     "Look at this!"),
    ("an estate agent", "a buyer", "the flat in {city} looks nothing like the photos", "Are these the same rooms "
     "as in the advert?"),
    ("a zoo keeper", "a school pupil on a trip", "the penguins are about to be fed", "Why do penguins not fly?"),
    ("a cafe owner", "a regular customer", "I have just announced that I am moving to {city}", "So this is my last "
     "coffee here."),
)


def _scene(rng: random.Random) -> tuple[str, str]:
    you, me, situation, line = rng.choice(SCENES)
    fill = dict(product=rng.choice(PRODUCTS), city=rng.choice(CITIES), pet=rng.choice(("dog", "cat", "rabbit",
                "parrot", "tortoise")), month=rng.choice(("March", "June", "November", "December")),
                name=rng.choice(NAMES))
    you, situation, line = you.format(**fill), situation.format(**fill), line.format(**fill)
    text = rng.choice((
        "Let's act out a scene. You are {you} and I am {me}; {situation}. I start: \"{line}\"",
        "Role-play with me: you play {you}, I play {me}. The situation: {situation}. My first line: \"{line}\"",
        "You are {you}. I'm {me}, and {situation}. Reply in character to this: \"{line}\"",
        "Improvise a scene where you are {you} talking to me, {me}. Background: {situation}. \"{line}\"",
    )).format(you=you, me=me, situation=situation, line=line)
    return text, pick(rng, ("I reply: \"That is not good enough. I want to speak to someone else.\"", "I reply: "
                            "\"Thank you, that helps a lot. One more thing, though...\"", "I reply: \"Can you put "
                            "that in writing for me?\"", "I go quiet and look upset. What do you say?"),
                      FOLLOWUPS[:3])


_PRACTICE = (
    "a job interview for a {job} position: you are the interviewer, ask me one question at a time",
    "a conversation in simple {lang}: you are a cafe waiter in {city} and I am ordering, correct my mistakes gently",
    "a salary negotiation: you are my manager and I am asking for a raise", "a debate about whether homework should "
    "be banned: you argue against it", "a press conference: you are a minister who must defend a new bicycle tax",
    "a first meeting with a new neighbour: you are friendly but very talkative", "a viva for my thesis on {topic}: "
    "you are a strict examiner", "a phone call to book a table: you are a restaurant that is almost full",
    "a sales call: you try to sell me a {product} and I keep raising objections", "a parent-teacher meeting: you "
    "are the teacher of my child {name}, who is bright but chatty", "a medical appointment in {lang}: you are the "
    "doctor and I describe a sore knee", "a radio interview: you are the host and I am a local baker who won a prize",
    "asking for directions in {lang}: you are a passer-by in {city} who speaks only {lang}", "a difficult "
    "conversation with a flatmate who never washes up: you are the flatmate", "a pitch to investors for my "
    "idea, a {product} rental service: you are a sceptical investor", "checking in at a hotel in {lang}: you are "
    "the receptionist", "a customer complaint call: you are an angry customer and I work for the airline",
    "a wedding speech rehearsal: you are the bride's sister listening and giving notes", "a doctoral admissions "
    "interview about {topic}: you are on the panel", "a negotiation over a used car: you are the seller and want "
    "at least 6000 euros")


def _practice(rng: random.Random) -> tuple[str, str]:
    what = rng.choice(_PRACTICE).format(
        job=rng.choice(("junior accountant", "museum guide", "nurse", "software tester", "chef", "bus driver")),
        lang=rng.choice(("French", "Spanish", "German", "Italian", "Portuguese")), city=rng.choice(CITIES),
        topic=rng.choice(("urban beekeeping", "medieval trade routes", "solar cookers", "children's sleep")),
        product=rng.choice(PRODUCTS), name=rng.choice(NAMES))
    text = rng.choice(("I want to practise {w}. Begin.", "Help me rehearse {w}. Start when you are ready.",
                       "Let's practise {w}. Open the conversation.", "Can we do a practice run of {w}?",
                       "Role-play {w}. Stay in role until I say stop.", "I'm nervous about {w}. Can we act it "
                       "out? You go first.")).format(w=what)
    return text, pick(rng, ("I answer: \"Sorry, could you say that again more slowly?\" Carry on.",
                            "Stop the role-play and give me feedback on how I did.", "Make it harder for me now.",
                            "Repeat your last line, but be more difficult.", "I give a short, nervous answer. How "
                            "do you respond, and what tip would you give me afterwards?"))


_GAMES = (
    "a text adventure set in an abandoned space station", "a mystery in a country house where the cook has "
    "vanished", "a text adventure in a city of floating islands", "a fantasy quest to return a stolen bell to a "
    "mountain temple", "an escape room in a Victorian clock shop", "a survival story on a desert island",
    "a detective game in rainy {city}", "a treasure hunt in an old museum after closing time", "a heist in a "
    "casino on a riverboat", "a ghost story in a snowed-in mountain inn", "an expedition to find a lost city in "
    "the jungle", "a time-loop mystery on a commuter train", "a wizard school's first-year exam", "a post-apocalyptic "
    "trek across a flooded {city}", "a pirate voyage to an uncharted island", "a murder mystery at a village fete")


def _game(rng: random.Random) -> tuple[str, str]:
    game = rng.choice(_GAMES).format(city=rng.choice(CITIES))
    text = rng.choice((
        "Be the narrator of {g}. Describe where I am and give me three choices.", "Let's play {g}. You describe "
        "the scene, I say what I do. My character is called {n}.", "Run {g} for me. Keep each turn short and end "
        "with a question.", "You are the game master of {g}. My character, {n}, has a {tool}. Begin.",
        "Start {g}. I want to make choices, so stop at each decision.")).format(
        g=game, n=rng.choice(NAMES), tool=rng.choice(("lantern", "map", "rope", "compass", "pocket knife")))
    return text, pick(rng, ("I open the nearest door carefully.", "I look around for anything useful.", "I shout "
                            "to see if anyone else is here.", "I go back the way I came."))


_THINGS = (
    "an old city bus", "a river that has flowed through {city} for a thousand years", "a teapot in a busy cafe",
    "a library book that has been borrowed 500 times", "a lighthouse", "a grand piano in a concert hall",
    "a pair of worn-out hiking boots", "a weather balloon", "a sandcastle as the tide comes in", "a bicycle left "
    "in a shed for ten years", "a house cat watching birds", "a goldfish in a school classroom", "a migrating goose",
    "a snowman on the first warm day", "a satellite that is about to be switched off", "a street lamp",
    "a coin that has passed through a thousand hands", "a suitcase on its fiftieth trip", "a bridge over the "
    "river in {city}", "a mountain that has watched climbers for centuries", "an umbrella forgotten on a train",
    "a garden gnome", "the last page of a diary", "a traffic light at a busy crossing", "a school bell", "a kite "
    "caught in a tree", "a fridge magnet from {city}", "a sourdough starter that is older than its baker")


def _thing(rng: random.Random) -> tuple[str, str]:
    thing = rng.choice(_THINGS).format(city=rng.choice(CITIES))
    text = rng.choice(("Imagine you are {t}. Tell me about your life.", "Speak as {t} would: what have you seen?",
                       "You are {t}. Describe your best and worst day.", "As {t}, give advice to the humans "
                       "around you.", "Become {t} for a moment and answer me: what do you want most?", "Write "
                       "your reply as {t} to a child who asks how you are feeling today.")).format(t=thing)
    return text, pick(rng, ("What are you hoping for next year?", "Tell me a secret that only you know.",
                            "Describe me, the person talking to you, from where you stand."))


KINDS = (_persona, _persona, _persona, _scene, _scene, _practice, _game, _thing)


def make(rng: random.Random) -> tuple[str, str]:
    """One roleplay prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
