"""The decode and verify benchmarks at a tiny size (seconds), and gpu_check's refusal without CUDA."""

import pytest
import torch

from eaglehead.eval import bench_decode, gpu_check


def test_benchmark_main_tiny(capsys):
    result = bench_decode.main(["--layers", "1", "--hidden", "64", "--vocab", "128", "--new-tokens", "12",
                                "--prompts", "2", "--repeats", "2", "--lookup-tokens", "3", "--prompt-length", "8"])
    assert [r["method"] for r in result["rows"]] == list(bench_decode.METHODS)
    assert set(bench_decode.METHODS) == {"vanilla", "hf-generate", "prompt-lookup", "hf-prompt-lookup"}
    assert result["identical"] is True and result["mismatches"] == []
    for r in result["rows"]:
        assert 0 < r["ms_per_token_min"] <= r["ms_per_token_median"] <= r["ms_per_token_max"]
        assert r["cpu_ms_per_token_median"] > 0
    tau = {r["method"]: r["tau"] for r in result["rows"]}
    assert tau["vanilla"] == 1.0 and tau["hf-generate"] == 1.0  # one target forward per token
    assert tau["prompt-lookup"] >= 1.0 and tau["hf-prompt-lookup"] >= 1.0
    assert set(result["ratios"]) == {"vanilla/hf-generate", "prompt-lookup/hf-prompt-lookup"}
    assert all(v["median"] > 0 and v["paired_median"] > 0 for v in result["ratios"].values())
    printed = capsys.readouterr().out
    assert "token-identical across all four methods: True" in printed
    assert all(m in printed for m in bench_decode.METHODS)


def test_interleaving_alternates_methods():
    calls = []

    def runner(name):
        return lambda x: (calls.append(name), ([[1]], 1))[1]

    prompts = [torch.zeros(1, 2, dtype=torch.long)] * 2
    timed = bench_decode.interleaved_timings({"a": runner("a"), "b": runner("b")}, prompts, repeats=2)
    warmup, measured = calls[:4], calls[4:]
    assert warmup == ["a", "b", "a", "b"]
    # ABAB: each prompt of each round runs both methods back to back, the first one rotating.
    assert measured == ["a", "b", "b", "a", "b", "a", "a", "b"]
    assert len(timed["wall"]["a"]) == 2 and len(timed["wall"]["a"][0]) == 2


def test_gpu_check_exits_2_without_cuda(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_gpu_check_identity_helpers_on_cpu():
    target = bench_decode.build_llama(2, 64, 96, seed=3)
    draft = gpu_check.truncated_copy(target, 1)
    assert torch.equal(draft.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight) and len(draft.model.layers) == 1
    # The full identity check (float32, batch 1 and left-padded 4, ours and HF) runs on CPU as well.
    assert gpu_check.check_identity(target, draft, "cpu", new_tokens=6, with_hf=True) is True

    prompt = list(range(10, 20))
    ref = bench_decode.vanilla_generate(target, torch.tensor([prompt]), sampling=bench_decode.GREEDY,
                                        max_new_tokens=5).tokens[0]
    assert gpu_check.first_divergence(target, prompt, ref, ref) is None
    with torch.no_grad():
        logits = target(torch.tensor([prompt + ref[:2]])).logits[0, -1]
    order = logits.argsort(descending=True).tolist()
    assert order[0] == ref[2]
    for other in (order[1], order[-1]):  # the runner-up, then the least likely token
        got = ref[:2] + [other] + ref[3:]
        k, gap, tol = gpu_check.first_divergence(target, prompt, ref, got)
        assert k == 2 and abs(gap - float(logits[ref[2]] - logits[other])) < 1e-5
        assert tol == 1e-4 * max(1.0, abs(float(logits[ref[2]])), abs(float(logits[other])))
        same, ties, bad = gpu_check.identity_rows(target, [prompt, prompt], [ref, ref], [ref, got])
        assert (same, ties + bad) == (1, 1) and bad == (gap > tol)
    assert bad == 1  # the least likely token is never a near-tie


def test_bench_verify_times_both_verifiers_in_both_dtypes(capsys):
    from eaglehead.eval.bench_verify import main

    assert main(["--vocab", "64", "--gamma", "3", "--tree", "9", "--repeats", "3", "--threads", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "greedy fast path" in line]
    assert len(lines) == 4 and sum("bfloat16" in line for line in lines) == 2
    with pytest.raises(SystemExit, match="--tree must be >= 1"):
        main(["--tree", "0"])


def test_context_benchmark_times_each_part_at_each_context(capsys):
    """bench_context on a tiny Llama and a fresh EAGLE-3 head: every part timed at every context, the head's
    cache left at the context after its timed steps, the round cost in decode steps as defined, bad lists named."""
    from eaglehead.decode.eagle import Eagle3Drafter
    from eaglehead.draftheads.config import Eagle3Config
    from eaglehead.draftheads.eagle3 import Eagle3Head
    from eaglehead.eval import bench_context
    from tests.tiny_models import tiny_llama

    model = tiny_llama(layers=4).eval()
    torch.manual_seed(0)
    drafter = Eagle3Drafter(Eagle3Head(Eagle3Config.from_target_config(model.config, draft_vocab_size=64)), model)
    rows = bench_context.context_costs(model, drafter, [8, 40], [2, 3], repeats=2)
    assert [r["context"] for r in rows] == [8, 40]
    assert int(drafter.cache.lengths[0]) == 40  # each timed head step was cropped away again
    for r in rows:
        assert r["token_s"] > 0 and r["head_step_s"] > 0 and r["attn_sdpa_s"] > 0 and r["attn_grouped_s"] > 0
        for g in (2, 3):
            assert r[f"round_steps_{g}"] == pytest.approx((r[f"verify_{g + 1}_s"] + g * r["head_step_s"])
                                                          / r["token_s"])
    # the timed attention paths compute the same thing (float32 reference; bfloat16 within its rounding)
    for queries, batch in ((1, 1), (4, 1), (4, 3)):
        ref = bench_context.attention_paths(model.config, torch.float32, 300, queries, batch)["sdpa"]()
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            paths = bench_context.attention_paths(model.config, dtype, 300, queries, batch)
            assert set(paths) == set(bench_context.PATHS)
            for name, fn in paths.items():
                out = fn()
                assert out.shape == (batch, queries, 4, 8), name
                torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
    att = bench_context.attention_rows(model.config, torch.float32, [8, 40], [1, 3], repeats=2, batch=2)
    assert [(r["context"], r["queries"]) for r in att] == [(8, 1), (8, 3), (40, 1), (40, 3)]
    assert all(r[name] > 0 for r in att for name in bench_context.PATHS)
    assert len(bench_context.format_attention_table(att).splitlines()) == 5
    table = bench_context.format_table(rows, [2, 3]).splitlines()
    assert len(table) == 3 and "gamma 3: break-even tau" in table[0]
    with pytest.raises(SystemExit):
        bench_context.main(["--contexts", "1"])
    assert "--contexts" in capsys.readouterr().err
