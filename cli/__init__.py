"""eaglehead: train EAGLE-3 draft heads for a Hugging Face causal LM and decode with them exactly.

Sub-packages: ``eaglehead.draftheads`` (modules, configs, checkpoints), ``eaglehead.decode``
(sampling, the exact chain verifier, the generation loop), ``eaglehead.train`` (data, rollout
loss, the accelerate recipe) and ``eaglehead.eval`` (metrics, sweeps, reports). This folder holds
only the top-level package and the command line that wires them (``eaglehead --help``).
"""

__version__ = "0.1.0"
