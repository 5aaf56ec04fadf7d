"""Several vLLM configurations in one process, in sequence; run with vLLM's own interpreter by
``eaglehead.engines.vllm_engine.run_offline``:

    .venv-vllm/bin/python vllm_offline.py '{"model": DIR, "dtype": "float32", "max_model_len": 1024,
        "prompts": [[1, 2, 3]], "max_tokens": 48, "out": "runs.jsonl",
        "configs": [{"name": "plain", "speculative": null}, ...]}'

Appends one JSON line per configuration to ``spec["out"]`` (vLLM logs to stdout, which goes to the log):
``{"name", "startup_s", "wall_s", "outputs": [[ids]], "counters": {...}}`` or ``{"name", "error", "wall_s"}``.
Why not one server per configuration: a server start costs ~45 s on 2 cores (imports, API server, engine), an
``LLM`` in a process that has already imported vLLM starts in ~20 s with its engine core in a child process (eager;
the child imports vLLM and torch again) and in 3-4 s with the engine core in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here; measured 2026-12-07 alone on 2 cores: the proof's nine
configurations 315 s -> 140 s, the same counters; BENCHMARKS.md). In one process, a configuration that uses vLLM's
n-gram proposer (numba) leaves llvmlite in a state in which the next ``LLM`` fails to build (``'_lib_fn_wrapper'
object has no attribute 'get'``): those run last. A script, not a module of the package: it imports vLLM, which
only its own venv has (and it must not sit beside a module named ``vllm.py``: its directory is the first entry of sys.path).
"""

import gc
import json
import os
import sys
import time


def counters(llm) -> dict:
    """vLLM's speculative counters (the /metrics ones) from the offline engine's stat loggers."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted",
             "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos"}
    for metric in llm.get_metrics():
        key = names.get(metric.name)
        if key == "accepted_per_pos":
            out[key] = [int(v) for v in metric.values]
        elif key:
            out[key] = int(metric.value)
    return out


def run(spec: dict, config: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    start = time.perf_counter()
    llm = LLM(spec["model"], dtype=spec.get("dtype", "float32"), max_model_len=spec.get("max_model_len", 1024),
              enforce_eager=spec.get("enforce_eager", True), speculative_config=config.get("speculative"),
              disable_log_stats=False, seed=0)
    startup = time.perf_counter() - start
    # vLLM's Prometheus counters live in one registry per process: a later configuration's engine may start
    # from an earlier one's totals, so a configuration's figures are the difference over its own requests
    before = counters(llm)
    try:
        params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True)
        # one prompt at a time, as our loop and a batch-1 server run them (batching changes no greedy token
        # here, but it would change how rounds are counted if requests finished in the same step)
        outputs = [list(llm.generate([TokensPrompt(prompt_token_ids=p)], params, use_tqdm=False)[0]
                        .outputs[0].token_ids) for p in spec["prompts"]]
        after = counters(llm)
        delta = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted")}
        old = before["accepted_per_pos"] + [0] * len(after["accepted_per_pos"])
        delta["accepted_per_pos"] = [a - b for a, b in zip(after["accepted_per_pos"], old)]
        return {"name": config["name"], "startup_s": startup, "outputs": outputs, "counters": delta}
    finally:
        llm.llm_engine.engine_core.shutdown()  # its engine core (and its KV cache), before the next configuration's
        del llm
        gc.collect()


def _uses_ngram(config: dict) -> bool:
    return (config.get("speculative") or {}).get("method") == "ngram"


def main() -> None:
    spec = json.loads(sys.argv[1])
    # the engine core in this process: no child that imports vLLM again for every configuration
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    for config in sorted(spec["configs"], key=_uses_ngram):  # stable: n-gram ones last, the rest in order
        start = time.perf_counter()
        try:
            line = run(spec, config)
        except Exception as err:  # noqa: BLE001 (reported per configuration: a head vLLM cannot load)
            line = {"name": config["name"], "error": f"{type(err).__name__}: {err}"}
        line["wall_s"] = time.perf_counter() - start
        with open(spec["out"], "a") as out:
            out.write(json.dumps(line) + "\n")


if __name__ == "__main__":  # vLLM spawns its engine core: the main module must not run again in it
    main()
