"""``regenerate.engine: vllm``: eaglehead starts vLLM's CPU build on the float32 SmolLM2, writes both stages of a
small chat data set through it with the ids vLLM sampled (exact), and stops it. Greedy answers equal the torch
target's greedy continuations of the same prompts (float32 in both: vLLM runs the torch model); this is also the
``openai`` engine's client tested against a real vLLM server. One vLLM start (~30 s on 2 cores)."""

from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import VllmEngineConfig, shard_defining

from eaglehead.builtin.packages import SMOLLM2

from .test_engines import _cfg, _refused, _rows


def test_vllm_writes_greedy_answers_equal_to_torchs_with_its_own_ids(tmp_path):
    """The user turns are sampled (synthesis at T = 1: another random stream than torch's), the answers greedy: each
    answer's ids, as vLLM returned them, are the torch target's greedy continuation of the same prompt."""
    import torch

    from eaglehead.builtin.models import load_target
    from eaglehead.decode import SamplingConfig, vanilla_generate

    vllm_out = tmp_path / "vllm"
    manifest = datagen.run(_cfg(vllm_out, engine="vllm", temperature=0.0, vllm=VllmEngineConfig(max_model_len=1024)))
    rows = _rows(vllm_out)
    assert len(rows) == 5
    model, tok = load_target(SMOLLM2, dtype="float32")
    answers = {r["index"]: r for p in sorted((vllm_out / "answer").glob("*.jsonl")) for r in cd.read_shard(p)}
    for i, row in enumerate(rows):
        text = tok.apply_chat_template(row["messages"][:1], tokenize=False, add_generation_prompt=True)
        prompt = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        greedy = vanilla_generate(model, prompt, sampling=SamplingConfig(temperature=0), max_new_tokens=16,
                                  eos_token_id=[tok.eos_token_id]).tokens[0]
        assert answers[i]["ids"] == greedy, i
    record = cd.read_record(vllm_out / "answer" / "answer-00000.jsonl")
    assert record == manifest["engine"]
    assert record["engine"] == "vllm" and record["token_ids"] == "server"
    assert record["server_version"].startswith("vllm ")
    assert _refused(record["server"].removesuffix("/v1"))  # stopped on leaving
    assert (vllm_out / "vllm.log").is_file()


def test_the_vllm_model_and_dtype_define_the_shards_and_client_settings_do_not():
    base = _cfg("out", engine="vllm", temperature=0.0)
    other_dtype = _cfg("out", engine="vllm", temperature=0.0)
    other_dtype.dtype = "bfloat16"
    assert shard_defining(base) != shard_defining(other_dtype)
    assert shard_defining(base)["regenerate"]["vllm"] == {"model": None}
    quiet = _cfg("out", engine="vllm", temperature=0.0, vllm=VllmEngineConfig(threads=1, max_model_len=2048),
                 max_concurrency=3)
    assert shard_defining(quiet) == shard_defining(base)
