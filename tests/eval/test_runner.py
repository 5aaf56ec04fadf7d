"""``eaglehead eval``'s engine end to end on tiny local models: report files and consistency, greedy
identity of every exact method, gamma auto-selection, and the bad-input errors."""

import argparse
import json

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from tokenizers.trainers import WordLevelTrainer
from transformers import PreTrainedTokenizerFast

import eaglehead.eval.schedule as schedule
from eaglehead.decode import DraftModelDrafter, PromptLookupDrafter
from eaglehead.eval.report_html import check_html
from eaglehead.eval.plan import add_eval_arguments, parse_gamma, plan_from_args
from eaglehead.eval.report import check_report_consistency
from eaglehead.eval.runner import run_eval
from tests.tiny_models import tiny_llama

SENTENCES = [
    "user: write a short poem about the sea and the wind",
    "assistant: the sea is blue and the wind is cold",
    "user: explain how a for loop works in python code",
    "assistant: a for loop repeats the code for each item in a list",
    "user: what is the capital of france and why",
]
CHAT = "{% for m in messages %}user: {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
PROMPTS = [
    ("w1", "writing", "write a short poem about the sea"),
    ("w2", "writing", "write a poem about the wind and the sea"),
    ("w3", "writing", "write about the blue sea"),
    ("w4", "writing", "write a short poem about the cold wind"),
    ("c1", "code", "explain how a for loop works"),
    ("c2", "code", "explain the code for each item in a list"),
    ("c3", "code", "how does python code repeat"),
    ("c4", "code", "explain a loop in python"),
]


def _tokenizer() -> PreTrainedTokenizerFast:
    tk = Tokenizer(WordLevel(unk_token="<unk>"))
    tk.pre_tokenizer = WhitespaceSplit()
    tk.train_from_iterator(SENTENCES, WordLevelTrainer(special_tokens=["<unk>", "<pad>", "<s>", "</s>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>")
    tok.chat_template = CHAT
    return tok


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    tok = _tokenizer()
    vocab = len(tok)
    ids = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id)
    tiny_llama(seed=0, vocab=vocab, hidden=32, layers=3, **ids).save_pretrained(root / "target")
    tok.save_pretrained(root / "target")
    # The draft LM is the target with perturbed weights: it agrees often, but not always, so greedy
    # rounds see full acceptance, partial acceptance and first-position rejection.
    draft = tiny_llama(seed=0, vocab=vocab, hidden=32, layers=3, **ids)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for prm in draft.parameters():
            prm.add_(0.3 * prm.std() * torch.randn(prm.shape, generator=gen))
    draft.save_pretrained(root / "draft")
    tiny_llama(seed=1, vocab=vocab + 8, hidden=32, layers=1).save_pretrained(root / "other_draft")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "category": c, "turns": [t]}) + "\n" for i, c, t in PROMPTS))
    second_lm = tiny_llama(seed=2, vocab=vocab, hidden=32, layers=1)
    return {"root": root, "prompts": prompts, "vocab": vocab, "tok": tok, "second_lm": second_lm}


def _args(ws, out, *extra, factories=None):
    """The plan ``eaglehead eval`` would build from these options (validated on construction)."""
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--target", str(ws["root"] / "target"), "--prompts", str(ws["prompts"]),
                              "--out", str(out), "--device", "cpu", "--max-new-tokens", "8", *extra])
    return plan_from_args(args, drafter_factories=factories)


def _factories(ws):
    # Stand-ins for the EAGLE loaders: any exact drafter exercises the same runner paths.
    return {"eagle3": lambda target: DraftModelDrafter(ws["second_lm"]),
            "eagle1": lambda target: PromptLookupDrafter(ws["vocab"], max_ngram=2)}


ALL = "vanilla,hf-generate,eagle3,eagle1,draft-lm,prompt-lookup,hf-assisted"


@pytest.fixture(scope="module")
def full_report(workspace, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "report"
    args = _args(workspace, out, "--draft-lm", str(workspace["root"] / "draft"), "--methods", ALL,
                 "--gamma", "3", "--temperature", "0", "1", "--batch-sizes", "1,2", factories=_factories(workspace))
    return run_eval(args), out


def test_report_files_and_consistency(full_report):
    report, out = full_report
    for name in ("report.json", "report.md", "report.html", "headline.png", "survival.png", "round_time.png",
                 "itl_cdf.png"):
        assert (out / name).is_file(), name
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["consistency_violations"] == []
    assert check_report_consistency(on_disk) == []
    assert on_disk["config"]["chat_template"] is True and on_disk["config"]["test_prompts"] == 6


def test_every_method_and_state_is_reported(full_report):
    report, _ = full_report
    overall = [r for r in report["runs"] if r["category"] == "all"]
    states = {(r["method"], r["temperature"], r["batch_size"]) for r in overall}
    for t in (0.0, 1.0):
        for b in (1, 2):
            expected = set(ALL.split(",")) - ({"hf-assisted"} if b == 2 else set())
            assert {m for m, tt, bb in states if (tt, bb) == (t, b)} == expected
    assert any("hf-assisted" in n and "batch size 1" in n for n in report["notes"])
    assert all(r["assistant"] == "draft-lm" for r in overall if r["method"] == "hf-assisted")
    # Per-category rows partition the overall row: requests and output tokens add up.
    for r in overall:
        cats = [c for c in report["runs"] if c["category"] != "all" and
                (c["method"], c["temperature"], c["batch_size"], c["gamma"]) ==
                (r["method"], r["temperature"], r["batch_size"], r["gamma"])]
        assert {c["category"] for c in cats} == {"code", "writing"}
        assert sum(c["requests"] for c in cats) == r["requests"] == 6
        assert sum(c["output_tokens"] for c in cats) == r["output_tokens"]
        assert 0 <= r["eos_rows"] <= r["requests"]
        assert 1 <= r["output_len_mean"] <= 8
        assert r["peak_mem_bytes"] > 0


def test_greedy_identity_of_every_exact_method(full_report):
    report, _ = full_report
    greedy = [r for r in report["runs"] if r["temperature"] == 0.0]
    assert greedy and all(r["identical_to_vanilla"] is True and r["mismatched_prompts"] == 0 for r in greedy)
    assert all(r["identical_to_vanilla"] is None for r in report["runs"] if r["temperature"] == 1.0)
    assert report["identity"]["all_identical"] is True
    assert report["identity"]["greedy_runs_checked"] == 7 + 6
    # Speculative runs really drafted (tau counts the bonus token, so > 1 means accepted drafts).
    spec = {r["method"]: r for r in greedy if r["category"] == "all" and r["batch_size"] == 1}
    assert all(max(spec[m]["gamma_values"]) == 3 for m in ("draft-lm", "prompt-lookup", "hf-assisted"))
    assert 0 < spec["draft-lm"]["survival"][0] < 1 and spec["draft-lm"]["tau"] > 1.2
    assert spec["hf-assisted"]["tau"] > 1.2  # the same draft LM inside transformers' assisted generation
    assert all(r["speedup_vs_vanilla"] is not None for r in report["runs"])


def test_identity_check_detects_a_different_output(workspace, tmp_path, monkeypatch):
    real = schedule.speculative_generate

    def corrupt(*a, **kw):  # a broken "exact" method: the first token of every row is changed
        res = real(*a, **kw)
        for toks in res.tokens:
            toks[0] = (toks[0] + 1) % workspace["vocab"]
        return res

    monkeypatch.setattr(schedule, "speculative_generate", corrupt)
    report = run_eval(_args(workspace, tmp_path / "r", "--methods", "vanilla,prompt-lookup", "--gamma", "2"))
    by = {r["method"]: r for r in report["runs"] if r["category"] == "all"}
    assert by["vanilla"]["identical_to_vanilla"] is True
    assert by["prompt-lookup"]["identical_to_vanilla"] is False and by["prompt-lookup"]["mismatched_prompts"] == 6
    assert report["identity"]["all_identical"] is False


def test_gamma_auto_tunes_on_tune_split_and_reports_test(workspace, tmp_path, monkeypatch):
    # hf-assisted without --draft-lm uses transformers' prompt lookup (the full run covers its draft LM).
    calls, totals, real_call, real_count = [], [], schedule.run_call, schedule.count_calls
    monkeypatch.setattr(schedule, "run_call", lambda *a, **k: calls.append(a[1]) or real_call(*a, **k))
    monkeypatch.setattr(schedule, "count_calls", lambda *a: totals.append(real_count(*a)) or totals[-1])
    report = run_eval(_args(workspace, tmp_path / "auto", "--methods", "vanilla,prompt-lookup,hf-assisted",
                            "--gamma", "auto", "--max-new-tokens", "6", "--batch-sizes", "1,2"))
    assert totals == [len(calls)] and len(calls) > 0  # the progress bar's total is the calls really made
    sel = {s["method"]: s for s in report["gamma_selection"]}
    assert set(sel) == {"prompt-lookup", "hf-assisted"}
    for m, s in sel.items():
        assert s["split"] == "tune" and [row["gamma"] for row in s["table"]] == list(range(1, 9))
        run = next(r for r in report["runs"] if r["method"] == m and r["category"] == "all")
        assert run.get("assistant", "prompt-lookup") == "prompt-lookup"
        assert run["split"] == "test" and run["gamma"] == s["chosen"] and run["gamma_mode"] == "auto"
    assert {(s["method"], s["gamma"]) for s in report["sweeps"]} == {(m, g) for m in sel for g in range(1, 9)}
    assert all(s["split"] == "tune" for s in report["sweeps"])
    assert (tmp_path / "auto" / "gamma_sweep.png").is_file()
    assert report["identity"]["all_identical"] is True and report["consistency_violations"] == []


def test_repeats_give_spread_fastest_baseline_html_and_wandb(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "rep"
    report = run_eval(_args(workspace, out, "--methods", "vanilla,hf-generate,prompt-lookup", "--gamma", "auto:1..3",
                            "--repeats", "3", "--max-new-tokens", "6", "--report-to", "wandb"))
    assert report["consistency_violations"] == []
    test_runs = [r for r in report["runs"] if r["category"] == "all"]
    for r in test_runs:
        assert r["repeats"] == 3 and len(r["time_per_token_repeats_s"]) == 3
        assert r["time_per_token_min_s"] <= r["time_per_token_s"] <= r["time_per_token_max_s"]
        assert r["baseline_method"] in ("vanilla", "hf-generate") and len(r["speedup_repeats"]) == 3
    base = min((r for r in test_runs if r["method"] in ("vanilla", "hf-generate")), key=lambda r: r["time_per_token_s"])
    assert all(r["baseline_method"] == base["method"] for r in test_runs)
    sel = report["gamma_selection"][0]
    assert sel["chosen"] in (1, 2, 3) and "bootstrap over repeats" in sel["confidence_method"] and sel["note"]
    assert all(s["repeats"] == 3 and s["time_per_token_min_s"] <= s["time_per_token_s"] for s in report["sweeps"])
    assert check_html((out / "report.html").read_text(), figures=5) == []
    runs = list((out / "wandb").glob("offline-run-*"))
    assert runs and any(p.suffix == ".wandb" for p in runs[0].iterdir())


def test_parse_gamma():
    assert parse_gamma("4") == ("fixed", [4])
    assert parse_gamma("2..5") == ("sweep", [2, 3, 4, 5])
    assert parse_gamma("auto") == ("auto", list(range(1, 9)))
    for bad in ("0", "17", "3..2", "1..17", "x", "2..x"):
        with pytest.raises(ValueError, match="--gamma"):
            parse_gamma(bad)


@pytest.mark.parametrize("extra, match", [
    (["--gamma", "0"], "--gamma"),
    (["--gamma", "17"], "--gamma"),
    (["--methods", "vanilla,medusa"], "--methods.*medusa"),
    (["--methods", "vanilla,draft-lm"], "--methods draft-lm needs --draft-lm"),
    (["--methods", "vanilla,eagle3"], "--methods eagle3 needs --draft"),
    (["--batch-sizes", "1,0"], "--batch-sizes"),
    (["--temperature", "-1"], "--temperature"),
])
def test_bad_options(workspace, tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        run_eval(_args(workspace, tmp_path / "o", *extra))


def test_bad_prompt_files(workspace, tmp_path):
    with pytest.raises(ValueError, match="--prompts.*no such file"):
        run_eval(_args(workspace, tmp_path / "o", "--prompts", str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "turns": ["hi"]}) + "\n")  # no category
    with pytest.raises(ValueError, match="--prompts.*category"):
        run_eval(_args(workspace, tmp_path / "o", "--prompts", str(bad)))


def test_draft_for_another_target(workspace, tmp_path):
    with pytest.raises(ValueError, match="--draft-lm: vocabulary size"):
        run_eval(_args(workspace, tmp_path / "o", "--methods", "vanilla,draft-lm",
                       "--draft-lm", str(workspace["root"] / "other_draft")))
    wrong = {"eagle3": lambda target: PromptLookupDrafter(workspace["vocab"] + 1)}
    with pytest.raises(ValueError, match="--draft: vocabulary size"):
        run_eval(_args(workspace, tmp_path / "o", "--methods", "vanilla,eagle3", factories=wrong))
    with pytest.raises(ValueError, match="drafter_factories"):
        run_eval(_args(workspace, tmp_path / "o", factories={"medusa": lambda t: None}))


def test_refuses_non_empty_out(workspace, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="--out .*busy.*--overwrite"):
        run_eval(_args(workspace, out, "--methods", "vanilla"))
    report = run_eval(_args(workspace, out, "--methods", "vanilla", "--overwrite", "--max-new-tokens", "4"))
    assert (out / "keep.txt").is_file() and (out / "report.json").is_file()
    assert [r["method"] for r in report["runs"] if r["category"] == "all"] == ["vanilla"]


def test_real_eagle_heads_through_load_eagle_drafter(workspace, tmp_path):
    # The built-in eagle3/eagle1 factories (eaglehead.decode.eagle.load_eagle_drafter) on saved random heads.
    from transformers import AutoConfig

    from eaglehead.draftheads.checkpoint import save_pretrained
    from eaglehead.draftheads.config import Eagle3Config
    from eaglehead.draftheads.eagle1 import Eagle1Head
    from eaglehead.draftheads.eagle3 import Eagle3Head
    from eaglehead.draftheads.vocab import build_draft_vocab

    cfg = AutoConfig.from_pretrained(workspace["root"] / "target")
    torch.manual_seed(3)
    head3 = Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=16))
    head3.set_vocab(*build_draft_vocab(torch.arange(workspace["vocab"]), 16))
    save_pretrained(head3, tmp_path / "e3")
    save_pretrained(Eagle1Head(Eagle1Head.config_from_target(cfg)), tmp_path / "e1")
    report = run_eval(_args(workspace, tmp_path / "r", "--methods", "vanilla,eagle3,eagle1", "--gamma", "2",
                            "--draft", str(tmp_path / "e3"), "--eagle1", str(tmp_path / "e1"), "--batch-sizes", "2"))
    by = {r["method"]: r for r in report["runs"] if r["category"] == "all"}
    assert set(by) == {"vanilla", "eagle3", "eagle1"}
    assert all(r["identical_to_vanilla"] is True for r in by.values())
    assert max(by["eagle3"]["gamma_values"]) == 2 and report["consistency_violations"] == []


def test_gpu_checks_real_head_section_runs_a_saved_head_through_the_evaluation(workspace, tmp_path):
    """Check 5 of ``gpu_check`` (a trained head on its real target) is device-agnostic: on CPU with a
    saved, untrained EAGLE-3 head for the tiny target it runs vanilla, hf-generate and EAGLE-3 side by
    side and passes on greedy identity and a consistent report."""
    from transformers import AutoConfig

    from eaglehead.draftheads.checkpoint import save_pretrained
    from eaglehead.draftheads.config import Eagle3Config
    from eaglehead.draftheads.eagle3 import Eagle3Head
    from eaglehead.eval.gpu_check import check_real_head

    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(workspace["root"] / "target")
    save_pretrained(Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=workspace["vocab"])),
                    tmp_path / "head")
    out = tmp_path / "report"
    assert check_real_head(str(tmp_path / "head"), str(out), "cpu", target=str(workspace["root"] / "target"),
                           prompts=str(workspace["prompts"]), new_tokens=8, repeats=1, gammas=(2, 3), max_prompts=2)
    report = json.loads((out / "report.json").read_text())
    assert {r["method"] for r in report["runs"]} == {"vanilla", "hf-generate", "eagle3"}
    assert {r["batch_size"] for r in report["runs"]} == {1, 4}


def test_cpu_linear_packs_every_model_the_run_loads(workspace, tmp_path):
    """``--cpu-linear packed`` (the default on the CPU): the target, the draft LM and the loaded heads run packed
    linears (every torch method alike, vanilla included); ``plain`` leaves them as loaded; a bad value is named."""
    import dataclasses

    from torch import nn

    from eaglehead.decode.packed_linear import PackedLinear
    from eaglehead.draftheads.checkpoint import save_pretrained
    from eaglehead.draftheads.config import Eagle3Config
    from eaglehead.draftheads.eagle3 import Eagle3Head
    from eaglehead.draftheads.vocab import build_draft_vocab
    from eaglehead.eval.runner import load_models
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(workspace["root"] / "target")
    torch.manual_seed(3)
    head = Eagle3Head(Eagle3Config.from_target_config(cfg, draft_vocab_size=16))
    head.set_vocab(*build_draft_vocab(torch.arange(workspace["vocab"]), 16))
    save_pretrained(head, tmp_path / "e3")
    common = ("--methods", "vanilla,eagle3,eagle3-tree,draft-lm", "--draft", str(tmp_path / "e3"),
              "--draft-lm", str(workspace["root"] / "draft"))

    def linears(module):
        return [type(m) for m in module.modules() if isinstance(m, (nn.Linear, PackedLinear))]

    models, _ = load_models(_args(workspace, tmp_path / "a", *common))
    drafter_head = models.drafters["eagle3"].head
    assert models.drafters["eagle3-tree"].head is drafter_head
    for module in (models.target, models.draft_lm, drafter_head):
        kinds = linears(module)
        assert kinds and set(kinds) == {PackedLinear}
    plan = _args(workspace, tmp_path / "b", *common, "--cpu-linear", "plain")
    assert plan.to_dict()["cpu_linear"] == "plain"
    models, _ = load_models(plan)
    for module in (models.target, models.draft_lm, models.drafters["eagle3"].head):
        assert set(linears(module)) == {nn.Linear}
    with pytest.raises(ValueError, match="--cpu-linear must be one of"):
        dataclasses.replace(plan, cpu_linear="fast")
