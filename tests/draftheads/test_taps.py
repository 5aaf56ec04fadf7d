"""FeatureTaps (the lead's draftheads/taps.py) against output_hidden_states on tiny targets of each family."""

import pytest
import torch

from eaglehead.draftheads import Eagle3Config, Eagle3Head, FeatureTaps

from .common import VOCAB, tiny_targets

TARGETS = tiny_targets(layers=4)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_taps_equal_output_hidden_states(name):
    model = TARGETS[name]
    cfg = Eagle3Config.from_target_config(model.config, draft_vocab_size=40)
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    for layer_ids in (cfg.fused_layer_ids, [0, 1, 3, 4]):
        taps = FeatureTaps(model, layer_ids, capture_final=True)
        with torch.no_grad(), taps.capture() as cap:
            out = model(ids, attention_mask=mask, output_hidden_states=True)
        hs = out.hidden_states
        assert len(hs) == 5
        for i in layer_ids:
            torch.testing.assert_close(cap.by_id[i], hs[i], atol=0, rtol=0)
        torch.testing.assert_close(cap.fused(), torch.cat([hs[i] for i in layer_ids], -1), atol=0, rtol=0)
        torch.testing.assert_close(cap.final_hidden, hs[4], atol=0, rtol=0)
    # The captured features feed a head built from the same target config.
    head = Eagle3Head(cfg)
    head.bind_embedding(model.get_input_embeddings())
    taps = FeatureTaps(model, cfg.fused_layer_ids)
    with torch.no_grad(), taps.capture() as cap:
        model(ids)
    assert head(ids, cap.fused()).shape == (2, 6, 32)
