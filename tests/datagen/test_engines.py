"""Chat data written by a serving engine, against the real llama.cpp (the xllamacpp wheel) on the real SmolLM2 Q4_1
GGUF, on 127.0.0.1 only: both stages through the built-in server and through the openai engine pointed at a server,
a server down at start, killed mid-shard and Ctrl-C (resume: nothing lost or doubled, nothing left running), another
tokenizer, a bad URL, a missing or wrong API key, another engine or model in the same directory.

Small on purpose (3 Magpie turns + 2 seed prompts, 16-24 new tokens, 1 decode thread: llama.cpp's spinning threads
lose most to other processes on a shared 2-core machine)."""

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from eaglehead.builtin.packages import SMOLLM2, smollm2_gguf_path
from eaglehead.builtin.shipped import file_sha256
from eaglehead.builtin.typed_config import load_config
from eaglehead.datagen import chat_data as cd
from eaglehead.datagen import pipeline as datagen
from eaglehead.datagen.config import (ChatDataConfig, LlamaCppEngineConfig, OpenAIEngineConfig, RegenerateConfig,
                                      SynthesisConfig, shard_defining)
from eaglehead.datagen.engine_http import EngineError, JsonClient
from eaglehead.datagen.engine_llamacpp import LlamaCppEngine, start_server
from tests.tiny_models import save_tiny_target

KEY_ENV, KEY, ALIAS = "EAGLEHEAD_TEST_SERVER_KEY", "test-key-0123", "smollm2"


def _cfg(out, engine="llama.cpp", target=SMOLLM2, **regen) -> ChatDataConfig:
    r = dict(max_new_tokens=16, shard_size=3, engine=engine, max_concurrency=2, retries=2, retry_backoff_s=0.05,
             llamacpp=LlamaCppEngineConfig(slots=2, ctx_per_slot=1024, threads=1))
    r.update(regen)
    return ChatDataConfig(target=target, out_dir=str(out), regenerate=RegenerateConfig(**r),
                          synthesis=SynthesisConfig(magpie_prompts=3, stdlib_prompts=2, pydoc_prompts=0,
                                                    max_new_tokens=24, max_rounds=3, second_turn_fraction=0.5,
                                                    keep_unfinished=True))


def _openai(url, model=ALIAS, key_env=KEY_ENV) -> OpenAIEngineConfig:
    return OpenAIEngineConfig(base_url=f"{url}/v1", model=model, api_key_env=key_env)


class _Posts:
    """Counts completion requests (the real ones, through the real client); ``then`` runs after the ``at``-th."""

    def __init__(self, monkeypatch, at=None, then=None):
        self.n, self.at, self.then, real = 0, at, then, JsonClient.request
        lock = threading.Lock()

        def counting(client, method, path, body=None, **kw):
            reply = real(client, method, path, body, **kw)
            if method == "POST" and path.endswith(("/completion", "/completions")):
                with lock:
                    self.n += 1
                    fire = self.n == self.at
                if fire:
                    self.then()
            return reply

        monkeypatch.setattr(JsonClient, "request", counting)


def _refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("engine")]


@pytest.fixture
def started(monkeypatch):
    """The built-in engines started during the test (each one's server process, URL, ...)."""
    return _record_starts(monkeypatch)


def _record_starts(monkeypatch) -> list:
    engines = []
    real_start = LlamaCppEngine.start.__func__

    def start(cls, *a):
        engines.append(real_start(cls, *a))
        return engines[-1]

    monkeypatch.setattr(LlamaCppEngine, "start", classmethod(start))
    return engines


def _gone(engine) -> bool:
    """The engine's server process has exited, its port refuses connections and no request thread is left."""
    return engine.process.proc.poll() is not None and _refused(engine.client.base_url) and _engine_threads() == []


def _rows(out) -> list[dict]:
    return [json.loads(x) for x in (Path(out) / "conversations.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run of the built-in engine: ``(out_dir, manifest, completion requests it made, engine)``."""
    out = tmp_path_factory.mktemp("builtin")
    with pytest.MonkeyPatch.context() as mp:
        posts, engines = _Posts(mp), _record_starts(mp)
        manifest = datagen.run(_cfg(out))
    return out, manifest, posts.n, engines


@pytest.fixture(scope="module")
def server():
    """llama.cpp's server on the SmolLM2 GGUF, started by the test (as a user would start vLLM), with an API key."""
    srv = start_server(smollm2_gguf_path(), slots=2, ctx_per_slot=1024, threads=1, http_threads=4, api_key=KEY,
                       alias=ALIAS)
    yield srv.url
    srv.stop()
    assert _refused(srv.url) and srv.proc.returncode is not None


def test_the_builtin_llamacpp_server_writes_both_stages_and_stops(reference):
    out, manifest, posts, _ = reference
    rows = _rows(out)
    assert manifest["conversations"] == len(rows) == 5 and manifest["followups"] >= 1
    assert [r["id"] for r in rows] == [f"chat-{i:06d}" for i in range(5)]
    assert {r["source"] for r in rows} == {"magpie", "stdlib"}
    from transformers import AutoTokenizer

    from eaglehead.builtin.models import resolve_target
    tok = AutoTokenizer.from_pretrained(resolve_target(SMOLLM2))
    gguf = smollm2_gguf_path()
    shards = sorted(Path(out).glob("*/*-0*.jsonl"))
    assert {p.parent.name for p in shards} == {"user", "answer", "followup", "answer2"}
    for path in shards:  # every shard records who wrote it; ids are the server's own, capped, ended as reported
        record = cd.read_record(path)
        assert record["engine"] == "llama.cpp" and record["token_ids"] == "server"
        assert record["model_sha256"] == file_sha256(gguf) and record["model"] == gguf.name
        cap = 24 if path.parent.name in ("user", "followup") else 16
        for r in cd.read_shard(path):
            assert r["ids"] and all(0 <= t < len(tok) for t in r["ids"])
            assert (r["ids"][-1] == tok.eos_token_id) == r["eos"] and (r["eos"] or len(r["ids"]) == cap)
    answers = {r["index"]: r for p in sorted((Path(out) / "answer").glob("*.jsonl")) for r in cd.read_shard(p)}
    for i, row in enumerate(rows):  # the data holds exactly the decoded shards
        assert row["messages"][1]["content"] == tok.decode(answers[i]["ids"], skip_special_tokens=True).strip()
    assert posts == sum(len(cd.read_shard(p)) for p in shards)  # one request per prompt, none repeated
    assert _refused(manifest["engine"]["server"]) and _engine_threads() == []  # nothing left running
    assert reference[3][0].process.proc.returncode is not None


def test_the_openai_engine_on_a_running_server_writes_the_same_data(reference, server, tmp_path, monkeypatch):
    """The same prompts, sampling settings and per-request seeds through /v1/completions (text back, retokenized)
    give the data the built-in engine wrote through /completion (ids back); the API key is sent (the server wants
    it)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    manifest = datagen.run(_cfg(tmp_path, engine="openai", openai=_openai(server)))
    assert (tmp_path / "conversations.jsonl").read_bytes() == (reference[0] / "conversations.jsonl").read_bytes()
    record = cd.read_record(tmp_path / "answer" / "answer-00000.jsonl")
    assert record == manifest["engine"]
    assert record["engine"] == "openai" and record["model"] == ALIAS and record["token_ids"] == "retokenized"
    assert record["server_version"].startswith("llama.cpp ") and record["model_sha256"] is None


def test_a_server_down_at_start_is_an_error_naming_the_url(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(EngineError, match=rf"regenerate.openai.base_url {url}/v1: no server answers there "
                                          r"\(GET .*/v1/models: failed after 3 attempt\(s\); last error: Connection"):
        datagen.run(_cfg(tmp_path, engine="openai", openai=_openai(url)))
    assert not list(tmp_path.glob("*/*.jsonl"))


def test_a_server_killed_mid_shard_fails_naming_the_prompt_and_a_rerun_resumes(reference, tmp_path, monkeypatch,
                                                                               started):
    """Kill after the 4th completion (the Magpie shard of 3 is written, the first answer shard is not): the shard
    fails naming its prompt and the URL; the rerun redoes only what is missing and writes the uninterrupted data."""
    assert reference[1]["magpie_rounds"] == 1  # so the 4th completion is an answer
    _Posts(monkeypatch, at=4, then=lambda: os.kill(started[-1].process.proc.pid, signal.SIGKILL))
    with pytest.raises(EngineError, match=r"prompt answer of chat-00000\d: POST http://127.0.0.1:\d+/completion: "
                                          r"failed after 3 attempt\(s\)"):
        datagen.run(_cfg(tmp_path))
    assert _gone(started[0])
    done = sorted(p.name for p in tmp_path.glob("*/*-0*.jsonl"))
    assert done == ["user-00000.jsonl"] and not (tmp_path / "conversations.jsonl").exists()
    before = (tmp_path / "user" / "user-00000.jsonl").stat().st_mtime_ns

    posts = _Posts(monkeypatch)
    datagen.run(_cfg(tmp_path))
    assert (tmp_path / "conversations.jsonl").read_bytes() == (reference[0] / "conversations.jsonl").read_bytes()
    assert posts.n == reference[2] - 3  # the 3 Magpie turns on disk are read back, not asked again
    assert (tmp_path / "user" / "user-00000.jsonl").stat().st_mtime_ns == before


def test_ctrl_c_mid_shard_stops_the_server_and_leaves_only_whole_shards(tmp_path, monkeypatch, started):
    # Python raises KeyboardInterrupt on SIGINT only if the process did not inherit SIGINT ignored, as a command
    # started in the background by a non-interactive shell (`pytest ... &`) does: install the handler for the test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _Posts(monkeypatch, at=2, then=lambda: os.kill(os.getpid(), signal.SIGINT))  # a real Ctrl-C, mid Magpie shard
        with pytest.raises(KeyboardInterrupt):
            datagen.run(_cfg(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _gone(started[0])
    assert not list(tmp_path.glob("*/*.jsonl")) and not list(tmp_path.glob("*/.*tmp*"))


def test_a_server_with_another_tokenizer_is_refused_naming_both(server, tmp_path, monkeypatch):
    tiny = tmp_path / "tiny_target"
    save_tiny_target(tiny, seed=3, layers=1)
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(EngineError, match=rf"tokenizer mismatch: the server at {server}/v1 \(model '{ALIAS}'\) and "
                                          rf"the target '{tiny}' tokenize the same chat-templated text differently"):
        datagen.run(_cfg(tmp_path / "out", engine="openai", target=str(tiny), openai=_openai(server)))
    assert not list((tmp_path / "out").glob("*/*.jsonl"))


def test_bad_urls_keys_and_engines_are_named(server, tmp_path, monkeypatch):
    for bad in ("127.0.0.1:8000/v1", "ftp://127.0.0.1/v1", "http://127.0.0.1:99999/v1"):
        with pytest.raises(ValueError, match=f"regenerate.openai.base_url: .*{bad}"):
            _cfg(tmp_path, engine="openai", openai=OpenAIEngineConfig(base_url=bad, model=ALIAS))
    with pytest.raises(ValueError, match="regenerate.openai.base_url and regenerate.openai.model are required"):
        _cfg(tmp_path, engine="openai")
    yaml = tmp_path / "data.yaml"
    yaml.write_text(f"target: {SMOLLM2}\nout_dir: {tmp_path}\nregenerate:\n  engine: sglang\n")
    with pytest.raises(ValueError, match=r"regenerate.engine' expects one of 'torch', 'openai', 'llama.cpp', "
                                         r"'vllm', got 'sglang'"):
        load_config(ChatDataConfig, yaml)
    yaml.write_text(f"target: {SMOLLM2}\nout_dir: {tmp_path}\nregenerate:\n  engine: openai\n  openai:\n    url: x\n")
    with pytest.raises(ValueError, match=r"unknown key 'regenerate.openai.url'"):
        load_config(ChatDataConfig, yaml)

    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(EngineError, match=f"regenerate.openai.api_key_env: the environment variable '{KEY_ENV}' is "
                                          "not set"):
        datagen.run(_cfg(tmp_path / "a", engine="openai", openai=_openai(server)))
    monkeypatch.setenv(KEY_ENV, "wrong")
    with pytest.raises(EngineError, match=rf"{server}/v1: HTTP 401 .* the key in \${KEY_ENV} was refused"):
        datagen.run(_cfg(tmp_path / "b", engine="openai", openai=_openai(server)))
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(EngineError, match=rf"regenerate.openai.model 'SmolLM2': the server at {server}/v1 serves "):
        datagen.run(_cfg(tmp_path / "c", engine="openai", openai=_openai(server, model="SmolLM2")))


def test_a_prompt_the_server_rejects_fails_at_once_naming_it(server, tmp_path, monkeypatch):
    """HTTP 400 (this prompt does not fit the server's 1024-token slot) is not retried: it fails at once (a retry
    would first wait retry_backoff_s = 60 s) with the server's reason and the conversation's id."""
    monkeypatch.setenv(KEY_ENV, KEY)
    long = {"source": "stdlib", "prompt": "Summarise this text: " + "stack queue heap tree " * 300}
    monkeypatch.setattr(cd, "stdlib_task_prompts", lambda n, seed=0: [{"source": "stdlib", "prompt": "Explain zip."},
                                                                      long])
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match=r"prompt answer of chat-000004: POST .*/v1/completions: HTTP 400: .*exceeds "
                                          r"the available context size"):
        datagen.run(_cfg(tmp_path, engine="openai", openai=_openai(server), retry_backoff_s=60.0, shard_size=8))
    assert time.perf_counter() - t0 < 60.0


def test_a_directory_started_with_another_engine_or_model_is_refused(reference, tmp_path, started):
    import shutil

    from eaglehead.builtin.gguf_target import rewrite_gguf

    with pytest.raises(ValueError, match="regenerate.engine: the directory has 'llama.cpp', this config 'torch'"):
        datagen.run(_cfg(reference[0], engine="torch"))
    # The same settings on another file (one metadata value changed): refused by the shards' records.
    other = rewrite_gguf(smollm2_gguf_path(), tmp_path / "other.gguf", kv={"general.name": "another model"})
    shutil.copytree(reference[0], tmp_path / "out")
    cfg = _cfg(tmp_path / "out", llamacpp=LlamaCppEngineConfig(slots=1, ctx_per_slot=1024, threads=1, file=str(other)))
    with pytest.raises(ValueError, match=r"user-00000.jsonl: written by another engine or model than this run's "
                                         rf"\(model_sha256: the shard has '{file_sha256(smollm2_gguf_path())}', this "
                                         rf"run '{file_sha256(other)}'\)"):
        datagen.run(cfg)
    assert _gone(started[0])


def test_engine_settings_that_do_not_change_the_data_are_not_shard_defining(tmp_path):
    torch_cfg = _cfg(tmp_path, engine="torch")
    saved = shard_defining(torch_cfg)
    assert "engine" not in saved["regenerate"] and "max_concurrency" not in saved["regenerate"]  # old dirs resume
    a, b = _cfg(tmp_path), _cfg(tmp_path, max_concurrency=7, retries=0, request_timeout_s=5.0,
                                llamacpp=LlamaCppEngineConfig(slots=5, threads=2, ctx_per_slot=2048))
    assert shard_defining(a) == shard_defining(b) and shard_defining(a)["regenerate"]["llamacpp"] == {"gguf": "as-is"}
    b.regenerate.llamacpp.gguf = "float32"
    assert shard_defining(a) != shard_defining(b)


def test_the_server_process_dies_with_a_killed_parent(tmp_path):
    """SIGKILL leaves eaglehead no chance to stop its server: the server's process goes by itself (stdin closed,
    and PR_SET_PDEATHSIG on Linux)."""
    import select
    import subprocess
    import sys

    code = ("import time\nfrom eaglehead.builtin.packages import smollm2_gguf_path\n"
            "from eaglehead.datagen.engine_llamacpp import start_server\n"
            "s = start_server(smollm2_gguf_path(), slots=1, ctx_per_slot=256, threads=1, http_threads=2)\n"
            "print(s.proc.pid, s.url, flush=True)\ntime.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert select.select([parent.stdout], [], [], 90)[0], "the parent did not start its server"
        pid, url = parent.stdout.readline().decode().split()
        assert not _refused(url)
    finally:
        parent.kill()
        parent.wait()

    def dead() -> bool:  # exited (gone, or a zombie nobody reaped yet) and its port closed
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = None
        return state in (None, "Z") and _refused(url)

    deadline = time.monotonic() + 15  # a killed process's threads may take a moment to be torn down
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dead()


def test_a_gguf_llamacpp_cannot_serve_is_named(tmp_path):
    with pytest.raises(ValueError, match=rf"regenerate.llamacpp.file '{tmp_path}/none.gguf': no such file"):
        datagen.run(_cfg(tmp_path / "a", llamacpp=LlamaCppEngineConfig(file=str(tmp_path / "none.gguf"))))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(EngineError, match=rf"llama.cpp could not start on regenerate.llamacpp.file {bad}: "):
        datagen.run(_cfg(tmp_path / "b", llamacpp=LlamaCppEngineConfig(file=str(bad), threads=1)))
    assert not list(tmp_path.glob("*/*/*.jsonl"))
