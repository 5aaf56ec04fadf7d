"""Built-in things every layer may use: the cache root, shipped and installed models, corpora and
prompt sets. This package is the bottom of eaglehead's import graph: it imports nothing else of
eaglehead, and ``draftheads``, ``train``, ``decode``, ``eval`` and the command line all import it.
"""
