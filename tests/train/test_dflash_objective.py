"""The DFlash objective: the training forward of a block is the decoding forward on the same context, blocks see
nothing at or after their anchor, the counted loss slots are the trained ones, and the recipe trains, saves and
reloads a drafter (float32 references, 1e-5)."""

from __future__ import annotations

import json

import pytest
import torch

from eaglehead.builtin.typed_config import load_config
from eaglehead.draftheads.checkpoint import load_head
from eaglehead.draftheads.dflash import ContextCache, DFlashConfig, DFlashHead, default_dflash_layer_ids
from eaglehead.draftheads.taps import FeatureTaps
from eaglehead.train.dflash_objective import DFlashModule, block_mask, choose_anchors, slot_targets
from eaglehead.train.recipe import TrainConfig
from eaglehead.train.trainer import train
from tests.families import tiny_family
from tests.tiny_models import tiny_tokenizer
from tests.train.tiny_run import CONVS, write_yaml

IDS = [1, 2, 3]
BLOCK = 6


def _setup(seed: int = 0, family: str = "llama"):
    target = tiny_family(family)
    torch.manual_seed(seed)
    head = DFlashHead(DFlashConfig.from_target_config(target.config, mask_token_id=7, fused_layer_ids=IDS,
                                                      block_size=BLOCK, num_hidden_layers=2))
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))  # norms away from 1: a skipped norm would show
    head.bind_target(target)
    return target, head


def _batch(target, ids: torch.Tensor, loss_from: int = 3) -> dict:
    with torch.no_grad(), FeatureTaps(target, IDS).capture() as cap:
        out = target(ids, output_hidden_states=True)
    loss = torch.zeros_like(ids)
    loss[:, loss_from:] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": loss, "fused": cap.fused(),
            "final_hidden": out.hidden_states[-1]}


def test_default_ids_follow_the_z_lab_rule_plus_one():
    # z-lab's build_target_layer_ids(36, 5) = [1, 9, 17, 25, 33] ("output of layer id"); ours name the boundary
    assert default_dflash_layer_ids(36) == [2, 10, 18, 26, 34]
    assert default_dflash_layer_ids(30) == [2, 9, 15, 21, 28]
    with pytest.raises(ValueError, match="fused_layer_ids"):
        default_dflash_layer_ids(4)


def test_training_block_equals_the_decoding_block_on_the_same_context():
    target, head = _setup()
    ids = torch.randint(3, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    batch = _batch(target, ids)
    anchors = choose_anchors(batch["loss_mask"], batch["attention_mask"], 3, 0, ids)
    assert (anchors >= 1).all()
    with torch.no_grad():
        ctx = head.context_states(batch["fused"])
        pos = torch.arange(24).expand(2, -1)
        block_pos = (anchors[..., None] + torch.arange(BLOCK)).flatten(1)
        block_ids = torch.full_like(block_pos, 7)
        block_ids.view(2, 3, BLOCK)[..., 0] = ids.gather(1, anchors)
        trained = head.block_hidden(block_ids, block_pos, head.context_kv(ctx, pos),
                                    block_mask(anchors, batch["attention_mask"], BLOCK)).view(2, 3, BLOCK, -1)
        for b in range(2):
            for j in range(3):
                a = int(anchors[b, j])
                cache = ContextCache.for_head(head, 1)
                cache.append(head.context_kv(ctx[b: b + 1, :a], pos[b: b + 1, :a]))
                logits = head.draft_logits(ids[b: b + 1, a], torch.arange(a, a + BLOCK)[None], cache)
                torch.testing.assert_close(logits[0], head.logits(trained[b, j, 1:]), atol=1e-5, rtol=1e-5)


def test_a_block_sees_nothing_at_or_after_its_anchor():
    target, head = _setup()
    ids = torch.randint(3, 256, (1, 20), generator=torch.Generator().manual_seed(2))
    batch = _batch(target, ids)
    module = DFlashModule(head, target.get_output_embeddings().weight, num_anchors=1, gamma=7.0)
    a = int(module.anchors(batch)[0, 0])
    with torch.no_grad():
        base = module(batch).loss_sums
        later = dict(batch, fused=batch["fused"].clone())
        later["fused"][:, a:] += 1.0  # the anchor's own features and everything after: not visible
        torch.testing.assert_close(module(later).loss_sums, base)
        earlier = dict(batch, fused=batch["fused"].clone())
        earlier["fused"][:, a - 1] += 1.0  # the last context position: visible
        assert not torch.allclose(module(earlier).loss_sums, base)


def test_counted_slots_are_the_trained_ones_and_weights_decay():
    target, head = _setup()
    ids = torch.randint(3, 256, (3, 18), generator=torch.Generator().manual_seed(3))
    batch = _batch(target, ids, loss_from=5)
    batch["attention_mask"][2, 15:] = 0  # a padded tail
    module = DFlashModule(head, target.get_output_embeddings().weight, num_anchors=4, gamma=2.0)
    out = module(batch)
    torch.testing.assert_close(out.counts, module.loss_token_counts(batch).float())
    assert out.counts[0] > out.counts[-1] > 0  # slots near the end of a row fall outside it more often
    torch.testing.assert_close(out.weights, torch.exp(-torch.arange(BLOCK - 1.0) / 2.0))
    idx, ok = slot_targets(module.anchors(batch), batch["loss_mask"], batch["attention_mask"], BLOCK)
    assert not ok[2][idx[2] >= 15].any()  # no padded token is ever a label
    out.loss().backward()
    assert head.fc.weight.grad.abs().sum() > 0 and head.layers[0].self_attn.q_norm.weight.grad.abs().sum() > 0


def test_the_recipe_trains_saves_and_reloads_a_drafter(tmp_path):
    root = tmp_path
    with (root / "data.jsonl").open("w") as f:
        for q, a in CONVS:
            f.write(json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
                    + "\n")
    target = tiny_family("qwen3")
    target.save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    cfg = {"output_dir": str(root / "run"), "model": {"target": str(root / "target")},
           "data": {"sources": [str(root / "data.jsonl")], "max_length": 48},
           "head": {"type": "dflash", "fused_layer_ids": IDS, "intermediate_size": 32},
           "dflash": {"num_layers": 1, "block_size": 4, "mask_token_id": 3, "num_anchors": 2, "gamma": 4.0},
           "optim": {"max_steps": 3, "micro_batch_size": 2, "warmup_steps": 1, "lr": 3e-3},
           "log_every": 1, "save_every": 2}
    summary = train(load_config(TrainConfig, write_yaml(root / "run.yaml", cfg, {})))
    head = load_head(root / "run" / "head", target_config=target.config)
    assert isinstance(head, DFlashHead) and head.config.block_size == 4 and head.config.fused_layer_ids == IDS
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and {"loss_0", "loss_2", "acc_2"} <= set(rows[0])
    assert "export_skipped" in summary
    snap = load_head(root / "run" / "snapshots" / "step_2")
    assert not torch.equal(snap.fc.weight, head.fc.weight)  # step 3 moved it
