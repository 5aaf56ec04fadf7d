"""EAGLE 3.1 (``fc_norm`` / ``norm_output``): the head against a float64 reference written out here, the
switches off = the EAGLE-3 head, and the switches through save/load, the engine exports and the GGUF refusal.

Tolerance: the head runs in float32 and the reference in float64. Logits are O(4), but without fc_norm the
projected features reach ~50 (the test's deepest fused layer is 40x the shallowest, as in real targets), and
float32 rounding at that scale left at most 4e-6 in the logits (measured); ``ATOL = 5e-5`` leaves a tenfold
margin. Each switch, flipped in the reference, moves some logit by ~4, far above ``100 * ATOL`` (asserted),
so a head that ignored a switch, or applied it in the wrong place, fails.
"""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from eaglehead.draftheads import (DraftKVCache, Eagle3Config, Eagle3Head, attend, causal_mask, eagle3_config_dict,
                                  export_eagle3, export_speculators, load_head, load_pretrained, save_pretrained,
                                  speculators_config_dict)
from eaglehead.draftheads.gguf_head import GGUFExportError, export_gguf

from .common import VOCAB, tiny_config, tiny_head

ATOL = 5e-5
EAGLE31 = {"fc_norm": True, "norm_output": True}
VARIANTS = [EAGLE31, {"fc_norm": True}, {"norm_output": True}]
EAGLE3_KEYS = {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} | {
    f"midlayer.{k}.weight" for k in ("input_layernorm", "hidden_norm", "post_attention_layernorm",
                                     "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}


# ---------------------------------------------------------------- float64 reference, one row at a time
def _rms(x, gain, eps):
    return gain * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def _rotate(x, pos: int, theta: float):
    """RoPE of one position, rotate-half layout: pairs (i, i + d/2) turn by pos * theta^(-2i/d)."""
    half = x.shape[-1] // 2
    angle = pos * theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()), -1)


class Reference:
    """The EAGLE-3 / 3.1 draft step in float64 from the published description, not from ``Eagle3Head``."""

    def __init__(self, head: Eagle3Head, **flip):
        self.cfg = Eagle3Config.from_dict({**head.config.to_dict(), **flip})
        self.w = {k: v.detach().double() for k, v in head.state_dict().items()}
        self.eps = self.cfg.rms_norm_eps

    def fuse(self, feature):
        """fc over the concatenated features ``[k * H_t]``; with fc_norm each H_t-wide part is normed first."""
        if self.cfg.fc_norm:
            parts = feature.split(self.cfg.target_hidden_size)
            feature = torch.cat([_rms(p, self.w[f"fc_norm.{i}.weight"], self.eps) for i, p in enumerate(parts)])
        return self.w["fc.weight"] @ feature

    def row(self, emb, h, pos: int, past: list):
        """One row of the decoder layer; ``past``: the (k, v) it may attend besides its own. -> (out, (k, v))."""
        w, c, m = self.w, self.cfg, "midlayer."
        d, heads, groups = c.head_dim, c.num_attention_heads, c.num_attention_heads // c.num_key_value_heads
        x = torch.cat((_rms(emb, w[m + "input_layernorm.weight"], self.eps),
                       _rms(h, w[m + "hidden_norm.weight"], self.eps)))
        q = _rotate((w[m + "self_attn.q_proj.weight"] @ x).view(heads, d), pos, c.rope_theta)
        k = _rotate((w[m + "self_attn.k_proj.weight"] @ x).view(-1, d), pos, c.rope_theta)
        v = (w[m + "self_attn.v_proj.weight"] @ x).view(-1, d)
        keys = torch.stack([kv[0] for kv in past] + [k])  # [n, kv_heads, d]
        values = torch.stack([kv[1] for kv in past] + [v])
        heads_out = []
        for j in range(heads):
            p = torch.softmax(keys[:, j // groups] @ q[j] / math.sqrt(d), 0)
            heads_out.append(p @ values[:, j // groups])
        h1 = h + w[m + "self_attn.o_proj.weight"] @ torch.cat(heads_out)  # residual: the un-normed input
        y = _rms(h1, w[m + "post_attention_layernorm.weight"], self.eps)
        y = w[m + "mlp.down_proj.weight"] @ (F.silu(w[m + "mlp.gate_proj.weight"] @ y) * (w[m + "mlp.up_proj.weight"] @ y))
        return h1 + y, (k, v)

    def emit(self, out):
        """(logits over the draft vocabulary, the hidden carried to the next step): lm_head always reads the
        final-normed state; EAGLE 3.1's norm_output carries that one, EAGLE-3 the pre-norm one."""
        normed = _rms(out, self.w["norm.weight"], self.eps)
        return self.w["lm_head.weight"] @ normed, (normed if self.cfg.norm_output else out)

    def draft(self, emb_rows, features, emb_fed):
        """Step 0 over rows ``0..R-1`` (feature r with embedding r, position r), then one self-fed step per
        row of ``emb_fed`` from the last row. -> logits ``[R + len(emb_fed), Vd]``."""
        past, logits, carried = [], [], None
        for r in range(len(features)):
            out, kv = self.row(emb_rows[r], self.fuse(features[r]), r, past)
            past.append(kv)
            lg, carried = self.emit(out)
            logits.append(lg)
        for i, emb in enumerate(emb_fed):
            out, kv = self.row(emb, carried, len(features) + i, past)
            past.append(kv)
            lg, carried = self.emit(out)
            logits.append(lg)
        return torch.stack(logits)

    def rollout_step1(self, emb_rows, features, emb_next):
        """Training-time step 1 of every row t: its step-0 carried hidden with the next token's embedding at
        position t+1, attending the step-0 keys of rows <= t and its own. -> logits ``[R, Vd]``."""
        past, carried = [], []
        for r in range(len(features)):
            out, kv = self.row(emb_rows[r], self.fuse(features[r]), r, past)
            past.append(kv)
            carried.append(self.emit(out)[1])
        return torch.stack([self.emit(self.row(emb_next[t], carried[t], t + 1, past[: t + 1])[0])[0]
                            for t in range(len(features))])


def _inputs(head, seed=0, batch=2, tokens=9):
    """Token ids ``[B, T]`` and fused features ``[B, T-1, 3 H_t]`` whose three layers differ in scale (1, 8, 40:
    deeper target layers are larger), which is what fc_norm exists to equalise."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (batch, tokens), generator=gen)
    scale = torch.tensor([1.0, 8.0, 40.0]).repeat_interleave(head.config.target_hidden_size)
    return ids, torch.randn(batch, tokens - 1, head.config.fused_width, generator=gen) * scale


def _head_draft(head, ids, feats, fed_ids):
    """The drafting path (as decode/eagle.py runs it): prompt rows into a KV cache, then self-fed steps."""
    b, rows = feats.shape[:2]
    cache = DraftKVCache.for_head(head, batch_size=b)
    h = head.layer_forward(head.embed(ids[:, 1:]), head.project(feats), torch.arange(rows).expand(b, rows), cache=cache)
    logits, carried = [head.logits(h)], h[:, -1:]
    for i in range(fed_ids.shape[1]):
        carried = head.layer_forward(head.embed(fed_ids[:, i: i + 1]), carried, torch.full((b, 1), rows + i),
                                     cache=cache)
        logits.append(head.logits(carried))
    return torch.cat(logits, 1)  # [B, R + steps, Vd]


def _reference(head, ids, feats, fed_ids, **flip):
    emb, ref = head.embed(ids).double(), Reference(head, **flip)
    fed = head.embed(fed_ids).double()
    return torch.stack([ref.draft(emb[b, 1:], feats[b].double(), fed[b]) for b in range(ids.shape[0])])


@pytest.mark.parametrize("switches", VARIANTS)
def test_drafting_logits_match_the_float64_reference(switches):
    head = tiny_head(seed=3, **switches)
    ids, feats = _inputs(head)
    fed = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        got = _head_draft(head, ids, feats, fed).double()
        teacher = head.logits(head(ids, feats)).double()  # forward(): step 0 of every row, no cache
    want = _reference(head, ids, feats, fed)
    rows = feats.shape[1]
    assert (got - want).abs().max() <= ATOL
    assert (teacher - want[:, :rows]).abs().max() <= ATOL
    # Each switch that is on matters beyond the tolerance: flipped off in the reference, the logits move.
    for name in switches:
        moved = (_reference(head, ids, feats, fed, **{name: False}) - want).abs()
        where = slice(None) if name == "fc_norm" else slice(rows, None)  # norm_output first acts at step 1
        assert moved[:, where].max() > 100 * ATOL, name
    if switches == {"norm_output": True}:  # it changes only the carried hidden: step 0 is EAGLE-3's
        assert (_reference(head, ids, feats, fed, norm_output=False)[:, :rows] - want[:, :rows]).abs().max() == 0


@pytest.mark.parametrize("switches", VARIANTS)
def test_rollout_pieces_match_the_float64_reference(switches):
    """The training path (qkv / attend with the diagonal keys / finish / logits, as train/rollout.py) at step 1."""
    head = tiny_head(seed=4, **switches)
    ids, feats = _inputs(head, seed=1, tokens=10)
    rows = feats.shape[1] - 1  # step 1 of row t reads token t+2: the last feature has no such token
    with torch.no_grad():
        emb_all = head.embed(ids)
        pos = torch.arange(rows).expand(2, rows)
        mask0 = causal_mask(None, rows)
        q, k0, v0, res = head.qkv(emb_all[:, 1:rows + 1], head.project(feats[:, :rows]), pos)
        h0 = head.finish(attend(q, k0, v0, mask0), res)
        q, k1, v1, res = head.qkv(emb_all[:, 2:rows + 2], h0, pos + 1)
        h1 = head.finish(attend(q, k0, v0, mask0, k1[:, :, None], v1[:, :, None]), res)
        got = head.logits(h1).double()
    emb = emb_all.double()
    want = torch.stack([Reference(head).rollout_step1(emb[b, 1:], feats[b, :rows].double(), emb[b, 2:])
                        for b in range(2)])
    assert (got - want).abs().max() <= ATOL


def test_off_is_the_eagle3_head():
    """Defaults: no new parameter, and every piece computes exactly what the EAGLE-3 head did (bitwise)."""
    cfg = tiny_config()
    assert (cfg.fc_norm, cfg.norm_output) == (False, False)
    head = tiny_head()
    assert head.fc_norm is None and set(head.state_dict()) == EAGLE3_KEYS
    ids, feats = _inputs(head)
    with torch.no_grad():
        assert torch.equal(head.project(feats), head.fc(feats))
        h = head(ids, feats)
        assert torch.equal(head.logits(h), head.lm_head(head.norm(h)))
        emb = head.embed(ids[:, 1:])
        pos = torch.arange(8).expand(2, 8)
        q, k, v, res = head.qkv(emb, head.fc(feats), pos)
        attn = attend(q, k, v, causal_mask(None, 8))
        assert torch.equal(head.finish(attn, res), head.midlayer.finish(attn, res))
        assert torch.equal(h, head.midlayer.finish(attn, res))
    # The same weights with EAGLE 3.1 switched on give other logits (the comparison above can fail).
    on = Eagle3Head(tiny_config(**EAGLE31))
    on.load_state_dict({**head.state_dict(), **{f"fc_norm.{i}.weight": torch.ones(32) for i in range(3)}})
    on.bind_embedding(head._embedding)
    fed = torch.randint(0, VOCAB, (2, 2), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (_head_draft(on, ids, feats, fed) - _head_draft(head, ids, feats, fed)).abs().max() > 100 * ATOL


def test_config_round_trip_old_dicts_and_bad_values():
    cfg = tiny_config(**EAGLE31)
    assert Eagle3Config.from_dict(cfg.to_dict()) == cfg
    old = tiny_config().to_dict()
    del old["fc_norm"], old["norm_output"]  # a config saved before EAGLE 3.1 existed
    assert Eagle3Config.from_dict(old) == tiny_config()
    for name in ("fc_norm", "norm_output"):
        with pytest.raises(ValueError, match=f"{name} must be a bool, got 1"):
            tiny_config(**{name: 1})


@pytest.mark.parametrize("switches", VARIANTS)
def test_save_load_and_engine_exports_round_trip(tmp_path, switches):
    head = tiny_head(seed=6, **switches)
    ids, feats = _inputs(head)
    fed = torch.randint(0, VOCAB, (2, 2), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = _head_draft(head, ids, feats, fed)
    on = {k: True for k in switches}
    norms = {f"fc_norm.{i}.weight" for i in range(3)} if switches.get("fc_norm") else set()
    # Ours: the config as saved, loaded back.
    saved = json.loads((save_pretrained(head, tmp_path / "ours") / "config.json").read_text())
    assert {k: saved[k] for k in ("fc_norm", "norm_output")} == {"fc_norm": False, "norm_output": False, **on}
    loads = {"ours": load_pretrained(tmp_path / "ours")}
    # The engines' layouts: the switches at the top level, only when on (absent = off in every loader).
    e3 = json.loads((export_eagle3(head, tmp_path / "e3") / "config.json").read_text())
    spec = json.loads((export_speculators(head, tmp_path / "spec") / "config.json").read_text())
    for cfg in (e3, spec):
        assert {k: cfg[k] for k in ("fc_norm", "norm_output") if k in cfg} == on
    assert "fc_norm" not in e3["eagle_config"] and "fc_norm" not in spec["transformer_layer_config"]
    assert set(load_file(str(tmp_path / "e3" / "model.safetensors"))) == EAGLE3_KEYS | norms
    spec_keys = set(load_file(str(tmp_path / "spec" / "model.safetensors")))
    assert spec_keys == {k.replace("midlayer.", "layers.0.") for k in EAGLE3_KEYS} | norms  # fc_norm stays top level
    loads |= {"eagle3": load_head(tmp_path / "e3"), "speculators": load_head(tmp_path / "spec")}
    for layout, back in loads.items():
        assert back.config == head.config, layout
        back.bind_embedding(head._embedding)
        with torch.no_grad():
            assert torch.equal(_head_draft(back, ids, feats, fed), want), layout


def test_export_dicts_of_an_eagle3_head_have_no_eagle31_keys():
    head = tiny_head()
    for cfg in (eagle3_config_dict(head), speculators_config_dict(head)):
        assert "fc_norm" not in cfg and "norm_output" not in cfg


def test_engine_imports_refuse_what_the_head_cannot_be(tmp_path):
    head = tiny_head(**EAGLE31)
    path = export_eagle3(head, tmp_path / "e3")
    raw = json.loads((path / "config.json").read_text())
    # A 3.1 checkpoint whose config lost the switch: its fc_norm tensors are refused, not silently dropped.
    (path / "config.json").write_text(json.dumps({k: v for k, v in raw.items() if k != "fc_norm"}))
    with pytest.raises(ValueError, match=r"unexpected key\(s\) \['fc_norm.0.weight'"):
        load_head(path)
    # null reads as off (the engines' getattr(config, key, False) sees a falsy value).
    (path / "config.json").write_text(json.dumps({**raw, "norm_output": None}))
    assert load_head(path).config.norm_output is False
    # norm_before_fc (one norm over the whole concatenation) is another architecture: refused by name.
    for patch in ({"norm_before_fc": True}, {"eagle_config": {**raw["eagle_config"], "norm_before_fc": True}}):
        (path / "config.json").write_text(json.dumps({**raw, **patch}))
        with pytest.raises(ValueError, match=r"norm_before_fc is true .*Eagle3Head has no such norm"):
            load_head(path)


@pytest.mark.parametrize("switches", VARIANTS)
def test_gguf_export_refuses_eagle31_naming_the_switch(tmp_path, switches):
    """llama.cpp's EAGLE-3 loader has neither norm (see draftheads/gguf_head.py): refused before anything is read
    or written. An EAGLE-3 head with the same (missing) target gets past that check and fails on the target."""
    missing = tmp_path / "no-target.gguf"
    name = "fc_norm" if switches.get("fc_norm") else "norm_output"
    with pytest.raises(GGUFExportError, match=rf"^{name}: an EAGLE 3.1 head .*llama.cpp's EAGLE-3 drafter"):
        export_gguf(tiny_head(**switches), tmp_path / "h.gguf", target=missing)
    assert not (tmp_path / "h.gguf").exists()
    with pytest.raises(GGUFExportError, match="expected a .gguf file or a Hugging Face model directory"):
        export_gguf(tiny_head(), tmp_path / "h.gguf", target=missing)
