"""Diagnostics that join decoding and training: why a head's acceptance is what it is.

    python -m eaglehead.diagnostics.head_accuracy --head DIR --target PATH --prompts mt-bench
    python -m eaglehead.diagnostics.learning_curve --run DIR [--run DIR ...] --target PATH --prompts mt-bench --out DIR
"""
