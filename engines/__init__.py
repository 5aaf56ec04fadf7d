"""Serving engines: vLLM (its CPU build in a venv of its own, a child process on 127.0.0.1) and llama.cpp (the
``xllamacpp`` wheel, in process, in a child process, or as an HTTP server child for data generation).

Standard library only at import (xllamacpp and vLLM are imported where they run), so that ``datagen`` and ``eval``
can start a server without importing torch; it sits on ``builtin`` and both of them may import it
(``tests/test_layers.py``).
"""

from .llamacpp import (INSTALL_HINT, XLLAMACPP_VERSION, Completion, DFlashDraft, Eagle3Draft, LlamaCppError,
                       LlamaCppMissing, LlamaCppProcess, LlamaCppServer, NgramDraft, import_xllamacpp)
from .process import EngineDied, EngineError, EngineTimeout, ServerProcess, free_port
from .vllm_engine import (INSTALL_COMMAND, VERSION, OfflineJob, SpecCounters, StreamedCompletion, VllmLoadError,
                          VllmMissing, VllmServer, parse_spec_counters, run_offline, vllm_python)

__all__ = ["EngineDied", "EngineError", "EngineTimeout", "ServerProcess", "free_port", "INSTALL_COMMAND",
           "OfflineJob", "SpecCounters", "StreamedCompletion", "VERSION", "VllmLoadError", "VllmMissing", "VllmServer",
           "parse_spec_counters", "run_offline", "vllm_python", "INSTALL_HINT", "XLLAMACPP_VERSION", "Completion",
           "DFlashDraft", "Eagle3Draft", "LlamaCppError", "LlamaCppMissing", "LlamaCppProcess", "LlamaCppServer",
           "NgramDraft", "import_xllamacpp"]
