"""The end-to-end demos ``eaglehead demo`` runs: :mod:`~eaglehead.demos.stdlib` (the built-in target trained on the
Python standard library) and :mod:`~eaglehead.demos.smollm2` (SmolLM2-135M-Instruct on MT-bench), with what they
share in :mod:`~eaglehead.demos.common`."""
