"""Chat data the target writes itself, on a tiny model: resumable after a kill with identical output,
benchmark overlaps removed and counted, too few unique prompts is a named error."""

import json
from pathlib import Path

import pytest
import torch

from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import RegenerateConfig, SynthesisConfig, shard_defining
from eaglehead.decode import SamplingConfig
from tests.tiny_models import save_tiny_target


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_chat_target")
    save_tiny_target(path, seed=3, layers=2)
    return str(path)


def _cfg(target, out, **synth):
    s = dict(magpie_prompts=6, stdlib_prompts=3, pydoc_prompts=2, second_turn_fraction=0.5, max_new_tokens=6,
             max_rounds=4, keep_unfinished=True)
    s.update(synth)
    return datagen.ChatDataConfig(target=target, out_dir=str(out), synthesis=SynthesisConfig(**s),
                                  regenerate=RegenerateConfig(max_new_tokens=8, batch_size=3, shard_size=4))


@pytest.fixture(autouse=True)
def lenient_cleaning(monkeypatch):
    # An untrained model writes noise that the real cleaner rejects; keep any non-empty text.
    monkeypatch.setattr(cd, "clean_user_turn", lambda text, **kw: text.strip() or None)


def count_sampler_calls(monkeypatch) -> dict:
    """``{"n": calls}`` of the in-process sampler from here on (in this process)."""
    calls = {"n": 0}
    real_sample = datagen.sample_stream

    def counting(*a, **kw):
        calls["n"] += 1
        return real_sample(*a, **kw)

    monkeypatch.setattr(datagen, "sample_stream", counting)
    return calls


def test_killed_run_resumes_without_redoing_shards_and_writes_identical_data(target_dir, tmp_path, monkeypatch):
    whole = datagen.run(_cfg(target_dir, tmp_path / "whole"))
    assert whole["conversations"] == 11 and whole["followups"] >= 1
    reference = (tmp_path / "whole" / "conversations.jsonl").read_bytes()

    real_write = cd.write_shard
    writes = {"n": 0}

    def dying_write(path, rows):
        if writes["n"] == 3 and Path(path).parent.name == "answer":
            raise KeyboardInterrupt("killed")
        writes["n"] += 1
        real_write(path, rows)

    monkeypatch.setattr(cd, "write_shard", dying_write)
    with pytest.raises(KeyboardInterrupt):
        datagen.run(_cfg(target_dir, tmp_path / "resumed"))
    monkeypatch.setattr(cd, "write_shard", real_write)
    done_before = sorted(p.name for p in (tmp_path / "resumed").rglob("*.jsonl"))
    assert done_before and not (tmp_path / "resumed" / "conversations.jsonl").exists()

    calls = count_sampler_calls(monkeypatch)
    resumed = datagen.run(_cfg(target_dir, tmp_path / "resumed"))
    assert (tmp_path / "resumed" / "conversations.jsonl").read_bytes() == reference
    assert resumed["sha256"] == whole["sha256"]
    # Finished shards are read back, not sampled again: fewer batches than the uninterrupted run needed.
    calls_resumed = calls["n"]
    calls["n"] = 0
    import shutil
    shutil.rmtree(tmp_path / "whole")
    datagen.run(_cfg(target_dir, tmp_path / "whole"))
    assert 0 < calls_resumed < calls["n"]


def test_conversations_alternate_roles_and_answers_come_from_the_target(target_dir, tmp_path):
    datagen.run(_cfg(target_dir, tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "conversations.jsonl").read_text().splitlines()]
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles in (["user", "assistant"], ["user", "assistant", "user", "assistant"])
    assert {r["source"] for r in rows} == {"magpie", "stdlib", "pydoc"}


def test_planted_mtbench_question_is_removed_and_counted(target_dir, tmp_path, monkeypatch):
    from eaglehead.builtin.mtbench import load_mtbench

    question = load_mtbench()[10].turns[0]
    monkeypatch.setattr(cd, "stdlib_task_prompts",
                        lambda n, seed=0: [{"source": "stdlib", "prompt": question},
                                           {"source": "stdlib", "prompt": "Explain Python's zip function."}])
    manifest = datagen.run(_cfg(target_dir, tmp_path))
    assert manifest["overlap"].get("mt-bench") == 1
    text = (tmp_path / "conversations.jsonl").read_text()
    assert question not in text and "zip function" in text


def test_too_few_unique_prompts_is_an_error_saying_how_many(target_dir, tmp_path):
    with pytest.raises(ValueError, match=r"magpie_prompts=500: only \d+ clean unique user turns"):
        datagen.run(_cfg(target_dir, tmp_path, magpie_prompts=500, max_rounds=1))


def _alone(model, prompt, n):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], 1)
    return ids[0, len(prompt):].tolist()


def test_continuous_batching_gives_each_prompt_its_unbatched_greedy_tokens(target_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26], [30], [31, 32]]
    greedy = SamplingConfig(temperature=0)
    alone = [_alone(model, p, 9) for p in prompts]
    gen = torch.Generator().manual_seed(0)
    for batch_size in (1, 2, 4, 8):
        rows, ended = datagen.sample_stream(model, prompts, batch_size=batch_size, sampling=greedy,
                                            max_new_tokens=9, eos_ids=set(), pad_id=0, generator=gen)
        assert rows == alone and not any(ended)
    # EOS: rows stop there (EOS included), leave the batch, and waiting prompts take their places.
    eos = alone[1][2]
    rows, ended = datagen.sample_stream(model, prompts, batch_size=2, sampling=greedy, max_new_tokens=9,
                                        eos_ids={eos}, pad_id=0, generator=gen)
    for row, ref, e in zip(rows, alone, ended):
        cut = ref.index(eos) + 1 if eos in ref else 9
        assert row == ref[:cut] and e == (eos in ref)
    assert ended[1]


def test_an_output_dir_started_with_another_config_is_refused(target_dir, tmp_path):
    datagen.run(_cfg(target_dir, tmp_path))
    before = (tmp_path / "conversations.jsonl").read_bytes()
    with pytest.raises(ValueError, match="config.json: this output directory was started with another config .*"
                                         "synthesis.magpie_prompts: the directory has 6, this config 5"):
        datagen.run(_cfg(target_dir, tmp_path, magpie_prompts=5))
    assert (tmp_path / "conversations.jsonl").read_bytes() == before


def test_eaglehead_prepare_data_config_runs_the_chat_data_stages(target_dir, tmp_path, monkeypatch):
    from eaglehead.cli import main

    monkeypatch.setattr(cd, "clean_user_turn", lambda text, **kw: text.strip() or None)
    cfg = tmp_path / "data.yaml"
    cfg.write_text(f"target: {target_dir}\nout_dir: {tmp_path / 'chat'}\nsynthesis:\n  magpie_prompts: 2\n"
                   "  stdlib_prompts: 1\n  pydoc_prompts: 0\n  max_new_tokens: 4\n  keep_unfinished: true\n"
                   "regenerate:\n  max_new_tokens: 4\n  shard_size: 4\n")
    assert main(["prepare", "--data-config", str(cfg), "synthesis.second_turn_fraction=0"]) == 0
    manifest = json.loads((tmp_path / "chat" / "manifest.json").read_text())
    assert manifest["conversations"] == 3 and "followups" not in manifest
    assert main(["prepare"]) == 2  # neither config: a named error, exit status 2


def test_category_prompts_bring_their_own_follow_up_and_overlapping_follow_ups_are_dropped(target_dir, tmp_path,
                                                                                           monkeypatch):
    from eaglehead.builtin.mtbench import load_mtbench

    turn2 = load_mtbench()[3].turns[1]
    real = datagen.category_task_prompts

    def planted(n, seed=0, **kw):
        rows = real(n, seed, **kw)
        rows[0]["followup"] = turn2  # a benchmark follow-up: must not reach the data
        return rows

    monkeypatch.setattr(datagen, "category_task_prompts", planted)
    cfg = _cfg(target_dir, tmp_path, magpie_prompts=0, stdlib_prompts=0, pydoc_prompts=0, category_prompts=8,
               second_turn_fraction=1.0)
    calls = {"followup": 0}
    real_followups = datagen.followups

    def counting(target, cfg_, out, convs, **kw):
        calls["followup"] += len(convs)
        return real_followups(target, cfg_, out, convs, **kw)

    monkeypatch.setattr(datagen, "followups", counting)
    manifest = datagen.run(cfg)
    assert manifest["by_source"] == {f"task:{c}": 1 for c in
                                     ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                                      "humanities")}
    assert manifest["overlap"] == {"mt-bench (follow-up)": 1}
    rows = [json.loads(x) for x in (tmp_path / "conversations.jsonl").read_text().splitlines()]
    seeds = {p["prompt"]: p for p in real(8, 0)}
    assert calls["followup"] == 1  # only the conversation whose follow-up was dropped asks the target for one
    assert all(len(r["messages"]) == 4 for r in rows) and turn2 not in json.dumps(rows)
    own = [r for r in rows if r["messages"][2]["content"] == seeds[r["messages"][0]["content"]]["followup"]]
    assert len(own) == 7


def test_a_directory_started_before_category_prompts_existed_is_still_accepted(target_dir, tmp_path):
    cfg = _cfg(target_dir, tmp_path)
    saved = json.dumps(shard_defining(cfg), indent=2, sort_keys=True)
    assert "category_prompts" not in saved  # 0, the default: the saved config is the one written before
    cfg.synthesis.category_prompts = 8
    assert shard_defining(cfg)["synthesis"]["category_prompts"] == 8


def test_id_prefix_names_the_conversations_and_does_not_change_the_shards(target_dir, tmp_path):
    datagen.run(_cfg(target_dir, tmp_path))
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.rglob("*-0*.jsonl"))
    cfg = _cfg(target_dir, tmp_path)
    cfg.id_prefix = "task"
    datagen.run(cfg)  # the same directory: the prefix is not part of what the shards hold
    rows = [json.loads(x) for x in (tmp_path / "conversations.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"task-{i:06d}" for i in range(len(rows))]
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.rglob("*-0*.jsonl")) == before
    with pytest.raises(ValueError, match="id_prefix: expected letters"):
        datagen.ChatDataConfig(target=target_dir, out_dir=str(tmp_path), id_prefix="a b")


def test_a_directory_started_before_the_sampler_choice_resumes_only_with_its_sampler(target_dir, tmp_path):
    cfg = _cfg(target_dir, tmp_path)
    cfg.sampler = "exponential-race"
    saved = json.dumps(shard_defining(cfg), indent=2, sort_keys=True)
    assert '"sampler"' not in saved  # what directories written before the field existed hold
    (tmp_path / "config.json").write_text(saved)
    cfg.sampler = "inverse-cdf"  # the default now: another stream per seed, its shards must not mix in
    with pytest.raises(ValueError, match="sampler: the directory has 'exponential-race', this config 'inverse-cdf'"):
        datagen.run(cfg)
    assert not (tmp_path / "conversations.jsonl").exists() and (tmp_path / "config.json").read_text() == saved
    cfg.sampler = "exponential-race"  # its own sampler: accepted, and the saved config stays as it was
    assert datagen.run(cfg)["conversations"] == 11 and (tmp_path / "config.json").read_text() == saved
    with pytest.raises(ValueError, match="sampler: expected one of 'inverse-cdf', 'exponential-race', got 'gumbel'"):
        datagen.ChatDataConfig(target=target_dir, out_dir=str(tmp_path), sampler="gumbel")


@pytest.mark.parametrize("sampler", ["inverse-cdf", "exponential-race"])
def test_sampled_first_tokens_follow_the_targets_distribution(target_dir, sampler):
    """20000 copies of one prompt, one token each, at T=0.1 (the untrained model is near uniform at T=1) through the
    streaming sampler (batch 64, rows joining and leaving): their frequencies against the tiny target's float64
    softmax (Bernstein bound, alpha 1e-6; drawing from w ** 1.1 instead of w fails it)."""
    from transformers import AutoModelForCausalLM

    from tests.decode.exact_reference import top_k_and_tail_mismatches

    model = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    prompt, n = [5, 6, 7, 8], 20_000
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double() / 0.1, -1)
    rows, _ = datagen.sample_stream(model, [prompt] * n, batch_size=64, sampling=SamplingConfig(temperature=0.1),
                                    max_new_tokens=1, eos_ids=set(), pad_id=0,
                                    generator=torch.Generator().manual_seed(7), sampler=sampler)
    assert top_k_and_tail_mismatches([r[0] for r in rows], p.tolist(), k=12) == []


def test_assemble_only_rebuilds_the_same_data_from_archived_shards_and_names_a_missing_one(target_dir, tmp_path,
                                                                                          monkeypatch):
    """A data directory carried as an archive (``datagen.archive``) is rebuilt byte for byte without loading the
    target's weights or sampling; with a shard missing, ``--assemble-only`` stops naming it instead of generating."""
    import shutil

    from eaglehead.cli import main
    from eaglehead.datagen import archive

    whole = datagen.run(_cfg(target_dir, tmp_path / "whole"))
    archive.pack(tmp_path / "whole", tmp_path / "archive")
    archive.unpack(tmp_path / "archive", tmp_path / "restored")
    calls = count_sampler_calls(monkeypatch)
    monkeypatch.setattr("eaglehead.builtin.models.load_target", lambda *a, **k: pytest.fail("weights loaded"))
    rebuilt = datagen.run(_cfg(target_dir, tmp_path / "restored"), assemble_only=True)
    assert calls["n"] == 0
    assert (tmp_path / "restored" / "conversations.jsonl").read_bytes() == \
        (tmp_path / "whole" / "conversations.jsonl").read_bytes()
    assert {k: v for k, v in rebuilt.items() if k != "seconds_this_run"} == \
        {k: v for k, v in whole.items() if k != "seconds_this_run"}

    gone = sorted((tmp_path / "restored" / "answer").glob("answer-*.jsonl"))[-1]
    gone.unlink()
    with pytest.raises(ValueError, match=rf"{gone}: not written \(1 of the \d+ answer shards are missing\), and this "
                                         r"run only assembles"):
        datagen.run(_cfg(target_dir, tmp_path / "restored"), assemble_only=True)
    shutil.rmtree(tmp_path / "restored" / "user")
    with pytest.raises(ValueError, match=r"user-00000.jsonl: not written \(Magpie round 0 is missing\)"):
        datagen.run(_cfg(target_dir, tmp_path / "restored"), assemble_only=True)
    assert calls["n"] == 0
    cfg = tmp_path / "data.yaml"
    cfg.write_text(f"target: {target_dir}\nout_dir: {tmp_path / 'whole'}\n")
    assert main(["prepare", "--assemble-only", "--config", str(cfg)]) == 2  # needs --data-config: a named error
