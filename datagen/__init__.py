"""Chat training data the target writes itself: prompt synthesis, answer regeneration, their benchmark.

    eaglehead prepare --data-config configs/smollm2-135m-instruct-data.yaml     # resumable
    python -m eaglehead.datagen --config configs/smollm2-135m-instruct-data.yaml
    python -m eaglehead.datagen.bench --engines torch,hf-generate,llama.cpp:as-is:8  # tokens/s of each engine

Modules: :mod:`~eaglehead.datagen.config` (the data config), :mod:`~eaglehead.datagen.pipeline` (the
stages and their shards), :mod:`~eaglehead.datagen.stream` (the in-process batched sampler),
:mod:`~eaglehead.datagen.engines` (``regenerate.engine``: a running OpenAI-compatible server,
``engine_openai``, or llama.cpp started by eaglehead, ``engine_llamacpp`` (its process ``engines/llamacpp_server.py``);
requests, retries and concurrency in ``engine_http``),
:mod:`~eaglehead.datagen.chat_data` and :mod:`~eaglehead.datagen.task_prompts` (text: seed prompts,
cleaning, overlap filter, shard files).
"""

from .config import ChatDataConfig
from .pipeline import main, run

__all__ = ["ChatDataConfig", "main", "run"]
