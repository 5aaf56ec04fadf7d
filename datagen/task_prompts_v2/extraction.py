"""Extraction prompts, version 2: a passage generated from random facts (company results, product listings, emails,
schedules, tables, reviews, recipes, job adverts, sports results, contact notes) and a request to pull structured
data out of it (JSON, CSV, YAML, a table, a list, a count, a ranking)."""

from __future__ import annotations

import random

from .words import BRANDS, CITIES, COMPANIES, DAYS, FOODS, MONTHS, NAMES, PRODUCTS, join_and, person, pick

FORMATS = ("JSON", "CSV", "YAML", "a Markdown table", "a bulleted list", "JSON lines (one object per line)")
FOLLOWUPS = (
    "Return the same information as a Markdown table.", "Now give it in YAML instead.", "Sort the entries "
    "alphabetically and number them.", "Which entry stands out most, and why?", "Summarise the text in one sentence.",
    "Add a field that says how confident you are in each value.", "Now write the same data as CSV with a header row.",
    "Only keep the entries that mention a number larger than 50.", "Check your output against the text: did you miss "
    "or invent anything?", "Write a short paragraph that reports the data you extracted.")


_PLANS = ("open a new office", "hire 200 people", "cut costs", "sell its oldest factory", "invest in research",
          "expand abroad", "pay a larger dividend", "close two shops")


def _companies(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    rows = [f"{c}, based in {rng.choice(CITIES)}, reported revenue of ${rng.randint(5, 900)} million for "
            f"{rng.randint(2016, 2025)}, {rng.choice(('up', 'down'))} {rng.randint(1, 40)}% on the year before. Its "
            f"chief executive, {person(rng)}, said the company would {rng.choice(_PLANS)}."
            for c in rng.sample(COMPANIES, rng.randint(2, 5))]
    return " ".join(rows), ("each company's name, city, revenue, change and chief executive",
                            "the company with the largest revenue and its chief executive",
                            "every company that grew, with its growth rate")


def _listing(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    rows = [f"- {p.capitalize()} by {rng.choice(BRANDS)}: ${rng.randint(9, 600)}.{rng.choice(('00', '49', '99'))}"
            f", rated {rng.randint(25, 50) / 10} stars from {rng.randint(3, 2400)} reviews, "
            f"{rng.choice(('in stock', 'only 2 left', 'out of stock', 'ships in 3 weeks', 'in stock'))}, "
            f"colour: {rng.choice(('black', 'white', 'sage green', 'navy', 'red', 'grey'))}"
            for p in rng.sample(PRODUCTS, rng.randint(3, 6))]
    return "\n".join(rows), ("each product's name, brand, price, rating and availability",
                             "the products that can be bought today, cheapest first",
                             "the best-rated product with at least 100 reviews")


def _email(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    sender, to, extra = person(rng), person(rng), person(rng)
    day, hour = rng.choice(DAYS[:5]), rng.randint(9, 16)
    tasks = rng.sample((f"{extra.split()[0]} will book the room", "I will send the budget figures by Wednesday",
                        f"please check the contract with {rng.choice(COMPANIES)}", "we need two more volunteers",
                        "the printer order must be approved", f"{to.split()[0]} should prepare the slides",
                        "someone has to call the caterer", "the website text needs a final read"), 3)
    subject = rng.choice(("Planning", "Next steps", "Quick update", "Re: launch", "Thursday"))
    text = (f"From: {sender}\nTo: {to}\nCc: {extra}\nSubject: {subject}"
            f"\n\nHi {to.split()[0]},\n\nCan we meet on {day} at {hour}:{rng.choice(('00', '30'))} in "
            f"{rng.choice(('room 4B', 'the library', 'the cafe on the corner', 'the main hall'))}? Before then, "
            f"{tasks[0]}, {tasks[1]}, and {tasks[2]}. The deadline for the whole project is "
            f"{rng.randint(1, 28)} {rng.choice(MONTHS)}.\n\nThanks,\n{sender.split()[0]}")
    return text, ("the sender, recipients, meeting time and place, and deadline",
                  "every action item, with who is responsible if the email says so", "all dates and times mentioned")


def _schedule(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    hour, rows = rng.randint(8, 10), []
    for title in rng.sample(("Opening remarks", "Soil health in city gardens", "Lunch", "Panel: the future of "
                             "libraries", "Workshop: writing grant proposals", "Coffee break", "Keynote: rivers and "
                             "cities", "Lightning talks", "Closing discussion", "Demo: low-cost weather stations",
                             "Poster session"), rng.randint(4, 7)):
        length = rng.choice((15, 30, 45, 60, 90))
        room = rng.choice(("Hall A", "Hall B", "Room 12"))
        who = "" if title in ("Lunch", "Coffee break") else f", {person(rng)}, {room}"
        rows.append(f"{hour:02d}:{rng.choice(('00', '15', '30'))} {title} ({length} min){who}")
        hour += rng.randint(1, 2)
    head = f"Programme, {rng.choice(CITIES)} Community Science Day, {rng.randint(1, 28)} {rng.choice(MONTHS)}:\n"
    return head + "\n".join(rows), ("each session's start time, title, speaker and room", "every speaker and the "
                                    "sessions they give", "the sessions held in Hall A, in order")


def _table(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    cities, months = rng.sample(CITIES, rng.randint(3, 5)), rng.sample(MONTHS, 3)
    what = rng.choice(("average temperature (C)", "rainfall (mm)", "bike rentals", "museum visitors"))
    hi = 35 if "temperature" in what else 300 if "rain" in what else 9000
    rows = [f"{c}," + ",".join(str(rng.randint(0, hi)) for _ in months) for c in cities]
    text = f"{what}\ncity,{','.join(months)}\n" + "\n".join(rows)
    return text, ("the highest and lowest value for each month, with its city", "each city's total and average "
                  "over the three months", "the cities whose value rose every month")


def _reviews(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    good = ("works perfectly", "is well made", "exceeded my expectations", "is worth every penny", "is easy to use",
            "arrived a day early")
    bad = ("broke after a week", "is far too loud", "arrived scratched", "has a confusing manual", "stopped charging "
           "after a month", "smells of plastic")
    rows = []
    for i in range(rng.randint(3, 6)):
        ok = rng.random() < 0.5
        aspect = rng.choice(("price", "colour", "size", "delivery", "battery", "packaging"))
        rows.append(f"{i + 1}. {rng.choice(NAMES)}: \"The {rng.choice(PRODUCTS)} {rng.choice(good if ok else bad)}. "
                    f"The {aspect} {rng.choice(('could be better', 'was fine', 'surprised me', 'is a letdown'))}.\"")
    return "\n".join(rows), ("each review's author, product, sentiment (positive, negative or mixed) and a rating "
                             "from 1 to 5", "the products mentioned and what each reviewer liked or disliked",
                             "the complaints, grouped by product")


def _recipe(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    food = rng.choice(FOODS)
    parts = rng.sample(("2 onions", "400 g of tomatoes", "a pinch of salt", "3 cloves of garlic", "250 ml of stock",
                        "1 tablespoon of olive oil", "200 g of rice", "2 carrots", "a handful of parsley",
                        "100 g of butter", "3 eggs", "1 teaspoon of cumin", "500 g of flour"), rng.randint(4, 7))
    text = (f"{rng.choice(NAMES)}'s {food} (serves {rng.randint(2, 8)}): Start by warming {parts[0]} in a large pan. "
            f"Add {join_and(parts[1:-1])} and cook for {rng.randint(5, 25)} minutes, stirring now and then. Finish "
            f"with {parts[-1]} and rest for {rng.randint(2, 10)} minutes before serving.")
    return text, ("the ingredients with their quantities and units", "the steps as a numbered list with their "
                  "times", "the total cooking time and the number of servings")


def _job_ad(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    role = rng.choice(("Data Analyst", "Warehouse Supervisor", "Junior Web Developer", "Pastry Chef", "Dental "
                       "Nurse", "Field Ecologist", "Customer Success Manager", "Electrician"))
    low = rng.randint(25, 70)
    text = (f"{rng.choice(COMPANIES)} is hiring a {role} for our {rng.choice(CITIES)} office "
            f"({rng.choice(('full time', 'part time, 24 hours a week', 'a one-year contract'))}). Salary "
            f"{low},000-{low + rng.randint(5, 20)},000 euros. You will have {rng.randint(1, 6)}+ years of experience, "
            f"{rng.choice(('a driving licence', 'fluent Spanish', 'a first-aid certificate', 'experience with SQL'))} "
            f"and {rng.choice(('a calm manner', 'an eye for detail', 'a sense of humour'))}. Apply to "
            f"{rng.choice(NAMES).lower()}@{rng.choice(('example.com', 'example.org'))} by {rng.randint(1, 28)} "
            f"{rng.choice(MONTHS)}.")
    return text, ("the job title, employer, location, hours, salary range, requirements and deadline",
                  "everything a candidate must have", "the way to apply and the deadline")


def _results(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    teams = [f"{c} {rng.choice(('Rovers', 'United', 'Athletic', 'Wanderers', 'City'))}"
             for c in rng.sample(CITIES, 4)]
    games = [f"{a} {rng.randint(0, 4)}-{rng.randint(0, 4)} {b}" for a, b in
             rng.sample([(a, b) for a in teams for b in teams if a != b], rng.randint(4, 6))]
    text = f"Results from {rng.choice(DAYS[5:])}'s {rng.choice(('league', 'cup', 'youth league'))} matches: " + \
        "; ".join(games) + "."
    return text, ("each match's home team, away team and score", "a league table with wins, draws, losses and "
                  "points (3 for a win, 1 for a draw)", "the match with the most goals")


def _contacts(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    notes = []
    for _ in range(rng.randint(3, 6)):
        role = rng.choice(("plumber", "piano teacher", "neighbour", "accountant", "vet", "cousin", "dentist"))
        more = rng.choice(("", f", lives in {rng.choice(CITIES)}",
                           f", birthday {rng.randint(1, 28)} {rng.choice(MONTHS)}"))
        notes.append(f"{person(rng)} ({role}) - {rng.choice(('mobile', 'phone', 'tel.'))} 0{rng.randint(100, 999)} "
                     f"{rng.randint(100000, 999999)}{more}")
    return "My notes:\n" + "\n".join(notes), ("a contact list with name, surname, role, phone number, city and "
                                               "birthday (empty where unknown)", "everyone whose birthday is given",
                                               "the phone numbers, in a standard format")


PASSAGES = (_companies, _listing, _listing, _email, _email, _schedule, _table, _reviews, _recipe, _job_ad,
            _results, _contacts)
# follow-ups that fit one kind of passage only, drawn beside the general ones
PASSAGE_FOLLOWUPS = {
    _companies: ("Add each company's revenue for the year before, computed from the change.", "Rank the companies "
                 "by growth."),
    _listing: ("Which product is the best value for money, and why?", "Convert the prices to euros at 0.9 euros "
               "to the dollar."),
    _email: ("Draft a reply that confirms the meeting and lists the action items.", "Turn the action items into "
             "a checklist with owners and due dates."),
    _schedule: ("Which sessions overlap, if any?", "Add each session's end time."),
    _table: ("Compute the average of each column.", "Describe the trend in two sentences."),
    _reviews: ("Which complaint comes up most often?", "Write a two-sentence summary a shop could show "
               "customers."),
    _recipe: ("Scale the ingredients for twice as many people.", "Convert the quantities to US cups and ounces "
              "where it makes sense."),
    _job_ad: ("Write three interview questions based on the requirements.", "Is anything important missing from "
              "the advert?"),
    _results: ("Who would top the table after these matches?", "Add each team's goal difference."),
    _contacts: ("Which entries are missing a city or a birthday?", "Sort the contacts by surname."),
}


def make(rng: random.Random) -> tuple[str, str]:
    """One extraction prompt and its follow-up."""
    write = rng.choice(PASSAGES)
    passage, wants = write(rng)
    want, fmt = rng.choice(wants), rng.choice(FORMATS)
    ask = rng.choice((
        "Extract {w} from the text below. Output {f}.", "From the following, list {w} as {f}.", "Read this and "
        "give me {w}, formatted as {f}.", "Please pull out {w}. Reply with {f} only.", "Here is some text. I need "
        "{w} in {f}.", "Turn the following into {f} containing {w}.", "Identify {w} in the passage below.",
        "Parse the text below: {w}. Present the result as {f}.")).format(w=want, f=fmt)
    followup = pick(rng, FOLLOWUPS, PASSAGE_FOLLOWUPS[write])
    if rng.random() < 0.5:
        return f"{ask}\n\n{passage}", followup
    return f"{passage}\n\n{ask.replace('below', 'above').replace('following', 'text above')}", followup

