"""The draft-LM recipe (``eaglehead.pretrain.draft_lm``): chat data (one file or several, read in order) in, a Hugging
Face directory and its recipe out, resumable with identical weights; errors name the key or the file and
line. A tiny target (vocab 259, ChatML template) and 1 layer x 32 keep each run to a few seconds."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

import eaglehead.pretrain.draft_lm as draft_lm
from eaglehead.builtin.shipped import file_sha256, recipe_key
from eaglehead.builtin.typed_config import load_config
from eaglehead.pretrain.chat_corpus import encode, pack, read_conversations, read_data, split_heldout
from eaglehead.pretrain.draft_lm import DraftLMConfig, main, model_config
from tests.tiny_models import save_tiny_target

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2-135m-instruct-draft-lm.yaml"
TINY = {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "seq_len": 32, "batch": 2, "steps": 6,
        "warmup": 1, "eval_every": 2, "checkpoint_every": 2, "eval_chunks": 4, "heldout_fraction": 0.2,
        "progress": False}


def _conversations(n: int = 30, seed: int = 0, ask: str = "Question") -> list[dict]:
    rng = random.Random(seed)
    words = "def return list value sum the a of to in for print stack push pop items add".split()
    rows = []
    for i in range(n):
        answer = " ".join(rng.choice(words) for _ in range(12 + i % 7))
        messages = [{"role": "user", "content": f"{ask} {i}: {rng.choice(words)}?"},
                    {"role": "assistant", "content": answer}]
        if i % 4 == 0:
            messages += [{"role": "user", "content": "And then?"}, {"role": "assistant", "content": answer[::-1]}]
        rows.append({"id": f"chat-{i:06d}", "source": "test", "messages": messages})
    return rows


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft_lm")
    save_tiny_target(root / "target")
    data = root / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _conversations()))
    # A second file whose ids repeat the first's (chat-000000, ...), as the SmolLM2 recipe's two files do.
    (root / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _conversations(20, seed=1, ask="Task")))
    config = root / "draft.yaml"
    config.write_text(f"target: {root / 'target'}\ndata: {data}\nout: {root / 'out'}\n"
                      + "".join(f"{k}: {json.dumps(v)}\n" for k, v in TINY.items()))
    return root, config


@pytest.fixture(scope="module")
def finished(workspace):
    root, config = workspace
    assert main(["--config", str(config)]) == 0
    return root / "out", json.loads((root / "out" / "recipe.json").read_text())


@pytest.fixture(scope="module")
def finished_two(workspace):
    """A run on both files, given as the JSON-list override (the form the SmolLM2 demo's --retrain passes)."""
    root, config = workspace
    files = [str(root / "chat.jsonl"), str(root / "tasks.jsonl")]
    assert main(["--config", str(config), f"data={json.dumps(files)}", f"out={root / 'out2'}"]) == 0
    return root / "out2", json.loads((root / "out2" / "recipe.json").read_text())


def test_run_writes_a_hugging_face_directory_and_its_recipe(workspace, finished):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, config = workspace
    out, recipe = finished
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= set(recipe["files"])
    assert all(file_sha256(out / name) == digest for name, digest in recipe["files"].items())
    assert recipe["key"] == recipe_key(recipe) and recipe["status"] == "complete"
    assert recipe["inputs"]["data"]["sha256"] == file_sha256(root / "chat.jsonl")
    assert recipe["inputs"]["data"]["heldout_conversations"] == 6 and recipe["inputs"]["data"]["conversations"] == 30
    assert recipe["command"].startswith(f"python -m eaglehead.pretrain.draft_lm --config {config} ")
    assert {"torch", "transformers", "tokenizers", "python", "eaglehead"} <= set(recipe["versions"])
    results = recipe["results"]
    assert results["steps_done"] == 6 and results["resumed_at_steps"] == [] and results["train_tokens_per_second"] > 0
    for key in ("heldout_loss", "heldout_loss_shipped", "train_loss"):
        assert 0 < results[key] < math.log(259) + 1  # finite, and no worse than about uniform
    assert 0 <= results["heldout_top1"] <= 1 and 0 <= results["heldout_top1_shipped"] <= 1
    assert not (out / "checkpoint.pt").exists()  # removed once the run is complete
    log = [json.loads(line) for line in (out / "train.log").read_text().splitlines()[1:]]
    assert [e["step"] for e in log] == [2, 4, 6] and log[-1]["heldout_loss"] == results["heldout_loss"]

    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    target_tok, tok = AutoTokenizer.from_pretrained(root / "target"), AutoTokenizer.from_pretrained(out)
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.tie_word_embeddings) == (1, 32, True)
    assert cfg.vocab_size == AutoModelForCausalLM.from_pretrained(root / "target").config.vocab_size
    assert model.num_parameters() == recipe["inputs"]["model"]["parameters"]
    messages = _conversations(2)[1]["messages"]
    assert tok.apply_chat_template(messages, tokenize=False) == target_tok.apply_chat_template(messages, tokenize=False)
    text = target_tok.apply_chat_template(messages, tokenize=False)
    assert tok(text)["input_ids"] == target_tok(text)["input_ids"]


def _smallest(names: list[str], n: int) -> set[str]:
    return set(sorted(names, key=lambda name: hashlib.sha256(name.encode()).hexdigest())[:n])


def test_a_single_file_keeps_its_record_split_and_key(workspace, finished, capsys):
    """One data file: the record of a one-file recipe (its path and sha256, no ``files``), the split by
    sha256(id); ``data: [file]`` is that same recipe (same settings and key: the finished run is kept)."""
    root, config = workspace
    out, recipe = finished
    data = recipe["inputs"]["data"]
    assert sorted(data) == sorted(["path", "sha256", "conversations", "train_conversations", "heldout_conversations",
                                   "heldout_rule", "train_chunks", "train_loss_tokens", "heldout_eval_chunks",
                                   "heldout_eval_loss_tokens"])
    assert (data["path"], data["sha256"]) == (str(root / "chat.jsonl"), file_sha256(root / "chat.jsonl"))
    assert data["heldout_rule"] == "the 0.2 of conversations with the smallest sha256(id)"
    assert recipe["inputs"]["settings"]["data"] == str(root / "chat.jsonl")
    rows = read_data([str(root / "chat.jsonl")])
    held = {r["id"] for _, _, r in split_heldout(rows, 0.2)[1]}
    assert held == _smallest([r["id"] for _, _, r in rows], 6)
    assert load_config(DraftLMConfig, config, [f"data=[{root / 'chat.jsonl'}]"]).data == str(root / "chat.jsonl")
    capsys.readouterr()
    assert main(["--config", str(config), f"data={json.dumps([str(root / 'chat.jsonl')])}"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert json.loads((out / "recipe.json").read_text())["key"] == recipe["key"]


def test_two_files_train_in_order_with_a_record_of_each(workspace, finished, finished_two):
    root, config = workspace
    out, recipe = finished_two
    files = [str(root / "chat.jsonl"), str(root / "tasks.jsonl")]
    assert all(file_sha256(out / name) == digest for name, digest in recipe["files"].items())
    assert recipe["status"] == "complete" and recipe["inputs"]["settings"]["data"] == files
    assert recipe["key"] != finished[1]["key"]
    data = recipe["inputs"]["data"]
    assert data["files"] == [{"path": files[0], "sha256": file_sha256(Path(files[0])), "conversations": 30},
                             {"path": files[1], "sha256": file_sha256(Path(files[1])), "conversations": 20}]
    assert "sha256" not in data and "path" not in data
    assert (data["conversations"], data["train_conversations"], data["heldout_conversations"]) == (50, 40, 10)
    assert data["heldout_rule"] == "the 0.2 of conversations with the smallest sha256('<file index>:<id>')"
    assert data["train_chunks"] > finished[1]["inputs"]["data"]["train_chunks"]  # the second file's tokens too
    # Rows of both files in order; the ids repeat across files, so the held-out key includes the file index.
    rows = read_data(files)
    assert [(i, r["id"]) for i, _, r in rows] == [(0, f"chat-{k:06d}") for k in range(30)] + [
        (1, f"chat-{k:06d}") for k in range(20)]
    train_rows, held = split_heldout(rows, 0.2, by_file=True)
    assert {f"{i}:{r['id']}" for i, _, r in held} == _smallest([f"{i}:{r['id']}" for i, _, r in rows], 10)
    assert [(i, n) for i, n, _ in train_rows] == sorted((i, n) for i, n, _ in train_rows)  # files' order kept
    # The recorded command spells the list out, and reads it back.
    argv = shlex.split(recipe["command"])[3:]
    assert load_config(DraftLMConfig, config, argv[2:]).data == files
    results = recipe["results"]
    assert results["steps_done"] == 6 and 0 < results["heldout_loss"] < math.log(259) + 1


def test_a_bad_line_of_the_second_file_names_that_file_and_line(workspace, tmp_path):
    from transformers import AutoTokenizer

    root, config = workspace
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n\n{"messages": [\n')
    with pytest.raises(ValueError, match=rf"^{bad}:3: not valid JSON"):
        main(["--config", str(config), f"data={json.dumps([str(root / 'chat.jsonl'), str(bad)])}",
              f"out={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()
    # A conversation the chat template rejects, in the second file: its file and line, not the first file's.
    tok = AutoTokenizer.from_pretrained(root / "target")
    rows = [(0, 1, _conversations(1)[0]), (1, 7, {"messages": [{"role": "assistant", "content": "first"}]})]
    with pytest.raises(ValueError, match=r"^tasks\.jsonl:7: conversation starts with an assistant message"):
        encode(tok, rows, "assistant", ["chat.jsonl", "tasks.jsonl"])


def test_killed_run_resumes_from_its_checkpoint_to_identical_weights(workspace, finished, tmp_path, monkeypatch,
                                                                     capsys):
    out, recipe = finished
    # The recorded command, into another directory; "killed" during step 5 (the last checkpoint is step 4).
    argv = shlex.split(recipe["command"])[3:] + [f"out={tmp_path / 'again'}"]
    real_lr_at = draft_lm.lr_at

    def dies_in_step_5(cfg, step):
        if step == 4:
            raise KeyboardInterrupt("simulated kill")
        return real_lr_at(cfg, step)

    monkeypatch.setattr(draft_lm, "lr_at", dies_in_step_5)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    again = tmp_path / "again"
    assert (again / "checkpoint.pt").is_file() and not (again / "recipe.json").exists()
    assert torch.load(again / "checkpoint.pt", weights_only=True)["step"] == 4
    monkeypatch.setattr(draft_lm, "lr_at", real_lr_at)
    capsys.readouterr()
    assert main(argv + ["progress=true"]) == 0
    captured = capsys.readouterr()
    assert "resuming from step 4" in captured.out and "tok/s" in captured.err  # the progress bar's rate
    resumed = json.loads((again / "recipe.json").read_text())
    assert resumed["results"]["resumed_at_steps"] == [4]
    assert resumed["files"] == recipe["files"]  # weights, tokenizer and config byte for byte
    assert resumed["key"] == recipe["key"]
    for key in ("heldout_loss", "heldout_top1", "heldout_loss_shipped", "train_loss", "running_train_loss"):
        assert resumed["results"][key] == recipe["results"][key]

    # A finished run is not redone; a checkpoint made under other settings is refused, naming the way out.
    assert main(argv) == 0
    assert "nothing to do" in capsys.readouterr().out
    monkeypatch.setattr(draft_lm, "lr_at", dies_in_step_5)
    with pytest.raises(KeyboardInterrupt):
        main(argv + ["resume=false"])
    monkeypatch.setattr(draft_lm, "lr_at", real_lr_at)
    with pytest.raises(ValueError, match="checkpoint was made with other settings.*resume=false"):
        main(argv + ["lr=0.001"])


def test_loss_is_on_assistant_tokens_and_their_end_of_turn(workspace):
    from transformers import AutoTokenizer

    root, _ = workspace
    tok = AutoTokenizer.from_pretrained(root / "target")
    rows = [(0, n, r) for n, r in enumerate(_conversations(5), 1)]
    ids, mask = encode(tok, rows, "assistant", ["chat.jsonl"])
    ids_all, mask_all = encode(tok, rows, "all", ["chat.jsonl"])
    assert torch.equal(ids, ids_all) and bool(mask_all.all()) and mask.dtype == torch.bool
    # The rendered conversations, back to back: the same stream the target decodes.
    rendered = "".join(tok.apply_chat_template(r["messages"], tokenize=False) for _, _, r in rows)
    assert tok.decode(ids) == rendered
    replies = [m["content"] + "<|im_end|>" for _, _, r in rows for m in r["messages"] if m["role"] == "assistant"]
    assert tok.decode(ids[mask]) == "".join(replies)

    chunks, masks = pack(ids, mask, 16, "chat.jsonl")
    assert chunks.shape[1] == 17 and torch.equal(chunks[0, -1], chunks[1, 0])  # one token of overlap
    assert bool(masks[:, 1:].any(1).all())  # every chunk trains on something
    no_loss = torch.zeros_like(mask)
    with pytest.raises(ValueError, match="no chunk holds a loss token"):
        pack(ids, no_loss, 16, "chat.jsonl")


def test_heldout_split_is_fixed_by_ids_not_file_order():
    rows = [(0, n, r) for n, r in enumerate(_conversations(40), 1)]
    train_rows, held = split_heldout(rows, 0.1)
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    assert len(held) == 4 and len(train_rows) == 36
    assert {r["id"] for _, _, r in split_heldout(shuffled, 0.1)[1]} == {r["id"] for _, _, r in held}
    assert [n for _, n, _ in train_rows] == sorted(n for _, n, _ in train_rows)  # file order kept
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_heldout(rows[:1], 0.1)


@pytest.mark.parametrize("content, match", [
    (None, r"no such file"),
    ("", r"data\.jsonl: no conversations \(the file is empty\)"),
    ("\n  \n", r"data\.jsonl: no conversations"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [', r"data\.jsonl:2: not valid JSON"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n\n{"text": "hi"}\n', r"data\.jsonl:3: expected an object with a non-empty 'messages'"),
    ('{"messages": []}\n', r"data\.jsonl:1: expected an object"),
    ('[1, 2]\n', r"data\.jsonl:1: expected an object"),
    ('{"messages": [{"role": "bot", "content": "hi"}]}\n', r"data\.jsonl:1: messages\[0\]: expected"),
    ('{"messages": [{"role": "user", "content": 3}]}\n', r"data\.jsonl:1: messages\[0\]: expected"),
], ids=["missing", "empty", "blank", "not-json", "no-messages", "empty-messages", "not-object", "role", "content"])
def test_bad_data_file_names_file_and_line(tmp_path, content, match):
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=match):
        read_conversations(path)


def test_the_command_line_reports_bad_data_before_training(workspace, tmp_path):
    _, config = workspace
    bad = tmp_path / "chat.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n')
    with pytest.raises(ValueError, match=rf"{bad}:2: not valid JSON"):
        main(["--config", str(config), f"data={bad}", f"out={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()
    run = subprocess.run([sys.executable, "-m", "eaglehead.pretrain.draft_lm", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "--config CONFIG" in run.stdout


def test_a_conversation_the_template_rejects_is_named_by_line(workspace):
    from transformers import AutoTokenizer

    root, _ = workspace
    tok = AutoTokenizer.from_pretrained(root / "target")
    rows = [(0, 1, _conversations(1)[0]), (0, 7, {"messages": [{"role": "assistant", "content": "first"}]})]
    with pytest.raises(ValueError, match=r"chat\.jsonl:7: conversation starts with an assistant message"):
        encode(tok, rows, "assistant", ["chat.jsonl"])


@pytest.mark.parametrize("override, match", [
    ("hidden=63", r"hidden: expected a multiple of heads \(2\), got 63"),
    ("steps=many", r"key 'steps' expects int, got 'many'"),
    ("loss_on=user", r"key 'loss_on' expects one of 'assistant', 'all'"),
    ("heldout_fraction=1.5", r"heldout_fraction: expected a value in \(0, 1\)"),
    ("warmup=400", r"warmup: expected a step count in \[0, steps = 400\)"),
    ("batch=0", r"batch: expected a positive integer"),
    ("data=[]", r"data: expected a file path or a non-empty list of file paths, got \[\]"),
    ("data=[a.jsonl, b.jsonl, a.jsonl]", r"data: a\.jsonl listed more than once"),
    ("data=[a.jsonl, 3]", r"key 'data\[1\]' expects str, got 3"),
    ("data=3", r"key 'data' expects str or a list of str, got 3"),
])
def test_bad_settings_name_the_key(override, match):
    with pytest.raises(ValueError, match=match):
        load_config(DraftLMConfig, CONFIG, [override])
    with pytest.raises(ValueError, match="unknown key 'width'"):
        load_config(DraftLMConfig, CONFIG, ["width=64"])


def test_the_smollm2_recipe_is_small_and_documents_its_command(workspace):
    from transformers import AutoTokenizer, LlamaForCausalLM

    cfg = load_config(DraftLMConfig, CONFIG)
    # The head recipe's two data files, in its order (configs/smollm2-135m-instruct.yaml's data.sources).
    head = yaml.safe_load((CONFIG.parent / "smollm2-135m-instruct.yaml").read_text())
    assert (cfg.target, cfg.data, cfg.out) == ("builtin:smollm2-135m-instruct",
                                               ["runs/smollm2-135m-instruct/chat/conversations.jsonl",
                                                "runs/smollm2-135m-instruct/chat-tasks/conversations.jsonl"],
                                               "runs/smollm2-135m-instruct/draft_lm")
    assert cfg.data == head["data"]["sources"]
    comments = [line for line in CONFIG.read_text().splitlines() if line.startswith("#")]
    assert any(f"python -m eaglehead.pretrain.draft_lm --config configs/{CONFIG.name}" in line for line in comments)
    for data_config in ("smollm2-135m-instruct-data.yaml", "smollm2-135m-instruct-data-tasks.yaml"):
        assert any(f"eaglehead prepare --data-config configs/{data_config}" in line for line in comments)
    # Its size at SmolLM2's vocabulary (the tokenizer only bounds the vocabulary from below here).
    tok = AutoTokenizer.from_pretrained(workspace[0] / "target")
    smollm2 = {"vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
               "max_position_embeddings": 8192}
    with torch.device("meta"):
        model = LlamaForCausalLM(model_config(cfg, tok, smollm2))
    assert model.config.tie_word_embeddings and model.config.vocab_size == 49152
    assert model.num_parameters() == 3_277_120  # 49152 x 64 embedding + 2 x 65,664 + 64: 6.55 MB in float16
    assert 2 * model.num_parameters() <= 7 * 10 ** 6


def test_ship_run_ships_the_finished_draft_lm_with_the_shipped_data_only(workspace, finished, finished_two,
                                                                          tmp_path):
    """The draft LM ships only when its recipe's data record lists the shipped chat data files' sha256s, in
    the shipped order (smollm2_data, then smollm2_data_tasks)."""
    from eaglehead.demos.smollm2_assets import verify_asset
    from eaglehead.demos.smollm2_ship import ship_run

    root_dir, _ = workspace
    out, recipe = finished_two
    first, second = file_sha256(root_dir / "chat.jsonl"), file_sha256(root_dir / "tasks.jsonl")

    def assets(*digests):
        root = tmp_path / "-".join(d[:8] for d in digests)
        for name, digest in zip(("smollm2_data", "smollm2_data_tasks"), digests):
            (root / name).mkdir(parents=True)
            (root / name / "conversations.jsonl.xz").write_bytes(b"xz")
            (root / name / "recipe.json").write_text(json.dumps(
                {"files": {"conversations.jsonl.xz": file_sha256(root / name / "conversations.jsonl.xz")},
                 "inputs": {"conversations_sha256": digest}}))
        return root

    root = assets(first, second)
    dest = ship_run(out, "draft-lm", root)
    shipped = verify_asset(dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted([*recipe["files"], "recipe.json"])
    assert shipped["results"] == recipe["results"] and "commit" in shipped
    with pytest.raises(ValueError, match=rf"inputs.data\[1\] {root_dir / 'tasks.jsonl'} has sha256 {second}: not "
                                         r"the shipped chat data \(position 1 must be smollm2_data_tasks"):
        ship_run(out, "draft-lm", assets(first, "0" * 64), overwrite=True)
    with pytest.raises(ValueError, match=r"inputs.data\[0\] .* the shipped smollm2_data_tasks, in the wrong order"):
        ship_run(out, "draft-lm", assets(second, first), overwrite=True)
    # The one-file run (the first file only) is not the shipped data.
    with pytest.raises(ValueError,
                       match=r"its recipe.json inputs.data lists 1 file\(s\) .*: not the shipped chat data"):
        ship_run(finished[0], "draft-lm", root, overwrite=True)
