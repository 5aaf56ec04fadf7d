"""Both shipped heads, exported as vLLM loads them, run in vLLM's CPU build exactly as in our torch loop.

On the float32 SmolLM2 and the MT-bench prompts of the llama.cpp proof (``llamacpp_support``: no near-tie on their
greedy paths): greedy outputs equal plain vLLM's and our loop's, and vLLM's tokens per round (1 + accepted /
rounds, from its speculative counters) equal our tau within ``TAU_TOLERANCE``. Two broken exports must leave that
bound: the tapped layers off by one, and the EAGLE 3.1 head without its ``fc_norm`` / ``norm_output`` config keys
(vLLM 0.32's ``llama_eagle3.py`` builds the per-layer fc norms and returns the post-norm hidden state only when
they are set). The eval's ``vllm-ngram`` configuration runs here too; the speculators layout of the EAGLE 3.1 head
runs through ``eaglehead eval`` in ``tests/eval/test_vllm_eval.py``.

The shipped DFlash block drafter (``builtin/assets/smollm2_dflash``) runs as vLLM's ``"method": "dflash"`` in both
export layouts (z-lab's and speculators'), drafting ``block_size - 1`` tokens a round (the only length at which
vLLM's block of ``1 + n`` slots is the drafter's whole block). It is still weak (tau ~1.2, every acceptance at
the first slot), and a broken export barely moves its tau: the target layers one higher measured 18 accepted
against 16 (tau 1.240 vs 1.208, inside the bound), the block run causally 15. So the DFlash parity is exact on the
accepted-token count, and the tokens-per-round bound is checked beside it. vLLM counts one more draft round per
request than our loop (77 against 74 at 32 tokens, 2026-12-06): the proposal made after the request's last
verification, never verified, which accepts nothing; accepted tokens are compared, not rounds.

Cost: all the configurations run in one vLLM process, in sequence (``OfflineJob``, started at collection by
``tests/conftest.py`` so that it overlaps the tests before this module; the engine core in that process: 3-5 s a
start, eager, on 2 cores, against 16-25 s with a child engine core and 22-44 s a server), once per test session:
~140 s for vLLM alone on 2 cores (2026-12-07) and ~20 s for our loop.

Accounting: vLLM samples the first token from the prompt's prefill without drafting, as llama.cpp does, so our
loop is ``torch_loop`` (the llama.cpp tests'): first token from the prompt, then rounds of gamma drafts.
"""

import json
from functools import cache
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from eaglehead.builtin.models import resolve_target
from eaglehead.decode.eagle import load_eagle_drafter
from eaglehead.decode.dflash import load_dflash_drafter
from eaglehead.draftheads.checkpoint import export_eagle3, load_head
from eaglehead.draftheads.dflash_export import export_dflash, vllm_speculative_config
from eaglehead.engines import INSTALL_COMMAND, OfflineJob, VllmMissing, parse_spec_counters, vllm_python
from eaglehead.eval.vllm_methods import speculative_config
from tests.builtin.llamacpp_support import (ASSETS, BUDGET, GAMMA, assert_no_near_tie, smollm2, smollm2_prompts,
                                            torch_loop, workdir)

HEADS = {"plain": ASSETS / "smollm2_eagle3_plain", "eagle31": ASSETS / "smollm2_eagle3"}
DFLASH = ASSETS / "smollm2_dflash"
TAU_TOLERANCE = 0.05  # the bound; one accepted token moves tau by ~0.013 here (3 prompts, ~75 rounds)


def _spec(head_dir: Path) -> dict:
    return {"method": "eagle3", "model": str(head_dir), "num_speculative_tokens": GAMMA}


def _edit_export(src: Path, dst: Path, edit_config, drop_weights: str | None = None) -> Path:
    """A copy of an eagle3-layout export with its config edited (and weights whose name starts with
    ``drop_weights`` removed, which vLLM would refuse once their config key is gone)."""
    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    edit_config(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    state = load_file(src / "model.safetensors")
    save_file({k: v for k, v in state.items() if not (drop_weights and k.startswith(drop_weights))},
              dst / "model.safetensors")
    return dst


def _shift_layers(config: dict) -> None:
    config["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in config["eagle_aux_hidden_state_layer_ids"]]
    inner = config["eagle_config"]
    inner["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in inner["eagle_aux_hidden_state_layer_ids"]]


def _shift_dflash_layers(config: dict) -> None:
    ids = config["dflash_config"]["target_layer_ids"]
    config["dflash_config"]["target_layer_ids"] = [i + 1 for i in ids]


def _drop_norm_keys(config: dict) -> None:
    assert config.pop("fc_norm") is True and config.pop("norm_output") is True  # the 3.1 head sets both


@cache
def configurations() -> list[dict]:
    out = workdir() / "vllm"
    plain = export_eagle3(load_head(HEADS["plain"]), out / "plain-eagle3", overwrite=True)
    e31 = export_eagle3(load_head(HEADS["eagle31"]), out / "eagle31-eagle3", overwrite=True)
    shifted = _edit_export(plain, out / "plain-layers-off-by-one", _shift_layers)
    no_norms = _edit_export(e31, out / "eagle31-no-norms", _drop_norm_keys, drop_weights="fc_norm")
    dflash = load_head(DFLASH)
    block = dflash.config.block_size  # drafts block - 1 a round
    zlab = export_dflash(dflash, out / "dflash-zlab", overwrite=True)
    spec_layout = export_dflash(dflash, out / "dflash-speculators", layout="speculators", overwrite=True)
    dflash_plus_one = _edit_export(zlab, out / "dflash-layers-plus-one", _shift_dflash_layers)
    return [{"name": "vanilla", "speculative": None},
            {"name": "dflash_zlab", "speculative": vllm_speculative_config(zlab, block)},
            {"name": "dflash_speculators", "speculative": vllm_speculative_config(spec_layout, block)},
            {"name": "dflash_layers_plus_one", "speculative": vllm_speculative_config(dflash_plus_one, block)},
            {"name": "plain", "speculative": _spec(plain)},
            {"name": "eagle31", "speculative": _spec(e31)},
            {"name": "ngram", "speculative": speculative_config("vllm-ngram", GAMMA)},  # eval's vllm-ngram
            {"name": "layers_off_by_one", "speculative": _spec(shifted)},
            {"name": "eagle31_without_norms", "speculative": _spec(no_norms)}]


_JOB: list[OfflineJob] = []


def start_proof() -> OfflineJob:
    """The one offline vLLM run of every configuration, started once (``tests/conftest.py`` starts it at collection,
    so its start-ups overlap the tests before this module)."""
    if not _JOB:
        target = resolve_target("builtin:smollm2-135m-instruct", "float32")  # the torch model's weights exactly
        _JOB.append(OfflineJob(target, [list(p) for p in smollm2_prompts()], BUDGET, configurations()))
    return _JOB[0]


def stop_proof() -> None:
    for job in _JOB:
        job.close()


@pytest.fixture(scope="module")
def vllm_runs():
    return start_proof().result()


@cache
def ours(head: str):
    """Our torch loop on the same prompts, budget and gamma: (outputs, tau)."""
    model, tok = smollm2()
    outputs, accepted, rounds = torch_loop(model, tok, load_eagle_drafter(str(HEADS[head]), model),
                                           smollm2_prompts(), GAMMA, BUDGET)
    return outputs, 1.0 + accepted / rounds


def test_missing_vllm_venv_names_the_install_command(tmp_path, monkeypatch):
    with pytest.raises(VllmMissing) as err:
        vllm_python(tmp_path / "bin" / "python")
    assert INSTALL_COMMAND in str(err.value) and "--vllm-python" in str(err.value)
    monkeypatch.setenv("EAGLEHEAD_VLLM_PYTHON", str(tmp_path / "nope"))
    with pytest.raises(VllmMissing, match="EAGLEHEAD_VLLM_PYTHON"):
        vllm_python()


def test_the_make_install_venv_is_there():
    """Not a skip: without .venv-vllm the proof below cannot run, and this names the command that installs it."""
    assert vllm_python().is_file()


def test_spec_counters_parse_from_metrics_text():
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="smol"} 5.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="smol"} 1.79e+09',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="smol"} 15.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 4.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="1"} 1.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smol",position="0"} 3.0'])
    c = parse_spec_counters(text)
    assert (c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos) == (5, 15, 4, [3, 1])
    assert c.tokens_per_round == pytest.approx(1.8)


@pytest.mark.parametrize("name, head", [("plain", "plain"), ("eagle31", "eagle31")])
def test_shipped_head_matches_our_loop_in_vllm(vllm_runs, name, head):
    model, _ = smollm2()
    vanilla, run = vllm_runs["vanilla"], vllm_runs[name]
    our_outputs, tau_ours = ours(head)
    for prompt, v, e, o in zip(smollm2_prompts(), vanilla.outputs, run.outputs, our_outputs):
        assert_no_near_tie(model, list(prompt), v)  # a tie could flip either way: not a valid probe
        assert e == v == o
    assert vanilla.counters.drafts == 0 and run.counters.drafts > 0
    assert sum(run.counters.accepted_per_pos) == run.counters.accepted
    tau = run.counters.tokens_per_round
    assert tau > 1.3, f"the head barely drafts in vLLM (tokens per round {tau:.3f})"
    assert abs(tau - tau_ours) <= TAU_TOLERANCE, f"vLLM tokens per round {tau:.3f} vs our tau {tau_ours:.3f}"


def test_ngram_lookup_of_the_eval_drafts_and_decodes_exactly(vllm_runs):
    """``vllm-ngram``'s configuration (the eval's): vLLM's n-gram proposer drafts, accepts some, and the outputs
    stay plain vLLM's."""
    vanilla, run = vllm_runs["vanilla"], vllm_runs["ngram"]
    assert run.outputs == vanilla.outputs
    assert run.counters.drafts > 0 and run.counters.accepted > 0


@pytest.mark.parametrize("name, head", [("layers_off_by_one", "plain"), ("eagle31_without_norms", "eagle31")])
def test_parity_check_catches_a_broken_export(vllm_runs, name, head):
    """A broken head still decodes exactly (verification), but its tokens per round leave our tau."""
    run, vanilla = vllm_runs[name], vllm_runs["vanilla"]
    assert run.outputs == vanilla.outputs
    tau, tau_ours = run.counters.tokens_per_round, ours(head)[1]
    assert abs(tau - tau_ours) > TAU_TOLERANCE, f"{name}: vLLM {tau:.3f} vs ours {tau_ours:.3f} within the bound"


@cache
def ours_dflash():
    """Our loop with the shipped DFlash drafter, drafting block_size - 1 a round: (outputs, accepted, rounds)."""
    model, tok = smollm2()
    drafter = lambda: load_dflash_drafter(str(DFLASH), model)  # noqa: E731 (a fresh drafter cache a prompt)
    outputs, accepted, rounds = [], 0, 0
    for prompt in smollm2_prompts():
        out, a, r = torch_loop(model, tok, drafter(), [prompt], load_head(DFLASH).config.block_size - 1, BUDGET)
        outputs, accepted, rounds = outputs + out, accepted + a, rounds + r
    return outputs, accepted, rounds


@pytest.mark.parametrize("name", ["dflash_zlab", "dflash_speculators"])
def test_shipped_dflash_drafter_matches_our_loop_in_vllm(vllm_runs, name):
    vanilla, run = vllm_runs["vanilla"], vllm_runs[name]
    outputs, accepted, rounds = ours_dflash()
    assert run.outputs == vanilla.outputs == outputs
    assert run.counters.drafts >= rounds > 0 and run.counters.accepted > 0
    assert run.counters.accepted == accepted, f"{name}: vLLM accepted {run.counters.accepted}, our loop {accepted}"
    tau, tau_ours = run.counters.tokens_per_round, 1.0 + accepted / rounds
    assert abs(tau - tau_ours) <= TAU_TOLERANCE, f"vLLM tokens per round {tau:.3f} vs our tau {tau_ours:.3f}"


def test_dflash_parity_catches_target_layers_off_by_one(vllm_runs):
    run, vanilla = vllm_runs["dflash_layers_plus_one"], vllm_runs["vanilla"]
    assert run.outputs == vanilla.outputs
    assert run.counters.accepted != ours_dflash()[1], "layers one higher accept as many as the right export"
