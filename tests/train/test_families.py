"""Every target family of ``tests/families.py`` trains a head (the recipe, 2 steps), exports it and reloads it,
and the recipe's output initialisation reproduces the target's own final norm and logits on each family.

One tiny workspace per family (``tiny_family`` saved with the tiny tokenizer); the recipe runs exactly as a user's
``eaglehead train`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eaglehead.builtin.typed_config import load_config
from eaglehead.draftheads import Eagle3Config, Eagle3Head
from eaglehead.draftheads.checkpoint import load_head, load_pretrained
from eaglehead.draftheads.taps import FeatureTaps
from eaglehead.train.recipe import TrainConfig, init_output_from_target, target_output_weight
from eaglehead.train.trainer import train
from tests.families import FAMILIES, tiny_family
from tests.tiny_models import tiny_tokenizer
from tests.train.tiny_run import CONVS, write_yaml



@pytest.mark.parametrize("family", FAMILIES)
def test_output_init_reproduces_the_targets_final_norm_and_logits(family):
    """lm_head + final norm copied from the target give the target's own logits on any final hidden: Gemma's
    ``1 + w`` norm, tied embeddings, Granite's logits_scaling all accounted for (float32, 1e-5)."""
    target = tiny_family(family)
    head = Eagle3Head(Eagle3Config.from_target_config(target.config))
    assert init_output_from_target(head, target)  # every family's final norm is an RMSNorm the head can hold
    x = torch.randn(3, 5, target.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = target.get_output_embeddings()(target.get_decoder().norm(x)) / (getattr(
            target.config, "logits_scaling", None) or 1.0)
        torch.testing.assert_close(head.logits(x), want, atol=1e-5, rtol=1e-5)
    w = target_output_weight(target)
    cap = getattr(target.config, "final_logit_softcapping", None)
    ids = torch.tensor([[1, 5, 9, 30, 77, 120, 200, 3]])
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
        z = torch.nn.functional.linear(out.hidden_states[-1], w)  # the last hidden state is the final-normed one
        if cap:
            z = cap * torch.tanh(z / cap)
    torch.testing.assert_close(z, out.logits, atol=1e-5, rtol=1e-5)  # what the rollout scores against


def test_the_rollout_applies_a_soft_cap_to_the_targets_logits():
    """Gemma 2's final_logit_softcapping reaches the labels: the loss moves with it, and the soft-capped labels are
    the target's own distribution (the cap changes it: tanh flattens large logits)."""
    from eaglehead.train.rollout import rollout

    target = tiny_family("gemma2")
    head = Eagle3Head(Eagle3Config.from_target_config(target.config))
    head.bind_embedding(target.get_input_embeddings())
    ids = torch.tensor([[1, 5, 9, 30, 77, 120, 200, 3, 8, 11]])
    with torch.no_grad(), FeatureTaps(target, head.config.fused_layer_ids).capture() as cap:
        out = target(ids, output_hidden_states=True)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids),
             "fused": cap.fused(), "final_hidden": out.hidden_states[-1] * 40}  # large logits, where the cap binds
    w = target_output_weight(target)
    capped = rollout(head, batch, w, depth=2, logit_softcap=target.config.final_logit_softcapping).loss()
    plain = rollout(head, batch, w, depth=2).loss()
    assert not torch.allclose(capped, plain, rtol=1e-3)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("families")
    with (root / "data.jsonl").open("w") as f:
        for q, a in CONVS:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
                    + "\n")
    return root, tiny_tokenizer()


@pytest.mark.parametrize("family", FAMILIES)
def test_two_steps_export_and_reload_per_family(family, data, tmp_path):
    root, tok = data
    target = tiny_family(family)
    target.save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    cfg = {"output_dir": str(tmp_path / "run"), "model": {"target": str(tmp_path / "target")},
           "data": {"sources": [str(root / "data.jsonl")], "max_length": 48},
           "head": {"draft_vocab_size": 100000, "intermediate_size": 32},
           "rollout": {"depth": 2}, "optim": {"max_steps": 2, "micro_batch_size": 2, "warmup_steps": 1, "lr": 3e-3},
           "log_every": 1, "save_every": 0, "export": True}
    train(load_config(TrainConfig, write_yaml(tmp_path / "run.yaml", cfg, {})))
    trained = load_pretrained(tmp_path / "run" / "head")
    exported = load_head(tmp_path / "run" / "export_eagle3", target_config=target.config)
    raw = json.loads((tmp_path / "run" / "export_eagle3" / "config.json").read_text())
    assert raw["norm_before_residual"] is False and raw["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert exported.config.rope_scaling == trained.config.rope_scaling
    # The trained head moved away from its initialisation (2 steps at lr 3e-3), so equal logits mean something.
    fresh = Eagle3Head(trained.config)
    assert not torch.equal(fresh.fc.weight, trained.fc.weight)
    ids = torch.tensor([[1, 5, 9, 30, 77, 120, 200, 3]])
    with torch.no_grad(), FeatureTaps(target, trained.config.fused_layer_ids).capture() as cap:
        target(ids)
    logits = []
    for head in (trained, exported):
        head.bind_embedding(target.get_input_embeddings())
        with torch.no_grad():
            logits.append(head.logits(head(ids, cap.fused())))
    torch.testing.assert_close(logits[1], logits[0], atol=1e-6, rtol=0)  # same weights, float32
    # The head's embedding input is the raw table row (what vLLM's shared embedding computes), also for Gemma's
    # scaled embedding module.
    torch.testing.assert_close(trained.embed(ids), target.get_input_embeddings().weight[ids])
