"""The offline head-accuracy tool on a head whose draft is known in closed form."""

import json
from collections import Counter

import pytest
import torch

from eaglehead.builtin.text import encode_prompt
from eaglehead.decode import SamplingConfig, vanilla_generate
from eaglehead.diagnostics import head_accuracy as ha
from eaglehead.draftheads.checkpoint import save_pretrained
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from tests.tiny_models import save_tiny_target

TEXTS = ["def add(a, b):\n    return a + b\n", "The quick brown fox jumps over the lazy dog."]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ha")
    target, tok = save_tiny_target(tmp / "target", seed=4, layers=4)
    target.eval()
    conts = []
    for text in TEXTS:
        ids = torch.tensor([encode_prompt(tok, text)])
        conts.append(vanilla_generate(target, ids, sampling=SamplingConfig(temperature=0), max_new_tokens=12).tokens[0])
    c = Counter(t for cont in conts for t in cont).most_common(1)[0][0]
    # A one-token draft vocabulary {c}: the head always drafts c, so every figure has a closed form.
    head = Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=1))
    t2d = torch.zeros(target.config.vocab_size, dtype=torch.bool)
    t2d[c] = True
    head.set_vocab(torch.tensor([c]), t2d)
    save_pretrained(head, tmp / "head")
    return target, tok, str(tmp / "head"), conts, c, str(tmp / "target")


def test_accuracy_and_acceptance_have_their_closed_form(setup):
    target, tok, head_dir, conts, c, _ = setup
    out = ha.head_accuracy(target, tok, head_dir, TEXTS, max_new_tokens=12, depth=3)
    hits = sum(t == c for cont in conts for t in cont)
    total = sum(len(cont) for cont in conts)
    assert 0 < hits < total
    assert out["positions_by_depth"] == [total] * 3  # only continuation tokens count, at every depth
    assert out["accuracy_by_depth"] == [round(hits / total, 4)] * 3
    a = hits / total
    assert out["predicted_greedy_tau_by_gamma"] == pytest.approx([1 + a, 1 + a + a * a, 1 + a + a * a + a ** 3],
                                                                 abs=2e-3)
    accepted = rounds = 0
    for cont in conts:  # gamma 1: a round accepts iff the next token is c (then commits c and one more)
        pos = 0
        while pos < len(cont):
            rounds += 1
            if len(cont) - pos >= 2 and cont[pos] == c:
                accepted, pos = accepted + 1, pos + 2
            else:
                pos += 1
    assert out["gamma1_rounds"] == rounds
    assert out["gamma1_first_draft_acceptance"] == round(accepted / rounds, 4)


def test_command_line(setup, tmp_path, capsys):
    target, tok, head_dir, conts, c, target_dir = setup
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "category": "c", "prompt": t}) + "\n" for i, t in enumerate(TEXTS)))
    assert ha.main(["--head", head_dir, "--target", target_dir, "--prompts", str(prompts),
                    "--max-new-tokens", "12", "--depth", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)  # one head: one line
    assert printed["prompts"] == 2 and len(printed["accuracy_by_depth"]) == 2
    assert ha.main(["--head", head_dir, "--target", target_dir, "--prompts", str(tmp_path / "no.jsonl")]) == 2
    with pytest.raises(SystemExit):
        ha.main(["--head", head_dir, "--target", target_dir, "--prompts", str(prompts), "--depth", "0"])


def test_several_heads_share_the_continuations_and_the_target_features(setup, tmp_path):
    target, tok, head_dir, conts, c, _ = setup
    torch.manual_seed(3)  # a second, random head on the same layers: different figures, same features
    other = Eagle3Head(Eagle3Config.from_target_config(target.config, draft_vocab_size=8))
    save_pretrained(other, tmp_path / "other")
    alone = [ha.head_accuracy(target, tok, d, TEXTS, max_new_tokens=12, depth=3) for d in (head_dir, tmp_path / "other")]
    forwards = []
    hook = target.register_forward_hook(lambda *a: forwards.append(1))
    try:
        ha.heads_accuracy(target, tok, [head_dir], TEXTS, max_new_tokens=12, depth=3, decode_check=False)
        one_head = len(forwards)
        both = ha.heads_accuracy(target, tok, [head_dir, str(tmp_path / "other")], TEXTS, max_new_tokens=12,
                                 depth=3, decode_check=False)
    finally:
        hook.remove()
    for one, joint in zip(alone, both):
        assert joint == {k: v for k, v in one.items() if not k.startswith("gamma1_")}
    assert both[0]["accuracy_by_depth"] != both[1]["accuracy_by_depth"]
    assert len(forwards) == 2 * one_head  # the second head adds no target forward: features are shared


def test_command_line_with_several_heads(setup, tmp_path, capsys):
    target, tok, head_dir, conts, c, target_dir = setup
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "0", "category": "c", "prompt": TEXTS[0]}) + "\n")
    assert ha.main(["--head", head_dir, head_dir, "--target", target_dir, "--prompts", str(prompts),
                    "--max-new-tokens", "6", "--depth", "2", "--no-decode-check"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and lines[0] == lines[1] and "gamma1_rounds" not in lines[0]
