"""Diagnostics that join decoding and training: why a head's acceptance is what it is.

    python -m eaglehead.diagnostics.head_accuracy --head DIR --target PATH --prompts mt-bench
"""
