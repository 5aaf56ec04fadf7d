"""Exact speculative decoding: sampling transforms, the chain verifier, drafters and the loop."""

from .drafters import DraftModelDrafter, Drafter, PromptLookupDrafter
from .generate import DEFAULT_GAMMA, GenerationResult, RoundRecord, speculative_generate, vanilla_generate
from .sampling import SamplingConfig, probs, sample_from, sample_inverse_cdf
from .verify import verify_chain

__all__ = [
    "DEFAULT_GAMMA", "Drafter", "DraftModelDrafter", "PromptLookupDrafter", "GenerationResult", "RoundRecord",
    "SamplingConfig", "probs", "sample_from", "sample_inverse_cdf", "speculative_generate", "vanilla_generate", "verify_chain",
]
