"""Heads exported to GGUF run in llama.cpp (in process, xllamacpp) exactly as in our torch loop.

The shipped SmolLM2 head on the float32 SmolLM2 GGUF: greedy outputs equal plain llama.cpp's (and our
loop's), and llama.cpp's tokens per round equal our tau within ``TAU_TOLERANCE``. The same parity check
must fail for two broken exports (tapped layers off by one; d2t as offsets), so it can catch a wrong
export. The tiny demo head runs on the demo target written as a GGUF (llama.cpp loads its BPE tokenizer).

Accounting (see ``llamacpp_support.torch_loop``): llama.cpp samples the first token from the prompt's
logits without drafting, so our loop starts from prompt + that token with the budget minus one; both then
draft min(gamma, remaining - 1) tokens a round, and tau = 1 + accepted / draft rounds on both sides.
"""

import sys

import numpy as np
import pytest

from eaglehead.builtin.corpus import heldout_excerpts
from eaglehead.builtin.gguf_target import rewrite_gguf, write_llama_gguf
from eaglehead.engines.llamacpp import (INSTALL_HINT, Eagle3Draft, LlamaCppError, LlamaCppMissing, LlamaCppProcess,
                                        LlamaCppServer, NgramDraft, import_xllamacpp)
from eaglehead.builtin.shipped import load_demo_target
from eaglehead.decode.eagle import load_eagle_drafter
from eaglehead.draftheads.checkpoint import load_head
from eaglehead.draftheads.gguf_head import export_gguf

from tests.builtin.llamacpp_support import (ASSETS, BUDGET, GAMMA, SMOLLM2_HEAD, TAU_TOLERANCE, THREADS,
                                            assert_no_near_tie, llamacpp_runs, llamacpp_tau, shipped_head_gguf,
                                            smollm2, smollm2_f32, smollm2_prompts, torch_loop, workdir)

_OURS: dict = {}


def _our_smollm2_loop():
    """Our torch loop on the SmolLM2 prompts (computed once): (outputs, tau)."""
    if not _OURS:
        model, tok = smollm2()
        outputs, accepted, rounds = torch_loop(model, tok, load_eagle_drafter(str(SMOLLM2_HEAD), model),
                                               smollm2_prompts(), GAMMA, BUDGET)
        _OURS.update(outputs=outputs, tau=1.0 + accepted / rounds)
    return _OURS["outputs"], _OURS["tau"]


def test_missing_wheel_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import now raises ImportError
    with pytest.raises(LlamaCppMissing) as err:
        import_xllamacpp()
    assert "pip install 'eaglehead[llamacpp]'" in str(err.value) and "xllamacpp==2026.10.11549" in str(err.value)
    assert INSTALL_HINT in str(err.value)


def test_shipped_head_matches_our_loop_in_llamacpp():
    model, _ = smollm2()
    plain = llamacpp_runs(smollm2_f32(), None)
    eagle = llamacpp_runs(smollm2_f32(), shipped_head_gguf())
    ours, tau_ours = _our_smollm2_loop()
    for prompt, p, e, o in zip(smollm2_prompts(), plain, eagle, ours):
        assert_no_near_tie(model, list(prompt), p.tokens)  # a tie could flip either way: not a valid probe
        assert e.tokens == p.tokens == o
        assert e.timings["draft_n"] > 0 and e.draft_rounds > 0 and p.draft_rounds == 0
        assert e.ttft_s > 0 and e.wall_s > e.ttft_s
    tau = llamacpp_tau(eagle)
    assert tau > 1.3, f"the shipped head barely drafts in llama.cpp (tau {tau:.3f})"
    assert abs(tau - tau_ours) <= TAU_TOLERANCE, f"llama.cpp tau {tau:.3f} vs ours {tau_ours:.3f}"


@pytest.mark.parametrize("broken", ["layers_off_by_one", "d2t_as_offsets"])
def test_parity_check_catches_a_broken_export(broken):
    """A head whose tapped layers are shifted by one (the SGLang +1 convention applied twice) or whose d2t
    holds offsets instead of target ids still decodes exactly (verification), but its tau leaves ours."""
    good = shipped_head_gguf()
    if broken == "layers_off_by_one":
        ids = load_head(SMOLLM2_HEAD).config.fused_layer_ids
        bad = rewrite_gguf(good, workdir() / f"{broken}.gguf", kv={"eagle3.target_layers": [i + 1 for i in ids]},
                           overwrite=True)
    else:
        import gguf

        absolute = np.asarray(next(t for t in gguf.GGUFReader(good).tensors if t.name == "d2t").data)
        bad = rewrite_gguf(good, workdir() / f"{broken}.gguf",
                           tensors={"d2t": absolute - np.arange(absolute.size)}, overwrite=True)
    runs = llamacpp_runs(smollm2_f32(), bad)
    ours, tau_ours = _our_smollm2_loop()
    assert [r.tokens for r in runs] == ours
    tau = llamacpp_tau(runs)
    assert abs(tau - tau_ours) > TAU_TOLERANCE, f"{broken}: llama.cpp tau {tau:.3f} vs ours {tau_ours:.3f}"


@pytest.fixture(scope="module")
def demo():
    """The demo target as a float32 GGUF and the demo head exported against it; prompts: held-out stdlib text."""
    model, tok, _ = load_demo_target()
    target = write_llama_gguf(model, tok, workdir() / "demo-target.gguf", overwrite=True)
    head = export_gguf(load_head(ASSETS / "demo_eagle3"), workdir() / "demo-head.gguf", target=target,
                       dtype="float32", overwrite=True)
    prompts = [tok(text)["input_ids"][:48] for _, text in heldout_excerpts(400)[:3]]
    return model, tok, target, head, prompts


def test_demo_head_runs_in_llamacpp(demo):
    model, tok, target, head, prompts = demo
    with LlamaCppServer(target, threads=THREADS, n_ctx=256, warmup=False) as server:
        plain = [server.complete(p, BUDGET) for p in prompts]
    draft = Eagle3Draft(head, n_max=GAMMA)
    with LlamaCppServer(target, threads=THREADS, n_ctx=256, warmup=False, eagle3=draft) as server:
        eagle = [server.complete(p, BUDGET, stream=True) for p in prompts]
    ours, accepted, rounds = torch_loop(model, tok, load_eagle_drafter(str(ASSETS / "demo_eagle3"), model),
                                        prompts, GAMMA, BUDGET)
    for p, e, o in zip(plain, eagle, ours):
        assert e.tokens == p.tokens == o
        assert len(e.chunk_times_s) >= 2 and e.ttft_s == e.chunk_times_s[0]
    tau = llamacpp_tau(eagle)
    assert tau > 1.5 and abs(tau - (1 + accepted / rounds)) <= TAU_TOLERANCE


def test_ngram_lookup_and_refusals(demo, tmp_path):
    _, _, target, _, prompts = demo
    with LlamaCppServer(target, threads=THREADS, n_ctx=256, warmup=False) as server:
        plain = server.complete(prompts[0], BUDGET)
        sampled = [server.complete(prompts[0], 16, temperature=1.0, seed=s).tokens for s in (1, 1, 2)]
        assert sampled[0] == sampled[1] != sampled[2]  # the seed decides the draws
        with pytest.raises(LlamaCppError, match="refused the request"):
            server.complete([10 ** 6], 4)  # not a token id of this vocabulary
    lookup_draft = NgramDraft(size_n=2, size_m=3)
    with LlamaCppServer(target, threads=THREADS, n_ctx=256, warmup=False, ngram=lookup_draft) as server:
        lookup = server.complete(prompts[0], BUDGET)
    assert lookup.tokens == plain.tokens and lookup.timings["draft_n"] > 0 and lookup.draft_rounds > 0
    server.close()
    with pytest.raises(LlamaCppError, match="closed"):
        server.complete(prompts[0], 4)
    with pytest.raises(ValueError, match="at most one of eagle3 and ngram"):
        LlamaCppServer(target, threads=THREADS, eagle3=Eagle3Draft(target), ngram=NgramDraft())
    _assert_bad_model_files_refused(LlamaCppServer, tmp_path)


def _assert_bad_model_files_refused(server_class, tmp_path):
    """A missing file is a ValueError naming model_path; a file llama.cpp cannot load, a LlamaCppError."""
    with pytest.raises(ValueError, match="model_path .*no such file"):
        server_class(tmp_path / "missing.gguf", threads=THREADS)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(LlamaCppError, match=f"could not start on model_path {junk}"):
        server_class(junk, threads=THREADS)


def test_a_server_in_a_child_process_answers_as_in_process_and_reports_errors_by_type(demo, tmp_path):
    """LlamaCppProcess (the evaluation's servers, kept out of torch's OpenMP runtime): the same greedy tokens,
    timings and draft rounds as in process; errors raised here with their type; the child gone after close."""
    _, _, target, head, prompts = demo
    draft = Eagle3Draft(head, n_max=GAMMA)
    with LlamaCppServer(target, threads=THREADS, n_ctx=256, warmup=False, eagle3=draft) as server:
        here = [server.complete(p, BUDGET) for p in prompts[:2]]
    child = LlamaCppProcess(target, threads=THREADS, n_ctx=256, warmup=False, eagle3=draft)
    there = [child.complete(p, BUDGET) for p in prompts[:2]]
    streamed = child.complete(prompts[0], BUDGET, stream=True)
    for a, b in zip(here, there):
        assert b.tokens == a.tokens and b.draft_rounds == a.draft_rounds > 0
        assert b.timings["draft_n_accepted"] == a.timings["draft_n_accepted"]
    assert streamed.tokens == here[0].tokens and len(streamed.chunk_times_s) >= 2
    with pytest.raises(LlamaCppError, match="refused the request"):
        child.complete([10 ** 6], 4)
    with pytest.raises(ValueError, match="token_ids must be a non-empty list of ints"):
        child.complete([], 4)
    assert child.complete(prompts[0], BUDGET).tokens == here[0].tokens  # still serving after errors
    pid = child._proc.pid
    child.close()
    assert child._proc.poll() is not None, f"child {pid} still running after close"
    with pytest.raises(LlamaCppError, match="closed"):
        child.complete(prompts[0], 4)
    _assert_bad_model_files_refused(LlamaCppProcess, tmp_path)


def test_the_child_server_dies_with_its_parent(demo):
    """A parent killed with SIGKILL (as at a session's end) takes its llama.cpp child with it."""
    import os
    import signal
    import subprocess
    import time

    _, _, target, _, _ = demo
    code = ("import sys, time\nfrom eaglehead.engines.llamacpp import LlamaCppProcess\n"
            f"s = LlamaCppProcess({str(target)!r}, threads=1, n_ctx=256, warmup=False)\n"
            "print(s._proc.pid, flush=True)\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # running
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError(f"the llama.cpp child {child} outlived its killed parent by 5 s")
