"""Exact speculative decoding: sampling transforms, the chain and tree verifiers, drafters and the loops."""

from .drafters import DraftModelDrafter, Drafter, PromptLookupDrafter
from .generate import DEFAULT_GAMMA, GenerationResult, RoundRecord, speculative_generate, vanilla_generate
from .sampling import SamplingConfig, probs, sample_from, sample_inverse_cdf
from .tree import DraftTree, verify_tree, verify_tree_greedy
from .tree_generate import TreeRoundRecord, tree_generate
from .verify import verify_chain, verify_chain_greedy

__all__ = [
    "DEFAULT_GAMMA", "Drafter", "DraftModelDrafter", "DraftTree", "PromptLookupDrafter", "GenerationResult",
    "RoundRecord", "SamplingConfig", "TreeRoundRecord", "probs", "sample_from", "sample_inverse_cdf",
    "speculative_generate", "tree_generate", "vanilla_generate", "verify_chain", "verify_chain_greedy",
    "verify_tree", "verify_tree_greedy",
]
