"""Serving engines run as child processes on 127.0.0.1 (vLLM today; llama.cpp still lives in ``builtin.llamacpp``).

Standard library only, so that ``datagen`` and ``eval`` can start a server without importing torch; it sits on
``builtin`` and both of them may import it (``tests/test_layers.py``).
"""

from .process import EngineDied, EngineError, EngineTimeout, ServerProcess, free_port
from .vllm_engine import (INSTALL_COMMAND, VERSION, OfflineJob, SpecCounters, StreamedCompletion, VllmLoadError,
                          VllmMissing, VllmServer, parse_spec_counters, run_offline, vllm_python)

__all__ = ["EngineDied", "EngineError", "EngineTimeout", "ServerProcess", "free_port", "INSTALL_COMMAND",
           "OfflineJob", "SpecCounters", "StreamedCompletion", "VERSION", "VllmLoadError", "VllmMissing", "VllmServer",
           "parse_spec_counters", "run_offline", "vllm_python"]
