"""Coding prompts, version 2: write a function (Python, JavaScript, TypeScript, C, C++, Java, Go, Rust), SQL against a
given schema, shell one-liners, find the bug in a given snippet, explain or translate a snippet, regular expressions,
concepts and small designs. The snippets are written for this project."""

from __future__ import annotations

import random

from .words import pick

LANGS = ("Python", "Python", "Python", "JavaScript", "TypeScript", "C", "C++", "Java", "Go", "Rust")
TASKS = (
    "reverses a singly linked list", "checks whether a string reads the same backwards, ignoring case and spaces",
    "merges two sorted arrays into one sorted array", "counts how often each word appears in a text",
    "finds the second largest number in a list", "implements binary search on a sorted array",
    "removes duplicates from a list while keeping the order", "implements a stack with push, pop and peek",
    "converts a Roman numeral to an integer", "rotates a square matrix by 90 degrees clockwise",
    "implements a least-recently-used cache with a fixed capacity", "flattens an arbitrarily nested list",
    "lists all primes below n with the sieve of Eratosthenes", "sorts a list of records by two keys",
    "checks whether two strings are anagrams", "finds the maximum sum of a contiguous subarray",
    "computes the edit distance between two words", "detects a cycle in a linked list", "converts an integer to "
    "its English words, e.g. 342 to 'three hundred forty-two'", "implements a queue with two stacks",
    "performs a breadth-first search on a graph given as an adjacency list", "parses a date string like 2024-03-09",
    "groups a list of words into sets of anagrams", "returns the n-th row of Pascal's triangle", "finds the "
    "shortest path in a weighted graph with Dijkstra's algorithm", "checks whether a Sudoku grid is valid",
    "run-length encodes a string, turning aaabcc into a3b1c2", "decodes a run-length encoded string",
    "computes the moving average of a stream of numbers", "validates an email address in a simple way",
    "finds all permutations of a short string", "generates all subsets of a set", "implements insertion sort",
    "implements merge sort", "implements quicksort with a random pivot", "counts the islands in a grid of 0s and 1s",
    "converts a temperature table from Celsius to Fahrenheit", "checks whether a year is a leap year",
    "shuffles an array with the Fisher-Yates algorithm", "finds the longest word in a sentence", "capitalises the "
    "first letter of every word", "computes the factorial of n iteratively and recursively", "implements a "
    "min-heap with insert and extract-min", "serialises a binary tree to a string and back", "finds the lowest "
    "common ancestor in a binary search tree", "checks whether a number is an Armstrong number", "counts the set "
    "bits in an integer", "implements a trie with insert and prefix search", "splits a list into chunks of size k",
    "merges overlapping intervals", "finds the first non-repeating character in a string", "computes the power "
    "set size and prints each subset", "converts a CSV line with quoted fields into a list of values",
    "implements a simple tokenizer for arithmetic expressions", "evaluates a postfix (reverse Polish) expression",
    "implements a rate limiter that allows n calls per second", "finds the k-th largest element with a heap",
    "computes the Levenshtein ratio of two strings", "implements a circular buffer", "checks whether a linked "
    "list is a palindrome", "returns the spiral order of a matrix", "finds the longest increasing subsequence",
    "computes how many ways there are to climb n stairs taking 1 or 2 steps", "solves the knapsack problem "
    "with dynamic programming", "implements a topological sort", "finds the median of a stream of numbers",
    "implements a union-find structure with path compression", "formats a number of bytes as KB, MB or GB",
    "converts snake_case names to camelCase", "validates a credit card number with the Luhn check",
    "finds all pairs in an array that add up to a target", "computes the dot product of two vectors",
    "counts the words, lines and characters of a file", "implements a simple bank account class with deposits "
    "and withdrawals", "reads a JSON config file and fills in default values", "retries a function call with "
    "exponential back-off", "checks whether a string has balanced brackets of three kinds", "finds the majority "
    "vote winner in a list of ballots, or reports a tie", "compresses a sorted list of integers into ranges like "
    "1-4,7,9-10", "converts minutes into a 'h:mm' string", "computes the day of the year from a date",
    "finds the closest pair of points in a list", "draws a text histogram of word lengths", "counts the days "
    "between two dates", "checks whether a number is a power of two", "generates a random password of a given "
    "length", "finds the missing number in a list of 1 to n", "reverses the words in a sentence but not the "
    "letters", "converts a hex colour like #ff8800 to RGB values", "pads every line of a text to the same width",
    "computes simple interest and compound interest side by side", "finds the most common letter in a text",
    "checks whether a graph is bipartite", "implements a simple event emitter with on and emit",
    "parses query parameters out of a URL", "wraps text to a given line width", "computes the greatest common "
    "divisor of a list of numbers", "finds the longest palindromic substring", "implements a doubly linked list",
    "rotates an array by k positions", "counts the inversions in an array", "implements a simple state machine "
    "for a traffic light", "caches the results of an expensive function for ten minutes", "computes a "
    "checksum of a file in chunks", "merges k sorted lists", "finds the peak element in a mountain-shaped array",
    "converts a nested dictionary into dotted keys like a.b.c", "validates a 24-hour time string",
    "implements a bounded producer-consumer queue", "counts distinct values in a very large file with little "
    "memory", "schedules tasks by priority with a heap", "finds words in a grid of letters")
NOTES = {
    "Python": ("Use type hints.", "Stick to the standard library.", "Write it as a generator if that fits.",
               "Include a docstring with an example.", "Target Python 3.10 or later."),
    "JavaScript": ("Use modern syntax (const, arrow functions).", "It should run in Node.js without packages.",
                   "Add JSDoc comments.", "Make it work in the browser as well."),
    "TypeScript": ("Give precise types and avoid any.", "Export it from a module.", "Use generics if they help."),
    "C": ("Free everything you allocate.", "Stick to C99 and the standard library.", "Check every return value.",
          "Avoid global variables."),
    "C++": ("Use the STL where it helps.", "Use C++17.", "Make it a template if that makes sense.",
            "Avoid raw new and delete."),
    "Java": ("Put it in a class with a small main method as a demo.", "Use Java 17.", "Throw a meaningful "
             "exception on bad input."),
    "Go": ("Return an error value for bad input.", "Add a table-driven test.", "Keep it in one package."),
    "Rust": ("Avoid unwrap outside tests.", "Use iterators where they read well.", "Return a Result for "
             "errors."),
}
TEMPLATES = (
    "Write a {lang} function that {task}.", "How would you write a {lang} program that {task}? Explain the code.",
    "Implement a function in {lang} that {task}. Include comments.", "Show me {lang} code that {task}, and give an "
    "example call.", "I need a {lang} function that {task}. Keep it short and readable.", "In {lang}, write code "
    "that {task}. State its time complexity.", "Could you help me write something in {lang} that {task}?",
    "Write idiomatic {lang} that {task}, with a couple of test cases.", "My interview is tomorrow. Show me how to "
    "write a {lang} function that {task}, and talk through the approach first.", "Teach me how to code "
    "something that {task}. Use {lang}.", "Give me a {lang} solution for a routine that {task}.", "What's a clean "
    "way in {lang} to write a function that {task}?", "Write {lang} code that {task}; start with a brute-force "
    "version, then improve it.", "For a small project I need {lang} code that {task}. Please write it.")
FOLLOWUPS = (
    "Add unit tests for your solution.", "Can you make it faster or use less memory?", "What is the time and space "
    "complexity?", "Rewrite the solution in a different programming language.", "Add error handling for invalid "
    "input.", "Explain the code line by line.", "What edge cases does your code not handle yet?", "Rewrite it "
    "without using any library functions.", "How would you document this function for other developers?",
    "Refactor it so that it is easier to read.")


def _function(rng: random.Random) -> tuple[str, str]:
    lang = rng.choice(LANGS)
    text = rng.choice(TEMPLATES).format(lang=lang, task=rng.choice(TASKS))
    if rng.random() < 0.6:
        text = f"{text} {rng.choice(NOTES[lang])}"
    return text, pick(rng, FOLLOWUPS)


_CLASSES = (
    ("a shopping cart", "add items, remove items and compute the total with a discount code"), ("a library "
    "member", "borrow and return books, with a limit of five loans"), ("a bank account", "deposit, withdraw and "
    "list transactions, never going below zero"), ("a playlist", "add songs, shuffle, and skip to the next song"),
    ("a thermostat", "set a target temperature and decide whether to heat or cool"), ("a parking meter",
    "accept coins, track time left and report when it expires"), ("a matrix", "add, multiply and transpose"),
    ("a fraction", "add, subtract, multiply, divide and simplify"), ("a to-do list", "add tasks with due dates, "
    "mark them done and list what is overdue"), ("a polynomial", "add two polynomials and evaluate one at x"),
    ("a deck of cards", "shuffle, deal a hand and count what is left"), ("a calendar of events", "add events and "
    "find clashes"), ("a 2D vector", "add, scale, take the dot product and the length"), ("an inventory",
    "add stock, remove stock and warn when an item runs low"))


def _class(rng: random.Random) -> tuple[str, str]:
    what, does = rng.choice(_CLASSES)
    lang = rng.choice(("Python", "Java", "C++", "TypeScript", "Kotlin", "C#", "Python", "Swift"))
    text = rng.choice(("Write a {lang} class for {w} that can {d}.", "Model {w} in {lang}: it should {d}.",
                       "Design and implement {w} as a {lang} type. It must {d}.", "Show how you would "
                       "implement {w} in {lang} so that it can {d}. Include a short usage example.")).format(
        lang=lang, w=what, d=does)
    return text, pick(rng, ("Add unit tests for the class.", "How would you persist it to a file?", "Which parts "
                            "would you make immutable, and why?"), FOLLOWUPS[4:])


_SCHEMAS = (
    ("customers(id, name, city, joined_on) and orders(id, customer_id, amount, placed_on)",
     ("lists each city with its number of customers", "finds customers who have never placed an order",
      "returns the total amount ordered per customer, largest first", "finds the month with the highest total "
      "order amount", "lists customers who placed more than three orders in 2024",
      "deletes duplicate customers but keeps the oldest")),
    ("employees(id, name, department_id, salary, manager_id) and departments(id, name)",
     ("finds the highest-paid employee in each department", "lists employees who earn more than their manager",
      "counts the employees in each department, including empty departments", "computes the average salary per "
      "department, rounded to two decimals")),
    ("books(id, title, author_id, year), authors(id, name, country) and loans(book_id, member_id, loaned_on)",
     ("lists the ten most borrowed books", "finds authors with no book borrowed in the last year", "counts the "
      "books per country of their author", "finds members who borrowed the same book twice")),
    ("products(id, name, category, price) and sales(product_id, quantity, sold_at)",
     ("returns revenue per category per month", "finds products that sold nothing in the last 30 days", "ranks "
      "products by revenue within each category using a window function", "computes a running total of daily "
      "revenue")),
    ("students(id, name, year), courses(id, title, credits) and enrolments(student_id, course_id, grade)",
     ("finds each student's average grade weighted by credits", "lists courses with fewer than five students",
      "finds students enrolled in every course of 3 credits or more", "returns the best student in each course")),
    ("flights(id, origin, destination, departs_at, seats) and bookings(id, flight_id, passenger, booked_at)",
     ("finds flights that are overbooked", "lists the busiest route per month", "finds passengers with two "
      "bookings on the same day", "returns the share of seats sold on each flight")),
    ("patients(id, name, born_on), doctors(id, name, speciality) and visits(patient_id, doctor_id, visited_on, fee)",
     ("lists each doctor's number of distinct patients", "finds patients who saw three or more specialities",
      "returns total fees per month and speciality", "finds the last visit of every patient")),
    ("rides(id, bike_id, started_at, ended_at, start_station, end_station) and stations(id, name, district)",
     ("finds the ten most popular start stations", "computes the average ride length per district",
      "lists bikes that were not used in the last week", "finds round trips that end where they started")))


def _sql(rng: random.Random) -> tuple[str, str]:
    schema, asks = rng.choice(_SCHEMAS)
    ask = rng.choice(asks)
    text = rng.choice((
        "Given tables {s}, write a SQL query that {a}.", "I have a database with {s}. How do I write a query that "
        "{a}?", "Write an SQL query that {a}. The tables are {s}.", "Using PostgreSQL and the tables {s}, write a "
        "query that {a}, and explain each clause.", "Tables: {s}. Query needed: one that {a}. Use a CTE if it "
        "helps.", "In SQLite, with the tables {s}, how can I get a result that {a}?")).format(s=schema, a=ask)
    return text, pick(rng, ("Which index would make this query faster?", "Rewrite it without a subquery.",
                            "What does the query return when a table is empty?"), FOLLOWUPS[:3])


_SHELL = (
    "finds the ten largest files under the current directory", "renames every .jpeg file in a folder to .jpg",
    "counts the lines of all Python files in a project", "prints the most common IP addresses in an access log",
    "deletes log files older than 30 days", "backs up a directory into a dated tar.gz archive", "replaces a word "
    "in every text file of a folder", "shows which process is listening on port 8080", "prints the lines of a CSV "
    "file whose third column is greater than 100", "watches a folder and prints the name of each new file",
    "downloads a list of URLs from a file, three at a time", "checks whether a website responds and logs the time",
    "prints disk usage per user's home directory", "splits a large file into pieces of 100 MB",
    "removes duplicate lines from a file without changing their order", "converts every PNG in a folder to JPEG",
    "counts how many files of each extension a directory tree holds", "prints the lines that two files share",
    "monitors memory use every minute and writes it to a log", "finds files changed in the last 24 hours",
    "lists the git branches merged into main", "prints the 20 most common words in a text file", "creates a "
    "folder for every month of the current year", "kills a process by name only after asking for confirmation",
    "checks that a list of hosts answer to ping")


def _shell(rng: random.Random) -> tuple[str, str]:
    text = rng.choice(("Write a shell command that {t}.", "How can I, in bash, write a script that {t}?",
                       "Give me a one-liner for Linux that {t}, and explain each part.", "Write a small POSIX sh "
                       "script that {t}.", "On macOS, what terminal command {t}?", "I need a cron-friendly bash "
                       "script that {t}; it should log errors.")).format(t=rng.choice(_SHELL))
    return text, pick(rng, ("How would you do the same on Windows PowerShell?", "Make it safe for file names with "
                            "spaces.", "Explain each part of the command."))


# (language, snippet with a bug, what goes wrong)
BUGGY = (
    ("Python", "def average(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs) - 1",
     "it returns the wrong average"),
    ("Python", "def last_n(items, n):\n    return items[-n:]", "it returns the whole list when n is 0"),
    ("Python", "def add_tag(tag, tags=[]):\n    tags.append(tag)\n    return tags", "tags from earlier calls "
     "show up in later ones"),
    ("Python", "def count_up(n):\n    i = 0\n    while i < n:\n        print(i)\n    i += 1", "it never stops"),
    ("Python", "def is_even(n):\n    return n % 2 == 1", "it says 4 is not even"),
    ("Python", "def word_lengths(text):\n    lengths = {}\n    for w in text.split():\n        lengths[w] = len(w)\n"
     "        return lengths", "it only ever reports the first word"),
    ("Python", "def safe_div(a, b):\n    try:\n        return a / b\n    except ValueError:\n        return None",
     "it still crashes when b is 0"),
    ("JavaScript", "function sumArray(arr) {\n  let total;\n  for (const x of arr) total += x;\n  return total;\n}",
     "it returns NaN"),
    ("JavaScript", "function isAdult(age) {\n  if (age = 18) return true;\n  return age > 18;\n}",
     "it says everyone is an adult"),
    ("JavaScript", "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}",
     "it prints 3 three times instead of 0, 1, 2"),
    ("JavaScript", "const sorted = [10, 9, 1, 100].sort();\nconsole.log(sorted);", "the numbers are not in "
     "numeric order"),
    ("C", "int sum_to(int n) {\n    int s;\n    for (int i = 1; i <= n; i++) s += i;\n    return s;\n}",
     "it returns a different number on each run"),
    ("C", "void copy(char *dst, const char *src) {\n    int i = 0;\n    while (src[i]) { dst[i] = src[i]; i++; }\n}",
     "the copied string sometimes has garbage at the end"),
    ("C", "int max_of(int *a, int n) {\n    int m = 0;\n    for (int i = 0; i < n; i++) if (a[i] > m) m = a[i];\n"
     "    return m;\n}", "it returns 0 for an array of negative numbers"),
    ("Go", "func firstWord(s string) string {\n\tparts := strings.Split(s, \" \")\n\treturn parts[1]\n}",
     "it returns the second word, and panics on one-word input"),
    ("Java", "String a = new String(\"hi\");\nString b = new String(\"hi\");\n"
     "if (a == b) System.out.println(\"same\");",
     "it never prints \"same\""),
    ("Python", "def median(xs):\n    xs.sort()\n    return xs[len(xs) // 2]", "the caller's list gets reordered and "
     "even-length lists give the wrong median"),
    ("Python", "def read_numbers(path):\n    f = open(path)\n    return [int(x) for x in f.read().split(',')]",
     "it fails on a trailing comma and never closes the file"),
    ("Python", "def fizz(n):\n    if n % 3 == 0:\n        return 'Fizz'\n    elif n % 15 == 0:\n        return "
     "'FizzBuzz'\n    return str(n)", "it never returns FizzBuzz"),
    ("JavaScript", "async function getUser(id) {\n  const res = fetch(`/api/users/${id}`);\n  return res.json();\n}",
     "it throws 'res.json is not a function'"),
    ("JavaScript", "function countChars(s) {\n  const counts = {};\n  for (let i = 0; i <= s.length; i++) {\n"
     "    counts[s[i]] = (counts[s[i]] || 0) + 1;\n  }\n  return counts;\n}", "the result has an 'undefined' key"),
    ("C", "char *greet(const char *name) {\n    char buf[64];\n    sprintf(buf, \"Hello, %s\", name);\n    return "
     "buf;\n}", "the greeting comes out as garbage"),
    ("Rust", "fn main() {\n    let v = vec![1, 2, 3];\n    let w = v;\n    println!(\"{:?}\", v);\n}",
     "it does not compile"),
    ("SQL", "SELECT department, AVG(salary)\nFROM employees\nWHERE AVG(salary) > 50000\nGROUP BY department;",
     "the database rejects it"),
)
SNIPPETS = (
    ("Python", "from collections import Counter\n\ndef top(words, k):\n    return [w for w, _ in "
     "Counter(words).most_common(k)]"),
    ("Python", "def chunks(seq, size):\n    for i in range(0, len(seq), size):\n        yield seq[i:i + size]"),
    ("Python", "squares = {n: n * n for n in range(10) if n % 3 == 0}\nprint(squares)"),
    ("Python", "import functools\n\n@functools.lru_cache(maxsize=None)\ndef ways(n):\n    return 1 if n < 2 else "
     "ways(n - 1) + ways(n - 2)"),
    ("Python", "with open('data.txt') as f:\n    rows = [line.strip().split(',') for line in f if line.strip()]"),
    ("JavaScript", "const debounce = (fn, ms) => {\n  let t;\n  return (...args) => {\n    clearTimeout(t);\n"
     "    t = setTimeout(() => fn(...args), ms);\n  };\n};"),
    ("JavaScript", "const byCity = people.reduce((acc, p) => {\n  (acc[p.city] ||= []).push(p.name);\n  return acc;\n"
     "}, {});"),
    ("JavaScript", "async function loadAll(urls) {\n  const res = await Promise.all(urls.map(u => fetch(u)));\n"
     "  return Promise.all(res.map(r => r.json()));\n}"),
    ("C", "unsigned count(unsigned x) {\n    unsigned c = 0;\n    while (x) { x &= x - 1; c++; }\n    return c;\n}"),
    ("C", "void swap(int *a, int *b) {\n    *a ^= *b;\n    *b ^= *a;\n    *a ^= *b;\n}"),
    ("SQL", "SELECT name, COUNT(*) AS n\nFROM visits\nGROUP BY name\nHAVING COUNT(*) > 1\nORDER BY n DESC;"),
    ("bash", "for f in *.txt; do\n  mv \"$f\" \"${f%.txt}.md\"\ndone"),
    ("bash", "grep -c ERROR app.log | tee -a counts.txt"),
    ("Rust", "fn longest<'a>(a: &'a str, b: &'a str) -> &'a str {\n    if a.len() >= b.len() { a } else { b }\n}"),
    ("Go", "func worker(jobs <-chan int, out chan<- int) {\n\tfor j := range jobs {\n\t\tout <- j * 2\n\t}\n}"),
    ("Python", "from dataclasses import dataclass, field\n\n@dataclass(order=True)\nclass Task:\n    priority: int\n"
     "    name: str = field(compare=False)"),
    ("Python", "import itertools\n\npairs = list(itertools.combinations('abcd', 2))\nprint(len(pairs), pairs[:3])"),
    ("JavaScript", "const once = fn => {\n  let done = false, value;\n  return (...a) => done ? value : (done = true, "
     "value = fn(...a));\n};"),
    ("TypeScript", "type Shape = { kind: 'circle'; r: number } | { kind: 'square'; s: number };\n"
     "const area = (x: Shape) =>\n  x.kind === 'circle' ? Math.PI * x.r ** 2 : x.s ** 2;"),
    ("C++", "std::vector<int> v{5, 3, 8, 1};\nstd::sort(v.begin(), v.end(), std::greater<>());\nfor (int x : v) "
     "std::cout << x << ' ';"),
    ("SQL", "SELECT city, name, salary,\n       RANK() OVER (PARTITION BY city ORDER BY salary DESC) AS r\n"
     "FROM staff;"),
)


def _bug(rng: random.Random) -> tuple[str, str]:
    lang, code, symptom = rng.choice(BUGGY)
    text = rng.choice((
        "This {lang} code has a bug: {sym}. Find it and fix it.\n\n```\n{code}\n```",
        "Why does this {lang} snippet misbehave ({sym})?\n\n```\n{code}\n```", "Can you debug this? In {lang}, "
        "{sym}.\n\n```\n{code}\n```", "Review the following {lang} code. What is wrong with it, and how would you "
        "fix it?\n\n```\n{code}\n```", "A colleague wrote this {lang} and says {sym}. Explain the cause.\n\n```\n"
        "{code}\n```", "Something is off in this {lang} code: {sym}. Point to the faulty line and correct it."
        "\n\n```\n{code}\n```", "```\n{code}\n```\n\nThis {lang} code was meant to work, but {sym}. What "
        "went wrong?")).format(lang=lang, sym=symptom, code=code)
    return text, pick(rng, ("Write a test that would have caught this bug.", "Are there other problems in the "
                            "code besides this one?", "How could a linter or type checker have warned about it?"))


def _explain(rng: random.Random) -> tuple[str, str]:
    lang, code = rng.choice(SNIPPETS)
    other = rng.choice([x for x in ("Python", "JavaScript", "Go", "Rust", "Java", "C") if x != lang])
    text = rng.choice((
        "Explain what this {lang} code does:\n\n```\n{code}\n```", "What does the following {lang} snippet do, "
        "step by step?\n\n```\n{code}\n```", "Translate this {lang} code into {other}:\n\n```\n{code}\n```",
        "Add comments and a docstring (or header comment) to this {lang} code:\n\n```\n{code}\n```",
        "Is there anything risky or surprising in this {lang} code?\n\n```\n{code}\n```", "I found this {lang} in "
        "our code base. When would someone write it like this?\n\n```\n{code}\n```", "Write unit tests for this "
        "{lang} code:\n\n```\n{code}\n```", "Rewrite this {lang} code so a beginner can follow it:\n\n```\n"
        "{code}\n```", "```\n{code}\n```\n\nWhat is the time complexity of this {lang} code, and can it be "
        "improved?", "Convert this {lang} snippet to {other} and point out what had to change:\n\n```\n{code}"
        "\n```")).format(
        lang=lang, code=code, other=other)
    return text, pick(rng, ("Give an example input and the output it produces.", "How would you test it?",
                            "Rewrite it in a more beginner-friendly way."), FOLLOWUPS[4:7])


_CONCEPTS = (
    ("a list", "a tuple", "Python"), ("let", "var", "JavaScript"), ("the stack", "the heap", "C"), ("a process",
    "a thread", None), ("an interface", "an abstract class", "Java"), ("==", "===", "JavaScript"), ("a pointer",
    "a reference", "C++"), ("composition", "inheritance", None), ("TCP", "UDP", None), ("a compiler", "an "
    "interpreter", None), ("SQL joins", "subqueries", "SQL"), ("a mutex", "a semaphore", None), ("ownership",
    "borrowing", "Rust"), ("goroutines", "operating-system threads", "Go"), ("a shallow copy", "a deep copy",
    "Python"), ("REST", "GraphQL", None), ("unit tests", "integration tests", None), ("git merge", "git rebase",
    None), ("a hash map", "a balanced tree map", None), ("async/await", "callbacks", "JavaScript"),
    ("static typing", "dynamic typing", None), ("a generator", "a list comprehension", "Python"), ("null",
    "undefined", "JavaScript"), ("a struct", "a class", "C++"), ("a slice", "an array", "Go"), ("Box", "Rc",
    "Rust"), ("checked", "unchecked exceptions", "Java"), ("a lambda", "a named function", "Python"), ("HTTP GET",
    "HTTP POST", None), ("a primary key", "a unique index", "SQL"), ("optimistic", "pessimistic locking", None),
    ("recursion", "iteration", None), ("a queue", "a stack", None), ("horizontal", "vertical scaling", None))
_DESIGNS = (
    "a URL shortener", "a parking garage", "a library's book-lending system", "a to-do list app with reminders",
    "a chat room server", "a vending machine", "an elevator controller", "a leaderboard for an online game",
    "a cache in front of a slow API", "a simple text editor's undo feature", "a recipe-sharing website",
    "a booking system for a small cinema", "a plugin system for a command-line tool", "a job queue with retries",
    "a bike-sharing app's back end", "a spelling checker", "a system that sends each user a daily email digest")


def _concept(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.35:
        text = rng.choice(("How would you design the classes for {d}? Sketch them in {lang}.", "Outline the data "
                           "model and main functions for {d}.", "What are the main components of {d}, and how do "
                           "they talk to each other?")).format(d=rng.choice(_DESIGNS), lang=rng.choice(LANGS))
        return text, pick(rng, ("How would the design change for a million users?", "Write the code for the most "
                                "important class."))
    a, b, lang = rng.choice(_CONCEPTS)
    where = f" in {lang}" if lang else ""
    text = rng.choice(("What is the difference between {a} and {b}{w}?", "When should I use {a} rather than "
                       "{b}{w}?", "Explain {a} versus {b}{w}, with a short code example.", "Compare {a} and {b}{w} "
                       "for a beginner.", "I keep confusing {a} and {b}{w}. What is a good way to remember which "
                       "is which?", "Give me a table of the trade-offs between {a} and {b}{w}.")).format(
        a=a, b=b, w=where)
    return text, pick(rng, ("Give a real bug that comes from confusing the two.", "Show a small example where the "
                            "choice matters for performance."), FOLLOWUPS[5:6])


_PATTERNS = (
    "UK postcodes", "dates in the form DD/MM/YYYY", "hexadecimal colour codes such as #1a2B3c", "times in 24-hour "
    "format", "IPv4 addresses", "words that start and end with the same letter", "prices like $4.99 or $1,200",
    "US phone numbers in several common formats", "lines that contain TODO but not DONE", "repeated words such as "
    "'the the'", "semantic version numbers like 1.4.2", "Markdown links", "strong passwords (8+ characters with a "
    "digit and a capital)", "ISO dates like 2025-01-31", "quoted strings that may contain escaped quotes",
    "HTML tags and their attributes", "numbers written with a thousands separator", "file names ending in .csv or "
    ".tsv", "Twitter-style hashtags")


def _regex(rng: random.Random) -> tuple[str, str]:
    lang = rng.choice(("Python", "JavaScript", "Go", "Java"))
    text = rng.choice(("Write a regular expression that matches {p}.", "Give me a {lang} regex for {p}, and show it "
                       "in use.", "How can I find {p} in a text file with a regex? Use {lang}.", "What regex would "
                       "validate {p}? Give test strings that pass and fail.")).format(
        p=rng.choice(_PATTERNS), lang=lang)
    return text, pick(rng, ("Which strings does it wrongly accept or reject?", "Explain the regex piece by piece."))


KINDS = (_function, _function, _function, _function, _class, _sql, _sql, _shell, _bug, _bug, _explain, _explain,
         _concept, _regex)


def make(rng: random.Random) -> tuple[str, str]:
    """One coding prompt and its follow-up."""
    return rng.choice(KINDS)(rng)
