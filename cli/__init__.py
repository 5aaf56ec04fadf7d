"""eaglehead: train EAGLE-3 draft heads for a Hugging Face causal LM and decode with them exactly.

The library: ``eaglehead.draftheads`` (head modules, configs, checkpoints and exports), ``eaglehead.decode``
(sampling, the exact chain verifier, the generation loop), ``eaglehead.train`` (training data, rollout loss,
the accelerate recipe) and ``eaglehead.eval`` (metrics, sweeps, reports), on ``eaglehead.builtin`` (built-in
models, prompt sets, loaders). Above them: ``eaglehead.datagen`` (chat data the target writes),
``eaglehead.pretrain`` (small LMs from scratch), ``eaglehead.diagnostics`` and ``eaglehead.demos``. This
folder holds only the top-level package and the command line that wires them (``eaglehead --help``).
"""

__version__ = "0.1.0"
