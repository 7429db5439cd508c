#!/usr/bin/python3
"""Prefix-aware routing from KV events vs round robin vs session affinity, on N local replicas.

Starts N `kvserve serve` processes, each publishing KV events (--kv-events-endpoint), and plays
one workload through each routing policy with fresh replicas: shared system prompts (several
conversations share each) and multi-turn chats (each turn resends the conversation with the
reply it got). The policies:
  round-robin     replica i mod N, as a plain Service does
  session         a hash of the conversation id (deploy/k8s/gateway.yaml's x-session-id ring)
  prefix-aware    a small router (a test oracle for the events, not a product): it renders the
                  conversation with POST /tokenize, hashes the full blocks as kvserve publishes
                  them (vLLM's sha256_cbor, tests/e2e/lib/kv_event_hash.py), and picks the
                  replica holding the longest run of those blocks according to the events it
                  has received, minus the requests it has in flight there (one request costs
                  as much as 64 cached tokens)
Prints per policy the prefix hit rate (cached / prompt tokens, from the replies' usage), TTFT
p50/p95 (client-side, routing included: first streamed token) and wall time, as Markdown.

  /usr/bin/python3 bench/scale_out.py BUILD/kvserve [--model synthetic:150m:f16] [--replicas 3]
Needs Debian's python3-zmq and python3-msgpack.
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e", "lib"))
from kv_event_hash import prompt_hashes  # noqa: E402  (vLLM's sha256_cbor, as the picker computes keys)
from kvserve_process import start  # noqa: E402


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class Replica:
    """A kvserve process and what its KV events say it holds."""

    def __init__(self, kvserve, model, index, events_port, kv_memory, threads):
        self.events_port = events_port
        self.work = tempfile.mkdtemp(prefix="kvserve-scale-out-")
        self.proc, self.url = start(kvserve, [
            "--model", model, "--threads", str(threads), "--kv-cache-memory", kv_memory, "--log-level", "warn",
            "--served-model-name", "m", "--kv-events-endpoint", "tcp://*:%d" % events_port,
            "--kv-events-topic", "kv@replica-%d@m" % index], self.work)
        self.stored, self.lock, self.stop = set(), threading.Lock(), False
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self):
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sock.setsockopt(zmq.RCVTIMEO, 200)
        sock.connect("tcp://127.0.0.1:%d" % self.events_port)
        while not self.stop:
            try:
                _, _, payload = sock.recv_multipart()
            except zmq.Again:
                continue
            with self.lock:
                for ev in msgpack.unpackb(payload)[1]:
                    if ev[0] == "BlockStored":
                        self.stored.update(ev[1])
                    elif ev[0] == "BlockRemoved":
                        self.stored.difference_update(ev[1])
                    else:
                        self.stored.clear()
        sock.close()

    def matched(self, keys):
        with self.lock:
            n = 0
            while n < len(keys) and keys[n] in self.stored:
                n += 1
            return n

    def close(self):
        self.stop = True
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.thread.join()
        shutil.rmtree(self.work, ignore_errors=True)


class Router:
    def __init__(self, policy, replicas, block_size):
        self.policy, self.replicas, self.block_size = policy, replicas, block_size
        self.inflight = [0] * len(replicas)
        self.next = 0
        self.lock = threading.Lock()

    def pick(self, conversation_id, messages):
        n = len(self.replicas)
        if self.policy == "round-robin":
            with self.lock:
                self.next += 1
                r = self.next % n
        elif self.policy == "session":
            r = int.from_bytes(hashlib.sha256(conversation_id.encode()).digest()[:8], "big") % n
        else:
            tokens = post(self.replicas[0].url, "/tokenize", {"messages": messages, "add_generation_prompt": True})["tokens"]
            keys = prompt_hashes(tokens, self.block_size)
            with self.lock:
                scores = [self.replicas[i].matched(keys) * self.block_size / 64.0 - self.inflight[i] for i in range(n)]
                r = max(range(n), key=lambda i: (scores[i], -self.inflight[i]))
        with self.lock:
            self.inflight[r] += 1
        return r

    def done(self, r):
        with self.lock:
            self.inflight[r] -= 1


def chat(url, messages, max_tokens):
    """Streams one chat completion: (seconds to the first token, reply text, usage)."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    first, text, usage = None, [], None
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            if choice["delta"].get("content") and first is None:
                first = time.perf_counter() - t0
            text.append(choice["delta"].get("content") or "")
    conn.close()
    return (first if first is not None else time.perf_counter() - t0), "".join(text), usage


def workload(args):
    rng = random.Random(args.seed)
    words = ("account balance policy refund shipping order invoice support ticket warranty product battery screen "
             "router network password login billing upgrade plan storage backup restore install update driver").split()

    def text(n):
        return " ".join(rng.choice(words) + str(rng.randrange(100)) for _ in range(n))

    systems = ["You are assistant %d. Rules: %s" % (i, text(args.system_words)) for i in range(args.systems)]
    convs = []
    for c in range(args.conversations):
        convs.append({"id": "conv-%d" % c, "system": systems[c % args.systems],
                      "turns": [text(rng.randrange(args.user_words // 2, args.user_words)) for _ in range(args.turns)]})
    return convs


def run_policy(args, policy, convs):
    replicas = [Replica(args.kvserve, args.model, i, args.base_port + i, args.kv_cache_memory, args.threads)
                for i in range(args.replicas)]
    try:
        with urllib.request.urlopen(replicas[0].url + "/v1/cache/blocks") as r:
            block_size = json.load(r)["block_size"]
        router = Router(policy, replicas, block_size)
        ttfts, prompt_tokens, cached_tokens, lock = [], [0], [0], threading.Lock()
        queue = list(range(len(convs)))
        start = time.perf_counter()

        def client():
            while True:
                with lock:
                    if not queue:
                        return
                    c = convs[queue.pop(0)]
                messages = [{"role": "system", "content": c["system"]}]
                for turn in c["turns"]:
                    messages.append({"role": "user", "content": turn})
                    t0 = time.perf_counter()
                    r = router.pick(c["id"], messages)
                    routed = time.perf_counter() - t0
                    try:
                        ttft, reply, usage = chat(replicas[r].url, messages, args.max_tokens)
                    finally:
                        router.done(r)
                    messages.append({"role": "assistant", "content": reply})
                    with lock:
                        ttfts.append(routed + ttft)
                        prompt_tokens[0] += usage["prompt_tokens"]
                        cached_tokens[0] += usage["prompt_tokens_details"]["cached_tokens"]

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    finally:
        for r in replicas:
            r.close()
    ttfts.sort()
    return {"policy": policy, "requests": len(ttfts), "hit": cached_tokens[0] / max(1, prompt_tokens[0]),
            "prompt_tokens": prompt_tokens[0], "cached_tokens": cached_tokens[0],
            "p50": statistics.median(ttfts), "p95": ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))], "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kvserve")
    ap.add_argument("--model", default="synthetic:150m:f16")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="forward-pass threads per replica")
    ap.add_argument("--kv-cache-memory", default="48MiB", help="per replica")
    ap.add_argument("--systems", type=int, default=6)
    ap.add_argument("--system-words", type=int, default=120)
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--user-words", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--policies", default="round-robin,session,prefix-aware")
    ap.add_argument("--base-port", type=int, default=25557)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    convs = workload(args)
    rows = [run_policy(args, p, convs) for p in args.policies.split(",")]
    print("Model `%s`, %d replicas (%d forward thread each, KV cache %s each); %d conversations x %d turns over %d "
          "shared system prompts of ~%d words; %d concurrent clients; max_tokens %d.\n"
          % (args.model, args.replicas, args.threads, args.kv_cache_memory, args.conversations, args.turns,
             args.systems, args.system_words, args.clients, args.max_tokens))
    print("| routing | requests | prompt tokens | cached | prefix hit rate | TTFT p50 | TTFT p95 | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %d | %.1f%% | %.0f ms | %.0f ms | %.1f s |" % (
            r["policy"], r["requests"], r["prompt_tokens"], r["cached_tokens"], 100 * r["hit"], 1e3 * r["p50"],
            1e3 * r["p95"], r["wall"]))
    base = rows[0]
    for r in rows[1:]:
        print("\n%s vs %s: hit rate %.1f%% vs %.1f%%, TTFT p50 %.2fx lower, p95 %.2fx lower"
              % (r["policy"], base["policy"], 100 * r["hit"], 100 * base["hit"], base["p50"] / r["p50"],
                 base["p95"] / r["p95"]))


if __name__ == "__main__":
    main()
