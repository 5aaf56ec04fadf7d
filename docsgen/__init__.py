"""Pages of the documentation that are generated, never edited: the command-line and config references
(:mod:`.reference`, from the argparse parser and the typed config dataclasses) and the results
(:mod:`.results`, from the checked-in ``report.json`` summaries under ``docs/reports/``).

The command that writes them all (and ``--check``, which writes nothing and names every stale file) is
``python -m eaglehead.docs``: it lives in the top package because the command-line reference needs the
``eaglehead`` parser, and only the top package may import it.
"""
