"""Humanities prompts, version 2: history, philosophy, economics, politics, law, art, music, literature, religion,
language and society; explain, compare, debate a motion, dilemmas, counterfactual history, a school of thought on a
modern question, lesson plans, and small economics problems with random numbers."""

from __future__ import annotations

import random

from .words import CITIES, NAMES, pick

# Topics in four groups, each with the templates that fit it ("the consequences of" an event, not of an idea).
EVENTS = (
    "the French Revolution", "the Industrial Revolution", "the Cold War", "the fall of the Western Roman Empire",
    "the women's suffrage movement", "the scientific revolution", "the Reformation", "the Meiji Restoration",
    "the Haitian Revolution", "the abolition of slavery in the British Empire", "the partition of India",
    "the Marshall Plan", "the founding of the United Nations", "the Black Death", "the Great Depression",
    "the 2008 financial crisis", "decolonisation in Africa", "the Arab Spring", "the fall of the Berlin Wall",
    "the space race", "the agricultural revolution", "the invention of the printing press", "the signing of the "
    "Magna Carta", "the invention of writing", "the opening of the Suez Canal", "the Russian Revolution of 1917",
    "the unification of Italy", "the American civil rights movement", "the end of apartheid in South Africa",
    "the collapse of the Soviet Union", "the Congress of Vienna", "the Spanish flu of 1918", "the Protestant "
    "work ethic's rise in northern Europe", "the Boston Tea Party", "the Chinese Cultural Revolution")
ERAS = (
    "the Renaissance", "the Silk Road", "the Enlightenment", "the Harlem Renaissance", "the Mongol Empire",
    "the Ottoman Empire at its height", "the Aztec capital Tenochtitlan", "the Hanseatic League", "democracy in "
    "ancient Athens", "the history of money", "the history of the book", "public libraries in the nineteenth "
    "century", "childhood in the Middle Ages", "medicine before germ theory", "the history of public health",
    "nationalism in the 1800s", "the history of human migration", "ancient Mesopotamian law", "Viking society",
    "the samurai class", "the Mughal Empire", "the Inca road network", "religion in ancient Egypt", "the history "
    "of the Olympic Games", "the history of jazz", "the history of cinema", "the history of opera", "the trade "
    "union movement", "colonialism and its legacy", "propaganda in wartime", "the Byzantine Empire", "the Song "
    "dynasty", "the kingdom of Aksum", "the Victorian era", "the Belle Epoque", "the Edo period")
IDEAS = (
    "Stoic philosophy", "supply and demand", "utilitarianism", "the role of museums in society", "the effect of "
    "social media on politics", "inflation and interest rates", "the separation of powers", "globalisation",
    "the ethics of artificial intelligence", "minimum wage laws", "Confucianism", "existentialism", "the welfare "
    "state", "free will", "trade tariffs", "game theory", "behavioural economics", "the ethics of zoos", "Kant's "
    "categorical imperative", "Plato's allegory of the cave", "John Locke's idea of property", "social contract "
    "theory", "Buddhist ideas of the self", "Daoism", "the philosophy of science", "moral relativism", "the "
    "trolley problem", "the meaning of justice", "federalism", "proportional representation", "the rule of law",
    "human rights", "freedom of speech and its limits", "the jury system", "intellectual property",
    "comparative advantage", "opportunity cost", "monopolies", "central banks", "universal basic income", "the gig "
    "economy", "tourism's effect on historic cities", "the ethics of genetic testing", "censorship of books",
    "the ethics of eating meat", "privacy in the digital age", "consumerism", "the four-day working week",
    "urban planning around the car", "gentrification", "the spread of English", "endangered languages",
    "nationalism", "the idea of progress", "civil disobedience", "meritocracy", "the tragedy of the commons")
CULTURE = (
    "Shakespeare's tragedies", "Impressionist painting", "Greek tragedy", "the Bauhaus movement", "Gothic "
    "architecture", "Baroque music", "the Romantic poets", "magical realism in fiction", "the detective novel",
    "epic poetry", "hip-hop", "folk tales", "the sonnet form", "Byzantine mosaics", "modernist architecture",
    "street art", "Greek mythology", "the chorus in ancient theatre", "sign languages", "Japanese woodblock "
    "prints", "the Gothic novel", "West African griot storytelling", "Art Nouveau", "film noir", "Persian "
    "miniature painting", "the blues", "Dutch Golden Age painting", "science fiction as a genre", "Cubism",
    "Islamic geometric art", "the fairy tale", "flamenco", "Chinese landscape painting")
ANY = (
    "Discuss {t}.", "Write a short essay on {t} for a general audience.", "Why is {t} still relevant today?",
    "Explain {t} as a teacher would to a new student.", "Summarise {t} in one paragraph, then in one sentence.",
    "Explain {t} through three concrete examples.", "What questions would you ask in an exam about {t}? Answer one "
    "of them.", "I have a seminar on {t} tomorrow. Give me the main points and two questions to raise.",
    "Write a podcast-style introduction to {t}.", "What is the most common myth about {t}?")
TEMPLATES = {
    EVENTS: ANY + ("What were the main consequences of {t}?", "What caused {t}?", "Give me a timeline of {t}.",
                   "Who were the key figures in {t}, and what did each contribute?", "How do historians disagree "
                   "about {t}?", "What primary sources would help someone study {t}?", "How might an ordinary "
                   "person have experienced {t}?", "Could {t} have been avoided or turned out differently?"),
    ERAS: ANY + ("What was everyday life like in the world of {t}?", "Who were the key figures of {t}, and what "
                 "did each contribute?", "How do historians disagree about {t}?", "What primary sources would help "
                 "someone study {t}?", "What did {t} leave behind that we still see today?", "Give me a timeline "
                 "of the key moments in {t}."),
    IDEAS: ANY + ("Compare two different views of {t}.", "What are the strongest arguments for and against {t}?",
                  "Where does the idea of {t} come from, and who shaped it?", "Apply {t} to a decision someone "
                  "might face this week.", "What would a critic of {t} say, and how would a defender reply?"),
    CULTURE: ANY + ("What makes {t} distinctive, and how would I recognise it?", "Which works would you "
                    "recommend to someone discovering {t}, and why?", "How did {t} influence what came after it?",
                    "Who are the great names of {t}, and what did each bring?", "Describe one example of {t} in "
                    "detail, as a guide would in front of it."),
}
TOPICS = EVENTS + ERAS + IDEAS + CULTURE
FOLLOWUPS = (
    "Summarise your answer in three bullet points.", "What would a critic of this view say?", "Give an example "
    "from a different country or period.", "Write a short quiz about it, with answers.", "How does this connect to "
    "life today?", "Recommend two books about it and say why.", "Now explain it to a twelve-year-old.", "Which "
    "part of your answer is most debated among experts?", "Turn your answer into a short speech.", "What have you "
    "left out that a specialist would add?")


def _topic(rng: random.Random) -> tuple[str, str]:
    group = rng.choice((EVENTS, ERAS, IDEAS, IDEAS, CULTURE))
    return rng.choice(TEMPLATES[group]).format(t=rng.choice(group)), pick(rng, FOLLOWUPS)


_PAIRS = (
    ("Stoicism", "Epicureanism"), ("capitalism", "socialism"), ("the Renaissance", "the Enlightenment"),
    ("Athenian democracy", "modern representative democracy"), ("Greek", "Roman religion"), ("Baroque",
    "Classical music"), ("Impressionism", "Expressionism"), ("common law", "civil law"), ("Keynesian",
    "monetarist economics"), ("Confucianism", "Legalism"), ("the American", "the French Revolution"),
    ("Romanticism", "Realism in literature"), ("a parliamentary", "a presidential system"), ("fiscal",
    "monetary policy"), ("deontology", "consequentialism"), ("tragedy", "comedy in ancient theatre"),
    ("the Roman Republic", "the Roman Empire"), ("Gothic", "Romanesque architecture"), ("oral", "written "
    "history"), ("free trade", "protectionism"), ("Hinduism", "Buddhism on the self"), ("Locke", "Hobbes on "
    "human nature"), ("jazz", "the blues"), ("the novel", "the short story"))


def _compare(rng: random.Random) -> tuple[str, str]:
    a, b = rng.choice(_PAIRS)
    text = rng.choice(("Compare {a} and {b}.", "What separates {a} from {b}, and what do they share?", "Write a "
                       "short comparison of {a} and {b} for a history or philosophy student.", "Set out {a} and "
                       "{b} side by side in a table, then comment.")).format(a=a, b=b)
    return text, pick(rng, FOLLOWUPS)


_MOTIONS = (
    "museums should return artefacts taken during colonial rule", "voting should be compulsory", "university "
    "should be free", "cities should ban private cars from their centres", "homework should be abolished in "
    "primary school", "the voting age should be lowered to sixteen", "tourists should pay a fee to enter "
    "historic city centres", "zoos do more good than harm", "history lessons should focus on local history",
    "a four-day working week should be the norm", "billionaires should not exist", "social media companies should "
    "be treated as publishers", "art created by machines can be real art", "sport and politics should be kept "
    "apart", "every citizen should do a year of national service", "statues of controversial figures should be "
    "removed", "a universal basic income should replace most benefits", "classic novels should not be edited for "
    "modern readers")


def _debate(rng: random.Random) -> tuple[str, str]:
    motion = rng.choice(_MOTIONS)
    text = rng.choice((
        "Argue for the motion: \"This house believes that {m}.\"", "Write a balanced discussion of whether {m}.",
        "Make the strongest case against the claim that {m}.", "Prepare notes for a debate on whether {m}: three "
        "arguments on each side.", "My friend {n} thinks that {m}. Help me understand their view, then give the "
        "best reply.", "Write a {k}-minute speech arguing that {m}.")).format(
        m=motion, n=rng.choice(NAMES), k=rng.choice((2, 3, 5)))
    return text, pick(rng, ("Now argue the opposite side just as strongly.", "Which argument is weakest, and how "
                            "would an opponent attack it?", "What evidence would change your mind?"))


_DILEMMAS = (
    "a doctor who can save five patients with one patient's organs", "a journalist who learns a secret that would "
    "ruin an innocent family", "a shop owner who finds a wallet full of cash outside the shop", "an employee who "
    "discovers the company has been hiding a safety problem", "a student who sees a friend cheating in an exam",
    "a self-driving car that must choose whom to put at risk", "a town that must choose between a factory's jobs "
    "and a clean river", "a museum offered a large donation by a company it disapproves of", "a parent deciding "
    "whether to read a teenager's diary", "a historian who finds evidence that a national hero did something "
    "terrible", "a lawyer who believes a client is guilty", "a teacher offered a gift by a pupil's parents",
    "a charity deciding between helping many people a little or a few people a lot", "an artist asked to paint "
    "a portrait of a dictator", "a landlord choosing between a family and a richer tenant", "a referee who "
    "realises too late that a goal should not have counted", "a scientist whose findings could be used as a "
    "weapon", "a translator asked to soften a politician's harsh words", "a friend asked to lie in a job "
    "reference", "a city deciding whether to demolish a beloved but unsafe old bridge")


def _dilemma(rng: random.Random) -> tuple[str, str]:
    case = rng.choice(_DILEMMAS)
    school = rng.choice(("a utilitarian", "a Kantian", "a virtue ethicist", "a Confucian", "a Stoic", "a care "
                         "ethicist"))
    text = rng.choice(("Consider {c}. What should they do, and why?", "How would {s} think about {c}?",
                       "Discuss the ethics of the case of {c}.", "Imagine {c}. Give two defensible answers and "
                       "the principles behind each.", "Here is a moral puzzle: {c}. Which duties clash, and how "
                       "would you weigh them?")).format(c=case, s=school)
    return text, pick(rng, ("Change one detail of the case so that your answer flips.", "What would {s} say in "
                            "reply?".format(s=school)), FOLLOWUPS[:3])


_IFS = (
    "the printing press had been invented a thousand years earlier", "the Library of Alexandria had never burned",
    "the Spanish Armada had succeeded in 1588", "the Black Death had never reached Europe", "China's treasure fleets "
    "had kept sailing after the 1430s", "the telegraph had never been invented", "Rome had never adopted "
    "Christianity", "the Industrial Revolution had started in India", "the Cuban Missile Crisis had ended in war",
    "women had won the vote everywhere in 1850", "the Silk Road had never opened", "the Aztecs had repelled the "
    "Spanish", "the internet had appeared in the 1950s", "the Western Roman Empire had survived to 1500",
    "the Vikings had settled North America for good", "paper had never reached Europe", "the Meiji reforms had "
    "failed", "the Suez Canal had never been built", "Gutenberg's press had been banned by the church",
    "the Berlin Wall had stayed up until 2010", "Napoleon had won at Waterloo", "Mansa Musa's empire had "
    "lasted another three centuries", "the Great Fire of London had never happened")


def _counterfactual(rng: random.Random) -> tuple[str, str]:
    text = rng.choice(("What might have happened if {c}?", "Imagine that {c}. How might the world differ today?",
                       "Write a short counterfactual history: {c}.", "Speculate, as a careful historian would, "
                       "about a world in which {c}.", "Write a newspaper front page from an alternative past in "
                       "which {c}.")).format(c=rng.choice(_IFS))
    return text, pick(rng, ("Which of your predictions is most speculative?", "What do historians say about "
                            "counterfactual questions like this one?"), FOLLOWUPS[:3])


_SCHOOLS = ("Aristotle", "a Stoic philosopher", "Confucius", "an economist of the Austrian school", "Karl Marx",
            "Adam Smith", "a Buddhist monk", "John Stuart Mill", "Simone de Beauvoir", "Hannah Arendt",
            "a medieval theologian", "Machiavelli")
_ISSUES = ("remote work", "social media influencers", "online shopping", "video games", "climate change",
           "fast fashion", "smartphones in schools", "space tourism", "artificial intelligence", "celebrity culture",
           "city marathons", "self-help books", "streaming music", "cryptocurrency", "dating apps")


def _school_on_issue(rng: random.Random) -> tuple[str, str]:
    who, issue = rng.choice(_SCHOOLS), rng.choice(_ISSUES)
    text = rng.choice(("What would {w} make of {i}?", "Imagine {w} visiting us today. How might they judge {i}?",
                       "Write a short dialogue in which {w} discusses {i} with a modern teenager.", "Apply the "
                       "ideas of {w} to {i}.")).format(w=who, i=issue)
    return text, pick(rng, FOLLOWUPS)


def _lesson(rng: random.Random) -> tuple[str, str]:
    topic, level = rng.choice(TOPICS), rng.choice(("primary school pupils", "secondary school students",
                                                   "first-year university students", "an adult evening class",
                                                   "museum visitors", "a retirement-home reading circle"))
    text = rng.choice(("Plan a {n}-lesson unit on {t} for {l}, with a goal and an activity for each lesson.",
                       "Design a {m}-minute workshop about {t} for {l}.", "Write five discussion questions and a "
                       "short reading list on {t} for {l}.", "Create a worksheet about {t} for {l}, with an "
                       "answer key.")).format(
        n=rng.randint(2, 6), m=rng.choice((45, 60, 90)), t=topic, l=level)
    return text, pick(rng, ("Add an assessment for the end of the unit.", "How would you adapt it for a student who "
                            "struggles with reading?", "Write the handout for the first activity."))


def _economics(rng: random.Random) -> tuple[str, str]:
    p, q, d = rng.randint(2, 40), rng.randint(100, 900), rng.choice((5, 10, 15, 20, 25))
    town, who = rng.choice(CITIES), rng.choice(NAMES)
    text = rng.choice((
        f"A cafe in {town} raises the price of coffee from ${p} to ${p + p * d // 100 + 1} and sales fall from {q} "
        f"to {q - q * d // 50} cups a week. What is the price elasticity of demand, and what does it tell the owner?",
        f"{who} can earn ${p * 5} an hour tutoring or spend that hour on a free course. What is the opportunity cost "
        f"of the course, and what else should {who} consider?", f"Inflation is {d // 5 + 1}% a year and a savings "
        f"account pays {d // 10 + 1}%. What happens to the real value of ${q * 10} over five years?",
        f"A government puts a tax of ${p / 10:.2f} on each bottle of soda. Who really pays it, the buyers or the "
        f"sellers? Explain with supply and demand.", f"A town of {q * 100} people is deciding whether to build a "
        f"${q // 10} million stadium. What costs and benefits should it weigh?"))
    return text, pick(rng, ("Draw the supply and demand diagram in words.", "What would a critic of this analysis "
                            "point out?"), FOLLOWUPS[:2])


KINDS = (_topic, _topic, _topic, _topic, _compare, _debate, _debate, _dilemma, _counterfactual, _school_on_issue,
         _lesson, _economics)


def make(rng: random.Random) -> tuple[str, str]:
    """One humanities prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
