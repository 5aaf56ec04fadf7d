"""One loader for every head layout: ``load_head`` detects eaglehead / EAGLE-3 / speculators from
``config.json``, reads that file once, and checks compatibility with a target once."""

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

import eaglehead.draftheads.checkpoint as ckpt
from eaglehead.draftheads import export_eagle3, export_speculators, head_layout, load_head, save_pretrained

from .common import VOCAB, tiny_head

TARGET = LlamaConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, vocab_size=VOCAB)


@pytest.fixture
def layouts(tmp_path):
    head = tiny_head()
    return head, {"eaglehead": save_pretrained(head, tmp_path / "ours"),
                  "eagle3": export_eagle3(head, tmp_path / "eagle3"),
                  "speculators": export_speculators(head, tmp_path / "speculators")}


@pytest.fixture
def config_reads(monkeypatch):
    """Counts reads of any config.json through ``Path.read_text`` (how the loader reads it)."""
    reads = []
    real = Path.read_text

    def counting(self, *a, **k):
        if self.name == "config.json":
            reads.append(self)
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", counting)
    return reads


@pytest.mark.parametrize("layout", ["eaglehead", "eagle3", "speculators"])
def test_each_layout_is_detected_and_loaded(layouts, layout):
    head, dirs = layouts
    assert head_layout(dirs[layout]) == layout
    loaded = load_head(dirs[layout], target_config=TARGET)
    assert loaded.config.fused_layer_ids == head.config.fused_layer_ids
    for k, v in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


@pytest.mark.parametrize("layout", ["eaglehead", "eagle3", "speculators"])
def test_config_read_once_and_compatibility_checked_once(layouts, layout, config_reads, monkeypatch):
    _, dirs = layouts
    checks = []
    real_check = ckpt.check_compatible
    monkeypatch.setattr(ckpt, "check_compatible", lambda *a: checks.append(a) or real_check(*a))
    load_head(dirs[layout], target_config=TARGET)
    assert len(config_reads) == 1 and len(checks) == 1


def test_a_causal_lm_is_not_a_head(tmp_path):
    TARGET.save_pretrained(tmp_path / "lm")
    assert head_layout(tmp_path / "lm") is None
    assert head_layout(tmp_path / "nothing here") is None
    with pytest.raises(ValueError, match="num_hidden_layers must be 1"):
        load_head(tmp_path / "lm")


def test_load_pretrained_demands_our_layout(layouts):
    _, dirs = layouts
    with pytest.raises(ValueError, match="eaglehead_head_type"):
        ckpt.load_pretrained(dirs["eagle3"])


def test_eagle_drafter_loads_with_one_read_and_one_check(layouts, config_reads, monkeypatch):
    import eaglehead.decode.eagle as eagle
    from transformers import LlamaForCausalLM

    _, dirs = layouts
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB)).eval()
    checks = []
    for module in (eagle, ckpt):
        real = module.check_compatible
        monkeypatch.setattr(module, "check_compatible", lambda *a, _real=real: checks.append(a) or _real(*a))
    drafter = eagle.load_eagle_drafter(str(dirs["speculators"]), target)
    assert len(config_reads) == 1 and len(checks) == 1 and drafter.vocab_size == VOCAB
