"""The vLLM stream driver (eval/load_drivers.py: ``VllmStream`` over ``VllmServer.complete``) against a fake
OpenAI server in this process: token ids and their arrival times reach the load generator, chunks of several
tokens share their time, and ``finish_reason`` "stop" is an EOS end. No vLLM process is started."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eaglehead.engines.vllm_engine import VllmServer
from eaglehead.eval.load import LoadSpec, Request, run_load, summarise
from eaglehead.eval.load_drivers import VllmStream

GAP_S = 0.02


class _Fake(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n, stop = body["max_tokens"], body["stop_token_ids"]
        # two tokens per chunk (a speculative round), then an EOS when the prompt asks for a short answer
        ids = list(range(10, 10 + n))
        if body["prompt"][0] == 0:
            ids = ids[:3] + [stop[0]]
        for i in range(0, len(ids), 2):
            time.sleep(GAP_S)
            last = i + 2 >= len(ids)
            reason = ("stop" if body["prompt"][0] == 0 else "length") if last else None
            chunk = {"choices": [{"token_ids": ids[i:i + 2], "finish_reason": reason}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = VllmServer.__new__(VllmServer)  # the real client, without starting vLLM
    server.url, server.name = f"http://127.0.0.1:{httpd.server_address[1]}", "fake"
    yield server
    httpd.shutdown()


def test_vllm_stream_driver_times_chunks_and_discloses_eos(fake_server):
    drv = VllmStream(fake_server, slots=2, eos={2})
    reqs = [Request("long", [1, 5], 6), Request("short", [0, 5], 6), Request("long2", [1, 6], 6)]
    run = run_load(drv, reqs, LoadSpec(concurrency=2))
    by = {t.id: t for t in run.timings}
    assert by["long"].tokens == [10, 11, 12, 13, 14, 15] and not by["long"].eos
    assert by["short"].tokens == [10, 11, 12, 2] and by["short"].eos_shortened
    t = by["long"].token_times
    assert t[0] == t[1] and t[2] == t[3]  # a chunk's tokens arrive together
    assert t[2] - t[1] >= GAP_S * 0.9  # the fake's sleep between chunks (timer granularity: 10%)
    s = summarise(run)
    assert s["eos_shortened"] == 1 and s["committed_tokens"] == 16 and s["budget_tokens"] == 18
    assert s["itl_p50_s"] == pytest.approx(0.0, abs=1e-9)  # half the gaps are within a chunk
