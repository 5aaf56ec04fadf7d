"""The process of the built-in llama.cpp server; started by ``eaglehead.datagen.engine_llamacpp.start_server``:

    python llamacpp_server.py '{"model": "x.gguf", "slots": 8, "n_ctx": 32768, "threads": 2, "http_threads": 10,
                                "api_key": null, "alias": null, "parent": 1234}'

Optional keys (the load sweep's N-slot servers, ``eval/load_drivers.py``): ``"draft": {"kind": "eagle3" | "dflash",
"path": "head.gguf", "n_max": 3}`` or ``{"kind": "ngram", "size_n": 3, "size_m": 3}`` (set as
``LlamaCppServer`` sets it), ``"metrics": true`` (``GET /metrics``, the draft-round counter), ``"port": N`` (listen
there, not at a port the system picks) with ``"until_killed": true`` (serve until a signal ends it, stdin unread:
for ``engines.process.ServerProcess``, which gives its children no stdin).

Starts llama.cpp's server (the xllamacpp wheel) on 127.0.0.1 at a port the system picks, writes one JSON line to
stdout, ``{"url": "http://127.0.0.1:N"}`` or ``{"error": "..."}``, then waits for stdin to close and leaves at once.

It cannot outlive its parent: the parent holds its stdin (closed when the parent exits, however it ends) and, on
Linux, the kernel sends it SIGKILL when the parent dies (``PR_SET_PDEATHSIG``). It leaves with ``os._exit``: the
server's own teardown waits for requests in flight and can hang when one is. It is a script, not a module of the
package, so that it imports nothing but xllamacpp and ``eaglehead.engines.llamacpp`` (standard library only) and
starts in a fraction of a second.
"""

import json
import os
import signal
import sys


def main() -> None:
    from eaglehead.engines.llamacpp import die_with_parent  # standard library only: no torch

    spec = json.loads(sys.argv[1])
    if not die_with_parent(spec["parent"]):
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops this process
    try:
        import xllamacpp as xl

        p = xl.CommonParams()
        p.model.path = spec["model"]
        p.hostnames, p.port = ["127.0.0.1"], int(spec.get("port", 0))  # loopback only; 0: the system picks one
        p.n_parallel, p.n_ctx = spec["slots"], spec["n_ctx"]  # llama.cpp splits n_ctx evenly between the slots
        p.cpuparams.n_threads = p.cpuparams_batch.n_threads = spec["threads"]
        p.n_threads_http = spec["http_threads"]
        p.verbosity = -1
        if spec.get("draft"):
            _draft(p, xl, spec["draft"], spec["threads"])
        if spec.get("metrics"):
            p.endpoint_metrics = True
        if spec.get("api_key"):
            p.api_keys = [spec["api_key"]]
        if spec.get("alias"):
            p.model_alias = {spec["alias"]}
        server = xl.Server(p)
    except Exception as err:  # noqa: BLE001 (any failure is reported to the parent, which names the file)
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
        os._exit(1)
    print(json.dumps({"url": server.listening_address}), flush=True)
    if spec.get("until_killed"):
        signal.pause()  # the parent's SIGTERM (or our death with it) ends us
    sys.stdin.buffer.read()  # until the parent closes it or exits
    os._exit(0)


def _draft(p, xl, draft: dict, threads: int) -> None:
    from eaglehead.engines.llamacpp import DFlashDraft, Eagle3Draft, NgramDraft, set_draft

    kind = draft["kind"]
    kinds = {"eagle3": lambda: {"eagle3": Eagle3Draft(draft["path"], n_max=int(draft["n_max"]))},
             "dflash": lambda: {"dflash": DFlashDraft(draft["path"], n_max=int(draft["n_max"]))},
             "ngram": lambda: {"ngram": NgramDraft(int(draft["size_n"]), int(draft["size_m"]))}}
    if kind not in kinds:
        raise ValueError(f"draft.kind must be one of {sorted(kinds)}, got {kind!r}")
    chosen = {"eagle3": None, "ngram": None, "dflash": None, **kinds[kind]()}
    set_draft(p.speculative, xl.common_speculative_type, threads, chosen["eagle3"], chosen["ngram"], chosen["dflash"])


if __name__ == "__main__":
    main()
