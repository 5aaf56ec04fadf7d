"""The DFlash block drafter exported to GGUF runs in llama.cpp's ``draft-dflash`` (in process, xllamacpp) as in
our torch loop.

The shipped SmolLM2 drafter (``builtin/assets/smollm2_dflash``, partially trained: tau ~1.19) on the float32
SmolLM2 GGUF, drafting ``N_MAX = block_size - 1`` tokens a round: the only draft length at which llama.cpp's
block ``[last, MASK x n_max]`` is our drafter's whole block (its attention is non-causal, so a shorter block
drafts other tokens). Greedy outputs equal plain llama.cpp's and our loop's; llama.cpp's tokens per round
(``1 + draft_n_accepted / draft rounds``) equal our tau within ``TAU_TOLERANCE``; and because this drafter is
weak, the parity is also checked per prompt and exactly (accepted tokens and draft rounds), guarded by the
top-2 margin of our drafter's logits on every slot that decided a round (a near-tie there could flip one
acceptance either way).

Budget: ``TOKENS = 32`` generated tokens a prompt (the shared ``BUDGET`` of 48 made this file take ~100 s on
the loaded 2-core machine; plain llama.cpp's 48-token runs are the shared ones, compared on their first 32).

Measured (2026-12-06, 3 prompts, 32 tokens): llama.cpp and ours both [(4, 26), (5, 25), (7, 23)] (accepted,
draft rounds) per prompt, tau 1.2162 both (48 tokens: 22 in 116 both, tau 1.1897); smallest deciding margin
of our drafter 0.032 (48 tokens). Negative controls: the target layers written one lower (z-lab's
``target_layer_ids``, ours minus one, the likely mistake) give [(5, 25), (4, 26), (7, 23)]: the same totals,
tau 1.2162, so the tau bound cannot catch it with this weak drafter, the per-prompt counts do; one higher gives
[(5, 25), (5, 25), (8, 22)], tau 1.2500 (0.034 off, just past TAU_TOLERANCE). The test runs the first
control on the first prompt only (one server start).
"""

import numpy as np
import pytest
import torch

from eaglehead.builtin.gguf_target import read_target_gguf, rewrite_gguf
from eaglehead.engines.llamacpp import DFlashDraft, Eagle3Draft, LlamaCppServer
from eaglehead.builtin.packages import smollm2_gguf_path
from eaglehead.decode.dflash import load_dflash_drafter
from eaglehead.draftheads.checkpoint import load_head
from eaglehead.draftheads.dflash import DFlashConfig, DFlashHead
from eaglehead.draftheads.dflash_gguf import DFlashGGUFError, export_dflash_gguf, gguf_tensor_name

from tests.builtin.llamacpp_support import (ASSETS, BUDGET, MARGIN, TAU_TOLERANCE, THREADS, assert_no_near_tie,
                                            llamacpp_runs, llamacpp_tau, smollm2, smollm2_f32, smollm2_prompts,
                                            torch_loop, workdir)

DRAFTER = ASSETS / "smollm2_dflash"
TOKENS = 32  # generated tokens a prompt (module docstring)
_CACHE: dict = {}


def _drafter_config() -> DFlashConfig:
    return load_head(DRAFTER).config


N_MAX = 15  # the shipped drafter's block_size - 1 (checked in the test)


def _gguf(dtype: str = "float32"):
    if dtype not in _CACHE:
        _CACHE[dtype] = export_dflash_gguf(load_head(DRAFTER), workdir() / f"smollm2-dflash-{dtype}.gguf",
                                           target=smollm2_f32(), dtype=dtype, overwrite=True)
    return _CACHE[dtype]


def _dflash_runs(path, prompts):
    with LlamaCppServer(smollm2_f32(), threads=THREADS, n_ctx=1024, dflash=DFlashDraft(path, n_max=N_MAX),
                        warmup=False) as server:
        return [server.complete(list(p), TOKENS) for p in prompts]


class _MarginRecorder:
    """Our DFlash drafter, recording by how much its logits decided each round: on an accepted slot the top-2
    margin (any other winner is rejected), on the first rejected one the lead of its draft over the target's
    token (only that token winning would change the count)."""

    def __init__(self, drafter):
        self.drafter, self.margins, self._logits = drafter, [], None
        draft_logits = drafter.head.draft_logits

        def recorded(*args, **kwargs):
            self._logits = draft_logits(*args, **kwargs)
            return self._logits

        drafter.head.draft_logits = recorded

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def propose(self, *args, **kwargs):
        self._logits = None
        return self.drafter.propose(*args, **kwargs)

    def commit(self, n_accepted, draft, next_token, target_features):
        if self._logits is not None and self._logits.shape[1]:
            logits, a = self._logits[0], n_accepted[0]
            if a:
                top2 = logits[:a].topk(2).values
                self.margins.append(float((top2[:, 0] - top2[:, 1]).min()))
            if a < logits.shape[0]:
                self.margins.append(float(logits[a, draft[0, a]] - logits[a, next_token[0]]))
        self.drafter.commit(n_accepted, draft, next_token, target_features)


def _ours():
    """Our loop per prompt at N_MAX (computed once): (outputs, [(accepted, rounds)], smallest deciding margin)."""
    if not _CACHE.get("ours"):
        model, tok = smollm2()
        outputs, counts, margins = [], [], []
        for p in smollm2_prompts():
            drafter = _MarginRecorder(load_dflash_drafter(str(DRAFTER), model))
            out, accepted, rounds = torch_loop(model, tok, drafter, [p], N_MAX, TOKENS)
            outputs += out
            counts.append((accepted, rounds))
            margins += drafter.margins
        _CACHE["ours"] = (outputs, counts, min(margins))
    return _CACHE["ours"]


def _counts(runs):
    return [(r.timings["draft_n_accepted"], r.draft_rounds) for r in runs]


def test_dflash_gguf_matches_our_loop_in_llamacpp():
    assert _drafter_config().block_size - 1 == N_MAX
    model, _ = smollm2()
    plain = llamacpp_runs(smollm2_f32(), None)  # BUDGET tokens, shared with tests/engines/test_llamacpp.py
    assert BUDGET >= TOKENS
    dflash = _dflash_runs(_gguf(), smollm2_prompts())
    ours, counts, margin = _ours()
    for prompt, p, d, o in zip(smollm2_prompts(), plain, dflash, ours):
        assert_no_near_tie(model, list(prompt), p.tokens)  # a tie could flip either way: not a valid probe
        assert d.tokens == p.tokens[:TOKENS] == o
        assert d.timings["draft_n"] > 0 and d.draft_rounds > 0 and p.draft_rounds == 0
    assert margin >= MARGIN, f"our drafter has a near-tie on a deciding slot ({margin:.4f}): choose other prompts"
    assert _counts(dflash) == counts  # exact, per prompt: (accepted, draft rounds)
    tau, tau_ours = llamacpp_tau(dflash), 1.0 + sum(a for a, _ in counts) / sum(r for _, r in counts)
    assert tau > 1.1, f"the shipped drafter barely drafts in llama.cpp (tau {tau:.3f})"
    assert abs(tau - tau_ours) <= TAU_TOLERANCE, f"llama.cpp tau {tau:.3f} vs ours {tau_ours:.3f}"


def test_parity_check_catches_target_layers_off_by_one():
    """z-lab's ids (ours minus one) written as they are: still exact decoding (verification), other drafts.
    On the first prompt alone (one server start, ~1/3 of the work) its acceptance count leaves ours (module
    docstring: its tau over all three prompts equals ours)."""
    ids = _drafter_config().fused_layer_ids
    bad = rewrite_gguf(_gguf(), workdir() / "dflash-layers-minus-one.gguf",
                       kv={"dflash.target_layers": [i - 1 for i in ids]}, overwrite=True)
    prompt = smollm2_prompts()[:1]
    run = _dflash_runs(bad, prompt)
    ours, counts, _ = _ours()
    assert run[0].tokens == ours[0]
    assert _counts(run) != counts[:1], f"off-by-one target layers: {_counts(run)} as ours {counts[:1]}"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_gguf_reads_back_as_llamacpp_expects(dtype):
    import gguf

    head = load_head(DRAFTER)
    cfg = head.config
    reader = gguf.GGUFReader(_gguf(dtype))
    f = {k: v.contents() for k, v in reader.fields.items() if not k.startswith("GGUF.")}
    assert f["general.architecture"] == "dflash" and f["dflash.target_layers"] == cfg.fused_layer_ids
    assert (f["dflash.block_size"], f["dflash.block_count"], f["dflash.target_hidden_size"]) == (16, 2, 576)
    assert f["dflash.attention.causal"] is False and f["tokenizer.ggml.mask_token_id"] == cfg.mask_token_id
    assert (f["dflash.attention.head_count"], f["dflash.attention.head_count_kv"], f["dflash.attention.key_length"],
            f["dflash.feed_forward_length"]) == (9, 3, 64, 1536)
    if dtype == "float32":  # the tokenizer is copied as it is (reading it is slow: once)
        assert f["tokenizer.ggml.tokens"] == read_target_gguf(smollm2_f32()).tokenizer["tokenizer.ggml.tokens"][0]
    tensors = {t.name: t for t in reader.tensors}
    state = head.state_dict()
    assert set(tensors) == {gguf_tensor_name(k) for k in state}
    assert {"fc.weight", "enc.output_norm.weight", "output_norm.weight", "blk.1.attn_k_norm.weight"} <= set(tensors)
    for key, want in state.items():
        t = tensors[gguf_tensor_name(key)]
        shape = tuple(int(n) for n in reversed(t.shape))
        got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        expect_f32 = dtype == "float32" or want.ndim == 1  # norms stay float32; no q/k permutation (NEOX RoPE)
        assert (t.tensor_type == gguf.GGMLQuantizationType.F32) == expect_f32
        np.testing.assert_allclose(got, want.float().numpy(), rtol=0 if expect_f32 else 1e-3, atol=0 if expect_f32 else 1e-4)


def _tiny_dflash(**overrides) -> DFlashHead:
    cfg = {**_drafter_config().to_dict(), **overrides}
    torch.manual_seed(0)
    return DFlashHead(DFlashConfig(**cfg))


@pytest.mark.parametrize("head, kw, match", [
    ("id L", {}, r"fused_layer_ids \[2, 9, 15, 21, 30\]: \[30\] not in 0..29.*final-normed"),
    ("llama3", {}, "rope_scaling: rope_type 'llama3' cannot run"),
    ("vocab", {}, "target_vocab_size 50000, the target has 49152"),
    ("shipped", {"dtype": "int8"}, "dtype must be one of"),
    ("shipped", {"overwrite": False}, "exists; pass overwrite=True"),
    ("eagle3", {}, "head_type 'eagle3' is not 'dflash'"),
    ("shipped", {"target": "nothing"}, "expected a .gguf file or a Hugging Face model directory"),
])
def test_export_refuses_what_llamacpp_cannot_run(head, kw, match):
    heads = {
        "id L": lambda: _tiny_dflash(fused_layer_ids=[2, 9, 15, 21, 30]),
        "llama3": lambda: _tiny_dflash(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 2048}),
        "vocab": lambda: _tiny_dflash(target_vocab_size=50000),
        "shipped": lambda: load_head(DRAFTER),
        "eagle3": lambda: load_head(ASSETS / "smollm2_eagle3"),
    }
    path = _gguf() if kw.get("overwrite") is False else workdir() / "refused.gguf"
    kw = {"overwrite": True, **kw, "target": workdir() / kw["target"] if "target" in kw else smollm2_f32()}
    with pytest.raises(DFlashGGUFError, match=match):
        export_dflash_gguf(heads[head](), path, **kw)
    assert not (workdir() / "refused.gguf").exists()


def test_the_server_refuses_a_draft_length_past_the_block_and_a_file_that_is_not_dflash():
    with pytest.raises(ValueError, match="dflash.n_max 16: a DFlash drafter of block_size 16 drafts at most 15"):
        LlamaCppServer(smollm2_f32(), threads=THREADS, dflash=DFlashDraft(_gguf(), n_max=16))
    with pytest.raises(ValueError, match="general.architecture is 'llama', not 'dflash'"):
        LlamaCppServer(smollm2_f32(), threads=THREADS, dflash=DFlashDraft(smollm2_gguf_path(), n_max=3))
    with pytest.raises(ValueError, match="at most one of eagle3 and ngram and dflash"):
        LlamaCppServer(smollm2_f32(), threads=THREADS, dflash=DFlashDraft(_gguf()), eagle3=Eagle3Draft(_gguf()))
    with pytest.raises(ValueError, match="dflash.path .*: no such file"):
        LlamaCppServer(smollm2_f32(), threads=THREADS, dflash=DFlashDraft(workdir() / "missing.gguf"))
