"""The training-time rollout is faithful to real drafting, and its loss/masks/memory behave."""

import pytest
import torch

from eaglehead.decode.cache import RaggedCacheLM
from eaglehead.decode.eagle import Eagle3Drafter
from eaglehead.decode.sampling import SamplingConfig
from eaglehead.draftheads.config import Eagle3Config
from eaglehead.draftheads.eagle3 import Eagle3Head
from eaglehead.draftheads.taps import FeatureTaps
from eaglehead.draftheads.vocab import build_draft_vocab
from eaglehead.train.rollout import (count_loss_tokens, deep_rows, loss_positions, rollout, rollout_steps,
                                     target_outputs)
from tests.tiny_models import tiny_llama

V = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=0, layers=4, vocab=V)


EAGLE31 = {"fc_norm": True, "norm_output": True}


def make_head(target, draft_vocab=40, seed=5, **switches):
    """A seeded head; ``switches`` (EAGLE 3.1's fc_norm / norm_output) also get random norm gains around 1,
    so their norms are not the identity."""
    cfg = Eagle3Config.from_target_config(target.config, draft_vocab_size=draft_vocab, **switches)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    if switches:
        with torch.no_grad():
            for name, p in head.named_parameters():
                if name.startswith(("fc_norm.", "norm.")):
                    p.uniform_(0.5, 1.5)
    counts = torch.randint(0, 50, (V,), generator=torch.Generator().manual_seed(seed))
    head.set_vocab(*build_draft_vocab(counts, draft_vocab))
    head.bind_embedding(target.get_input_embeddings())
    return head


def features(target, head, ids, amask=None):
    taps = FeatureTaps(target, head.config.fused_layer_ids, capture_final=True)
    amask = torch.ones_like(ids) if amask is None else amask
    with torch.no_grad(), taps.capture() as cap:
        target(input_ids=ids, attention_mask=amask)
    return {"input_ids": ids, "attention_mask": amask, "loss_mask": torch.ones_like(ids),
            "fused": cap.fused(), "final_hidden": cap.final_hidden}


@pytest.mark.parametrize("depth,switches", [(1, {}), (3, {}), (7, {}), (3, EAGLE31), (3, {"norm_output": True})])
def test_rollout_step_i_equals_real_drafter_i_steps_deep(target, depth, switches):
    """On a sequence continued by the head's own drafts, rollout step i at the last prompt row gives
    the same distribution as the real drafter at depth i (float32); EAGLE 3.1 heads too."""
    head = make_head(target, **switches)
    prompt = torch.randint(0, V, (1, 9), generator=torch.Generator().manual_seed(depth))
    runner = RaggedCacheLM(target, list(head.config.fused_layer_ids))
    runner.reset(1)
    feats = runner.forward(prompt[:, :-1], want_features=True).features
    drafter = Eagle3Drafter(head, target)
    drafter.begin(prompt, torch.ones_like(prompt, dtype=torch.bool), feats)
    sampling = SamplingConfig(temperature=1.0)
    drafts, q = drafter.propose(depth, sampling, torch.Generator().manual_seed(1))  # [1, depth], [1, depth, V]

    seq = torch.cat([prompt, drafts], 1)
    batch = features(target, head, seq)
    row = prompt.shape[1] - 2  # the row (f_{n-2}, x_{n-1}) whose step 0 predicts d_1
    with torch.no_grad():
        for i, h in rollout_steps(head, seq, batch["fused"], batch["attention_mask"], depth):
            p_roll = head.to_target_probs(torch.softmax(head.logits(h[0, row]).float(), -1))
            torch.testing.assert_close(p_roll, q[0, i], atol=2e-6, rtol=1e-4)


def test_rollout_differs_from_teacher_forcing_beyond_step_0(target):
    """Steps >= 1 use the head's own hidden, not target features: the simulation is not a no-op."""
    head = make_head(target)
    seq = torch.randint(0, V, (1, 12), generator=torch.Generator().manual_seed(3))
    batch = features(target, head, seq)
    with torch.no_grad():
        hs = [h for _, h in rollout_steps(head, seq, batch["fused"], batch["attention_mask"], 2)]
        teacher = head(seq, batch["fused"])  # step 0 for every row
    torch.testing.assert_close(hs[0], teacher, atol=1e-5, rtol=1e-5)
    assert (head.logits(hs[1][0, :-1]) - head.logits(teacher[0, 1:])).abs().max() > 1e-3


def test_loss_positions_and_counts():
    loss = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0]])
    amask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])  # right padding
    pos = loss_positions(loss, amask, depth=3)
    # step i row t trains on token t+i+2, which must be a real loss token
    assert pos[0, 0].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert pos[1, 0].nonzero().flatten().tolist() == [0, 1, 2]
    assert pos[2, 0].nonzero().flatten().tolist() == [0, 1]
    assert count_loss_tokens(loss, amask, 3).tolist() == [4, 3, 2]
    left = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    assert count_loss_tokens(torch.ones_like(left), left, 2).tolist() == [4, 3]


def test_padding_does_not_change_loss(target):
    """Left-padding a sequence leaves its per-step loss sums and counts unchanged."""
    head = make_head(target)
    seq = torch.randint(0, V, (1, 10), generator=torch.Generator().manual_seed(4))
    lm_w = target.get_output_embeddings().weight
    a = rollout(head, features(target, head, seq), lm_w, depth=3)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), seq], 1)
    amask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(seq)], 1)
    b = rollout(head, features(target, head, padded, amask), lm_w, depth=3)
    torch.testing.assert_close(a.counts, b.counts)
    torch.testing.assert_close(a.loss_sums, b.loss_sums, atol=1e-4, rtol=1e-5)


def test_partial_loss_mask_matches_all_rows_then_masked(target):
    """The output layer runs only on loss rows; the sums equal computing every row and masking after
    (a prompt region without loss, right padding, float64 reference)."""
    head = make_head(target)
    seq = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(9))
    amask = torch.ones_like(seq)
    amask[1, 9:] = 0
    batch = features(target, head, seq, amask)
    batch["loss_mask"] = torch.zeros_like(seq)
    batch["loss_mask"][0, 4:] = 1
    batch["loss_mask"][1, 6:] = 1
    lm_w = target.get_output_embeddings().weight
    depth = 3
    out = rollout(head, batch, lm_w, depth=depth)
    ok = loss_positions(batch["loss_mask"], amask, depth)
    with torch.no_grad():
        tgt = torch.softmax((batch["final_hidden"].double() @ lm_w.double().T)[..., head.target_ids], -1)
        full_top = (batch["final_hidden"] @ lm_w.T).argmax(-1)
        hidden = [h for _, h in rollout_steps(head, seq, batch["fused"], amask, depth)]
        for i in range(depth):
            logq = torch.log_softmax(head.logits(hidden[i]).double(), -1)  # every row
            p = tgt[:, i + 1:][:, : hidden[i].shape[1]]
            rows = p.shape[1]
            ce = -(p * logq[:, :rows]).sum(-1) * ok[i][:, :rows]
            torch.testing.assert_close(out.loss_sums[i].double(), ce.sum(), atol=1e-4, rtol=1e-5)
            pred = head.draft_to_target(logq[:, :rows].argmax(-1))
            agree = (pred == full_top[:, i + 1:][:, :rows]) & ok[i][:, :rows]
            assert out.correct[i].item() == agree.sum().item()
            assert out.counts[i].item() == ok[i].sum().item() > 0


@pytest.mark.parametrize("labels", ["soft", "argmax"])
def test_loss_is_cross_entropy_to_restricted_renormalised_target(target, labels):
    """Step i row t is trained toward the distribution the target gives x_{t+i+2} after reading
    x_0..x_{t+i+1}: the very distribution verification compares the depth-i draft against (or its top
    token within the draft vocabulary). The reference runs the target on each prefix separately (no
    shared indexing with the implementation), in float64."""
    head = make_head(target, draft_vocab=20)
    seq = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(6))
    batch = features(target, head, seq)
    lm_w = target.get_output_embeddings().weight
    depth = 3
    out = rollout(head, batch, lm_w, depth=depth, labels=labels)
    with torch.no_grad():
        hidden = [h for _, h in rollout_steps(head, seq, batch["fused"], batch["attention_mask"], depth)]
        for i in range(depth):
            ref, count, correct = 0.0, 0, 0
            for t in range(seq.shape[1] - i - 2):  # label x_{t+i+2} must exist
                prefix_logits = target(input_ids=seq[:, : t + i + 2]).logits[:, -1].double()  # [B, V]
                p = torch.softmax(prefix_logits[:, head.target_ids], -1)  # restricted, renormalised
                if labels == "argmax":
                    p = torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).double()
                logq = torch.log_softmax(head.logits(hidden[i][:, t]).double(), -1)
                ref += -(p * logq).sum()
                count += seq.shape[0]
                pred = head.draft_to_target(logq.argmax(-1))
                correct += int((pred == prefix_logits.argmax(-1)).sum())
            torch.testing.assert_close(out.loss_sums[i].double(), ref, atol=1e-4, rtol=1e-5)
            assert out.counts[i].item() == count
            assert out.correct[i].item() == correct
    assert out.counts.tolist() == [12.0, 10.0, 8.0]


@pytest.mark.parametrize("chunk", [5, 512])
def test_target_outputs_match_a_float64_reference_in_any_chunking(target, chunk):
    head = make_head(target, draft_vocab=20)
    hidden = torch.randn(3, 7, target.config.hidden_size, generator=torch.Generator().manual_seed(2))
    w = target.get_output_embeddings().weight
    logits, top = target_outputs(hidden, w, head, chunk=chunk)
    ref = hidden.double() @ w.double().T  # [3, 7, V]
    assert logits.shape == (3, 7, 20) and logits.dtype == torch.float32 and top.shape == (3, 7)
    torch.testing.assert_close(logits.double(), ref[..., head.target_ids], atol=1e-5, rtol=1e-5)
    assert torch.equal(top, ref.argmax(-1))
    draft_only, none = target_outputs(hidden, w, head, chunk=chunk, want_top=False)  # draft rows of lm_head only
    assert none is None
    torch.testing.assert_close(draft_only.double(), ref[..., head.target_ids], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("draft_vocab", [20, V])
def test_rollout_without_accuracy_has_the_same_loss_and_gradients(target, draft_vocab):
    head = make_head(target, draft_vocab=draft_vocab)
    batch = features(target, head, torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(4)))
    lm_w = target.get_output_embeddings().weight
    outs, grads = [], []
    for accuracy in (True, False):
        head.zero_grad()
        out = rollout(head, batch, lm_w, depth=3, accuracy=accuracy)
        out.loss().backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in head.named_parameters()})
    torch.testing.assert_close(outs[1].loss_sums, outs[0].loss_sums, atol=1e-5, rtol=1e-6)
    assert torch.equal(outs[1].counts, outs[0].counts)
    assert outs[1].correct.sum() == 0  # not measured
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("switches", [{}, EAGLE31])
def test_gradients_and_checkpointing_agree(target, switches):
    head = make_head(target, **switches)
    seq = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(8))
    batch = features(target, head, seq)
    lm_w = target.get_output_embeddings().weight
    grads = []
    for ckpt in (True, False):
        head.zero_grad()
        rollout(head, batch, lm_w, depth=4, checkpoint_attention=ckpt).loss().backward()
        grads.append({n: p.grad.clone() for n, p in head.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-6, rtol=1e-5)
    assert all(g.abs().sum() > 0 for g in grads[0].values())  # EAGLE 3.1's fc_norm gains are trained too
    assert ("fc_norm.0.weight" in grads[0]) == bool(switches)


def test_bad_arguments(target):
    head = make_head(target)
    batch = features(target, head, torch.randint(0, V, (1, 8)))
    with pytest.raises(ValueError, match="depth"):
        rollout(head, batch, target.get_output_embeddings().weight, depth=0)
    with pytest.raises(ValueError, match="decay"):
        rollout(head, batch, target.get_output_embeddings().weight, decay=1.5)
    with pytest.raises(ValueError, match="labels"):
        rollout(head, batch, target.get_output_embeddings().weight, labels="hard")


@pytest.mark.parametrize("stride", [2, 3])
def test_deep_stride_keeps_each_kept_rows_losses_and_gradients(target, stride):
    """Steps >= 1 on every stride-th row only: step 0 is untouched, every kept row's loss at every step is
    the full rollout's, and the gradient equals the full rollout's with the other rows' deep losses
    dropped (checkpointed attention included: its recomputation must use each step's own mask)."""
    head = make_head(target)
    seq = torch.randint(0, V, (2, 13), generator=torch.Generator().manual_seed(11))
    amask = torch.ones_like(seq)
    amask[1, 10:] = 0
    batch = features(target, head, seq, amask)
    batch["loss_mask"][0, :3] = 0
    lm_w = target.get_output_embeddings().weight
    depth = 4
    rows = deep_rows(seq, stride)
    assert rows is not None and rows[0] == int(seq.sum()) % stride and torch.all(rows.diff() == stride)
    full_ok = loss_positions(batch["loss_mask"], amask, depth)
    kept_ok = loss_positions(batch["loss_mask"], amask, depth, rows)
    assert torch.equal(kept_ok[0], full_ok[0]) and kept_ok[1:].sum() < full_ok[1:].sum()
    assert torch.equal(count_loss_tokens(batch["loss_mask"], amask, depth, rows), kept_ok.flatten(1).sum(1))

    head.zero_grad()
    out = rollout(head, batch, lm_w, depth=depth, deep_stride=stride)
    (out.loss_sums * out.weights).sum().backward()
    got = {n: p.grad.clone() for n, p in head.named_parameters() if p.grad is not None}
    assert torch.equal(out.counts, kept_ok.flatten(1).sum(1).float())

    head.zero_grad()
    with torch.no_grad():
        tgt = torch.softmax(target_outputs(batch["final_hidden"], lm_w, head, want_top=False)[0], -1)
    ref_sums = []
    for i, h in rollout_steps(head, seq, batch["fused"], amask, depth):  # every row, masked afterwards
        p = tgt[:, i + 1:][:, : h.shape[1]]
        logq = torch.log_softmax(head.logits(h).float(), -1)[:, : p.shape[1]]
        ref_sums.append((-(p * logq).sum(-1) * kept_ok[i][:, : p.shape[1]]).sum())
    ref = torch.stack(ref_sums)
    (ref * out.weights).sum().backward()
    torch.testing.assert_close(out.loss_sums.detach(), ref.detach(), atol=1e-4, rtol=1e-5)
    for n, g in got.items():
        torch.testing.assert_close(g, head.get_parameter(n).grad, atol=1e-5, rtol=1e-4)


def test_deep_rows_offsets_vary_with_the_batch():
    offsets = {int(deep_rows(torch.tensor([[k] + [0] * 8]), 3)[0]) for k in range(6)}
    assert offsets == {0, 1, 2}
    assert deep_rows(torch.zeros(2, 9, dtype=torch.long), 1) is None
    with pytest.raises(ValueError, match="deep_stride"):
        rollout(None, {"input_ids": torch.zeros(1, 5, dtype=torch.long), "attention_mask": torch.ones(1, 5)},
                torch.zeros(1), depth=2, deep_stride=0)


@pytest.mark.parametrize("deep", [False, True])
def test_labels_are_gathered_at_their_offset_as_the_shifted_copy_would_give(deep):
    """The per-step label rows come from an index gather; they equal the shifted-copy formulation exactly."""
    from eaglehead.train.rollout import _at_offset, _shift, deep_rows, loss_positions

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (3, 12), generator=g)
    amask = torch.ones(3, 12, dtype=torch.long)
    amask[0, :3] = 0  # left padding in one row
    lmask = (torch.rand(3, 12, generator=g) > 0.3).long()
    x = torch.randn(3, 12, 7, generator=g)
    cols = deep_rows(ids, 2) if deep else None
    ok = loss_positions(lmask, amask, 4, cols)
    rows = ids.shape[1] - 1
    for i in range(4):
        c = cols if i >= 1 else None
        sel = ok[i] if c is None else ok[i][:, c]
        want = _shift(x, i + 1)[:, :rows][:, slice(None) if c is None else c][sel]
        assert sel.any() and torch.equal(_at_offset(x, sel, c, i + 1), want)
