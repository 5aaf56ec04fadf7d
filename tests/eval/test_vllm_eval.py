"""vLLM as an engine of ``eaglehead eval`` (methods ``vllm``, ``vllm-eagle3``; ``vllm-ngram``'s configuration is
proven in ``tests/engines/test_vllm.py``) beside the torch methods, on the float32 SmolLM2 and its shipped EAGLE 3.1
head exported on the fly in the speculators layout (the eagle3 layout is proven there too): one report with vLLM's
rows, greedy outputs equal to torch vanilla's at batch 1 and as 2 concurrent requests, vLLM's tau and survival from
its own counters within the proof's tolerance of our loop's, and the plan-time refusals.

Cost: two vLLM servers (plain and EAGLE-3; ~25-45 s a start on 2 cores, eager), started once for the module.
"""

import json

import pytest

from eaglehead.engines import INSTALL_COMMAND
from eaglehead.eval import vllm_methods
from eaglehead.eval.engine_result import engine_round_fields
from eaglehead.eval.plan import EvalPlan
from eaglehead.eval.runner import run_eval
from tests.builtin.llamacpp_support import ASSETS, BUDGET, GAMMA, QUESTION_IDS

HEAD = str(ASSETS / "smollm2_eagle3")  # the shipped EAGLE 3.1 head
TAU_TOLERANCE = 0.05  # as tests/engines/test_vllm.py: the bound


def _prompts(path):
    """MT-bench first turns ``QUESTION_IDS`` (no greedy near-tie within ``BUDGET`` tokens, llamacpp_support)."""
    from eaglehead.eval.prompts import load_prompt_set

    ids = {str(q) for q in QUESTION_IDS}
    rows = [{"id": p.id, "category": p.category, "turns": p.turns[:1]} for p in load_prompt_set("mt-bench")
            if p.id in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plan(prompts, out, **kw) -> EvalPlan:
    base = dict(target="builtin:smollm2-135m-instruct", prompts=str(prompts), drafts={"eagle3": HEAD},
                gamma_mode="fixed", gammas=(GAMMA,), max_new_tokens=BUDGET, tune_fraction=0.0, out=str(out),
                device="cpu", vllm_head_format="speculators")
    return EvalPlan(**{**base, **kw})


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return _prompts(tmp_path_factory.mktemp("prompts") / "mt_bench_first_turns.jsonl")


@pytest.fixture(scope="module")
def report(prompts, tmp_path_factory):
    plan = _plan(prompts, tmp_path_factory.mktemp("vllm") / "out", methods=["vanilla", "eagle3", "vllm-eagle3"],
                 batch_sizes=(1, 2))
    return run_eval(plan), plan


def _overall(report, method, batch_size):
    rows = [r for r in report["runs"] if r["method"] == method and r["batch_size"] == batch_size
            and r["category"] == "all" and r.get("turn") in (None, "all")]
    assert len(rows) == 1, (method, batch_size, len(rows))
    return rows[0]


def test_one_report_with_vllm_rows(report):
    rep, plan = report
    assert plan.methods == ["vanilla", "vllm", "eagle3", "vllm-eagle3"]  # plain vLLM added: its reference
    assert rep["consistency_violations"] == []
    assert rep["config"]["vllm"]["head_format"] == "speculators"
    assert rep["config"]["vllm"]["dtype"] == "float32"
    for bsz in (1, 2):
        plain, spec = _overall(rep, "vllm", bsz), _overall(rep, "vllm-eagle3", bsz)
        assert plain["engine"] == spec["engine"] == "vllm"
        assert plain["requests"] == spec["requests"] == 3
        assert plain["tau"] == 1.0 and spec["speedup_vs_engine"] is not None
        assert spec["time_per_token_s"] > 0 and spec["ttft_s"] > 0
    assert any("concurrent requests" in n for n in rep["notes"])


@pytest.mark.parametrize("batch_size", [1, 2])
def test_vllm_greedy_outputs_equal_torch_vanilla(report, batch_size):
    """float32 vLLM runs the torch model: plain and speculative outputs equal torch vanilla's, also when the rows
    are concurrent requests batched by vLLM."""
    rep, _ = report
    for method in ("vllm", "vllm-eagle3"):
        row = _overall(rep, method, batch_size)
        assert row["identity_reference"] == "vllm"
        assert row["mismatched_prompts"] == 0, (method, batch_size)
        assert row["mismatched_vanilla_prompts"] == 0, (method, batch_size)
    assert rep["identity"]["engines"]["vllm"]["all_identical"]


def test_vllm_tau_and_survival_come_from_its_counters_and_match_ours(report):
    """Compared where both engines draft the same thing: survival by position, over the rounds that drafted that
    position. The two taus differ at the budget's edge by accounting, not by acceptance: our loop shortens its
    last drafts to the budget left (rounds of gamma 2, 1, 0 count in its tau), vLLM drafts 3 to the end and counts
    acceptances past max_tokens (measured here: tau 2.286 vs 2.355, survival sums 1.353 vs 1.355)."""
    rep, _ = report
    ours, theirs = _overall(rep, "eagle3", 1), _overall(rep, "vllm-eagle3", 1)
    survival = theirs["survival"]
    assert len(survival) == GAMMA == len(ours["survival"]) and all(a >= b for a, b in zip(survival, survival[1:]))
    assert theirs["tau"] == pytest.approx(1.0 + sum(survival))  # every vLLM round drafts GAMMA: one reading
    full_ours, full_theirs = 1.0 + sum(ours["survival"]), 1.0 + sum(survival)
    assert full_theirs > 1.3
    assert abs(full_theirs - full_ours) <= TAU_TOLERANCE, (full_theirs, full_ours)
    for a, b in zip(survival, ours["survival"]):
        assert abs(a - b) <= TAU_TOLERANCE, (survival, ours["survival"])
    # concurrency changes nothing the head proposes: the same prompts give the same acceptance
    assert _overall(rep, "vllm-eagle3", 2)["tau"] == pytest.approx(theirs["tau"], abs=TAU_TOLERANCE)


def test_engine_round_fields_of_concurrent_requests():
    """Two requests of 5 tokens in one call: 8 committed by rounds; survival by position from the counters."""
    stats = [{"engine": "vllm", "n_max": 3, "draft_rounds": 4, "drafted": 12, "accepted": 4,
              "accepted_per_pos": [3, 1, 0], "predicted_n": 10, "requests": 2, "predicted_ms": 80.0,
              "prompt_n": 20, "prompt_ms": 5.0, "wall_s": 0.1}]
    f = engine_round_fields(stats)
    assert f["committed_tokens"] == 8 and f["rounds"] == 4 and f["tau"] == pytest.approx(2.0)
    assert f["survival"] == pytest.approx([0.75, 0.25, 0.0])
    assert f["conditional"] == pytest.approx([0.75, 1 / 3, 0.0])
    assert f["time_per_token_s"] == pytest.approx(0.01)
    mixed = [stats[0], {**stats[0], "n_max": 2, "accepted_per_pos": [1, 0]}]
    assert engine_round_fields(mixed)["survival"] == []  # two draft lengths: no single survival curve


def test_without_vllm_the_plan_names_the_install_command(prompts, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLEHEAD_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ValueError, match="--methods vllm") as err:
        _plan(prompts, tmp_path / "out", methods=["vllm"])
    assert INSTALL_COMMAND in str(err.value)


def test_more_servers_than_memory_holds_are_refused_before_loading(prompts, tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_methods, "_available_gib", lambda: 2 * vllm_methods.SERVER_MEMORY_GIB + 1)
    _plan(prompts, tmp_path / "a", methods=["vllm-eagle3"])  # plain + one draft length: 2 servers fit
    with pytest.raises(ValueError, match="would start 9 servers"):
        _plan(prompts, tmp_path / "b", methods=["vllm-eagle3"], gamma_mode="auto", gammas=tuple(range(1, 9)))


def test_vllm_eagle3_needs_a_draft(prompts, tmp_path):
    with pytest.raises(ValueError, match="--methods vllm-eagle3 needs --draft"):
        _plan(prompts, tmp_path / "out", methods=["vllm-eagle3"], drafts={})


def _tiny_dflash(tmp_path):
    """A DFlash drafter (block 5) of a 4-layer target, saved in our layout."""
    from transformers import LlamaConfig

    from eaglehead.draftheads.checkpoint import save_pretrained
    from eaglehead.draftheads.dflash import DFlashConfig, DFlashHead

    target = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=64)
    cfg = DFlashConfig.from_target_config(target, mask_token_id=5, fused_layer_ids=[1, 2, 3], block_size=5)
    return save_pretrained(DFlashHead(cfg), tmp_path / "dflash")


def test_vllm_dflash_exports_its_drafter_and_serves_it(tmp_path, monkeypatch):
    """``vllm-dflash``: the ``--dflash`` drafter exported in z-lab's layout (vLLM's run of it is proven in
    ``tests/engines/test_vllm.py``), its speculative config naming it, and the engines serving each method's own
    drafter; draft lengths past the block and a drafter of another kind refused by name."""
    from pathlib import Path

    from eaglehead.draftheads.checkpoint import head_layout

    src = str(_tiny_dflash(tmp_path))
    out = vllm_methods.export_dflash_drafter(src, tmp_path / "vllm", [2, 4])
    assert head_layout(out) == "dflash" and out == tmp_path / "vllm" / "dflash-zlab"
    assert vllm_methods.speculative_config("vllm-dflash", 4, out) == {
        "method": "dflash", "model": str(out), "num_speculative_tokens": 4}
    assert vllm_methods.speculative_config("vllm-dflash", 0, out) is None  # draft length 0: the plain server
    with pytest.raises(ValueError, match=r"--dflash .*num_speculative_tokens=5: .* drafts 1..4 tokens"):
        vllm_methods.export_dflash_drafter(src, tmp_path / "vllm", [5])
    with pytest.raises(ValueError, match="Eagle3Head, not a DFlash drafter"):
        vllm_methods.export_dflash_drafter(HEAD, tmp_path / "other", [3])
    started = []
    monkeypatch.setattr(vllm_methods, "VllmServer", lambda model, speculative=None, **kw: started.append(speculative))
    engines = vllm_methods.VllmEngines("target", dtype="float32", max_model_len=256, threads=1, eos=set(),
                                       head_dir=Path("eagle3-head"), python=None, enforce_eager=True,
                                       log_dir=tmp_path, describe={}, dflash_dir=out)
    engines.server("vllm-dflash", 4)
    engines.server("vllm-eagle3", 3)
    assert [s["method"] for s in started] == ["dflash", "eagle3"]
    assert [s["model"] for s in started] == [str(out), "eagle3-head"]


def test_a_load_sweep_against_a_real_vllm_server(prompts, tmp_path):
    """The load generator's vLLM driver against vLLM itself (``tests/eval/test_load_vllm.py`` fakes the server):
    two concurrent requests at a time, streamed token ids with their arrival times, vLLM's greedy outputs equal to
    the torch loop's committed counts, and the server's memory measured. One plain server (~25-45 s to start)."""
    plan = _plan(prompts, tmp_path / "load", methods=["vanilla", "vllm"], concurrency=(2,), load_requests=4)
    rep = run_eval(plan)
    rows = {r["method"]: r for r in rep["load"]}
    assert set(rows) == {"vanilla", "vllm"} and rows["vllm"]["engine"] == "vllm"
    torch_row, vllm_row = rows["vanilla"], rows["vllm"]
    for r in (torch_row, vllm_row):
        assert not r["saturated"] and r["requests"] == 4 and r["concurrency"] == 2
        assert 0 < r["ttft_p50_s"] <= r["e2e_p50_s"] and r["itl_p95_s"] >= r["itl_p50_s"] > 0
        assert r["kv_bytes"] > 0
    # greedy float32: vLLM commits what the torch loop commits, EOS endings included
    assert vllm_row["committed_tokens"] == torch_row["committed_tokens"]
    assert vllm_row["eos_shortened"] == torch_row["eos_shortened"]
    assert vllm_row["speedup"] == pytest.approx(1.0)  # plain vLLM is its own baseline
    assert vllm_row["peak_bytes"] > 500 * 2**20  # the float32 weights alone are ~540 MB
