#!/usr/bin/python3
"""E2E: KV events (--kv-events-endpoint) seen by a subscriber as llm-d's indexer sees them.

A real `kvserve serve` with a small KV pool publishes on ZMQ; this test subscribes with
python3-zmq, decodes the batches with python3-msgpack, and after a concurrent workload (shared
system prompts as token ids, salted requests, chat requests, far more tokens than the pool holds,
so blocks are evicted) checks:
  - the framing: three frames, topic kv@<pod>@<model>, 8-byte big-endian sequence numbers without
    gaps; every hash a msgpack uint64 in full width (0xcf, what llm-d's decoder requires);
  - the replay socket returns the same batches from sequence 0 (the AllBlocksCleared at start
    included), then the end marker;
  - the blocks rebuilt from the events alone (stored minus removed) are as many as the server's
    /v1/cache/blocks reports in its prefix index once idle, every removal names a stored block,
    every parent a block stored before;
  - /metrics counts the batches published, none dropped;
  - the hashes, recomputed here from the prompts' token ids (vLLM's sha256_cbor, written anew in
    tests/e2e/lib/kv_event_hash.py, which first reproduces a BlockStored event vLLM published:
    tests/data/kv_events), are the published ones; a salted prompt's blocks carry no token ids
    and hashes that no unsalted or other-salted prompt produces.

Usage: kv_events_test.py KVSERVE_BINARY MODEL
Exit:  0 pass, 1 fail, 77 skipped (python3-zmq or python3-msgpack missing).
"""
import json
import os
import random
import re
import socket
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from kv_event_hash import prompt_hashes  # noqa: E402
from kvserve_process import start  # noqa: E402

try:
    import msgpack
    import zmq
except ImportError as e:
    print("SKIP: %s (Debian python3-zmq, python3-msgpack)" % e)
    sys.exit(77)

SEED = "kv-events-e2e"
END_SEQ = b"\xff" * 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


class Subscriber(threading.Thread):
    def __init__(self, ctx, endpoint):
        super().__init__(daemon=True)
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sock.setsockopt(zmq.RCVTIMEO, 200)
        self.sock.connect(endpoint)
        self.messages, self.stop = [], False

    def run(self):
        while not self.stop:
            try:
                self.messages.append(self.sock.recv_multipart())
            except zmq.Again:
                pass


def replay(ctx, endpoint, start):
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        frames = sock.recv_multipart()
        assert len(frames) == 4 and frames[0] == b"", frames
        if frames[2] == END_SEQ:
            assert frames[1] == b"" and frames[3] == b""
            break
        out.append(frames[1:])
    sock.close()
    return out


def check(cond, what, failures):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def main():
    kvserve, model = sys.argv[1], sys.argv[2]
    failures = []
    here = os.path.dirname(os.path.abspath(__file__))
    vllm = json.load(open(os.path.join(here, "..", "data", "kv_events", "vllm_sha256_cbor_blocks.json")))
    check(prompt_hashes(vllm["token_ids"], vllm["block_size"], vllm["hash_seed"]) == vllm["block_hashes"],
          "the hash oracle reproduces the %d block hashes vLLM published" % len(vllm["block_hashes"]), failures)
    pub_port, replay_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as work:
        proc, url = start(kvserve, [
            "--model", model, "--kv-cache-memory", "768KiB", "--max-num-seqs", "4", "--log-level", "warn",
            "--kv-events-endpoint", "tcp://*:%d" % pub_port, "--kv-events-replay-endpoint", "tcp://*:%d" % replay_port,
            "--kv-events-topic", "kv@10.1.2.3:8000@e2e-model", "--kv-events-hash-seed", SEED], work)
        try:
            model_id = call(url + "/v1/models")["data"][0]["id"]
            blocks = call(url + "/v1/cache/blocks")
            bs, pool = blocks["block_size"], blocks["num_blocks"]
            print("pool: %d blocks of %d tokens" % (pool, bs))

            ctx = zmq.Context()
            sub = Subscriber(ctx, "tcp://127.0.0.1:%d" % pub_port)
            sub.start()
            time.sleep(0.5)  # the subscription reaches the publisher

            rng = random.Random(7)
            systems = [[rng.randrange(3, 250) for _ in range(4 * bs)] for _ in range(3)]
            jobs = []
            for i in range(36):
                prompt = systems[i % 3] + [rng.randrange(3, 250) for _ in range(rng.randrange(bs, 4 * bs))]
                salt = "tenant-%d" % (i // 4 % 2) if i % 4 == 3 else None
                jobs.append((prompt, salt))
            chats = ["Tell me a story about a %s." % w for w in ("cat", "dog", "boat", "tree")]

            def worker(k):
                for j in range(k, len(jobs), 4):
                    prompt, salt = jobs[j]
                    body = {"model": model_id, "prompt": prompt, "max_tokens": 8, "temperature": 0}
                    if salt:
                        body["cache_salt"] = salt
                    call(url + "/v1/completions", body)
                    if j % 9 == 0:
                        call(url + "/v1/chat/completions", {"model": model_id, "max_tokens": 8, "messages": [
                            {"role": "user", "content": chats[j % len(chats)]}]})

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # Idle, and the last step's events sent.
            while call(url + "/v1/cache/blocks")["engine"]["running"] > 0:
                time.sleep(0.05)
            time.sleep(1.0)
            blocks = call(url + "/v1/cache/blocks")
            with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
                metrics = r.read().decode()
            sub.stop = True
            sub.join()
            live = sub.messages
            replayed = replay(ctx, "tcp://127.0.0.1:%d" % replay_port, 0)
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    # Framing and sequence numbers.
    check(len(live) > 0 and all(len(m) == 3 for m in live), "every message has three frames (%d live)" % len(live),
          failures)
    check(all(m[0] == b"kv@10.1.2.3:8000@e2e-model" for m in live), "topic kv@<pod>@<model>", failures)
    seqs = [int.from_bytes(m[1], "big") for m in live]
    check(all(len(m[1]) == 8 for m in live) and seqs == list(range(seqs[0], seqs[0] + len(seqs))),
          "8-byte big-endian sequence numbers without gaps (%d..%d)" % (seqs[0], seqs[-1]), failures)
    rseqs = [int.from_bytes(m[1], "big") for m in replayed]
    check(rseqs == list(range(0, seqs[-1] + 1)), "replay from 0 returns batches 0..%d" % seqs[-1], failures)
    check(all(r == m for r, m in zip(replayed[seqs[0]:], live)), "replayed batches equal the live ones", failures)
    published = re.search(r"^kvserve_kv_events_published_total (\S+)$", metrics, re.M)
    dropped = re.search(r"^kvserve_kv_events_dropped_total (\S+)$", metrics, re.M)
    check(published is not None and float(published.group(1)) == len(replayed) and dropped is not None
          and float(dropped.group(1)) == 0, "/metrics: kvserve_kv_events_published_total %s (batches sent: %d), "
          "dropped 0" % (published and published.group(1), len(replayed)), failures)

    # Hash width: every hash is 0xcf + 8 bytes (a plain decode cannot tell, so look at the bytes).
    batches = [msgpack.unpackb(m[2], raw=False, strict_map_key=False) for m in replayed]
    widths_ok = True
    for m, batch in zip(replayed, batches):
        for ev in batch[1]:
            for h in ev[1] if ev[0] != "AllBlocksCleared" else []:
                widths_ok &= (b"\xcf" + h.to_bytes(8, "big")) in m[2]
    check(widths_ok, "every hash is encoded as a full-width uint64", failures)
    check(batches[0][1] == [["AllBlocksCleared"]], "the first batch is AllBlocksCleared", failures)

    # Rebuild the stored blocks from the events alone.
    stored, ever, removed_unknown, orphan_parents = {}, {}, 0, 0
    salted = set()
    for batch in batches:
        ts, events, rank = batch
        assert rank == 0 and isinstance(ts, float)
        for ev in events:
            if ev[0] == "BlockStored":
                hashes, parent, tokens, size = ev[1], ev[2], ev[3], ev[4]
                assert size == bs and ev[6] == "GPU"
                if parent is not None and parent not in stored:
                    orphan_parents += 1
                if tokens:
                    assert len(tokens) == len(hashes) * bs
                for i, h in enumerate(hashes):
                    stored[h] = tokens[i * bs:(i + 1) * bs] if tokens else None
                    ever[h] = stored[h]
                    if not tokens:
                        salted.add(h)
            elif ev[0] == "BlockRemoved":
                for h in ev[1]:
                    if h in stored:
                        del stored[h]
                    else:
                        removed_unknown += 1
    removals = sum(len(ev[1]) for b in batches for ev in b[1] if ev[0] == "BlockRemoved")
    check(removals > 0, "the workload evicted blocks (%d BlockRemoved hashes)" % removals, failures)
    check(removed_unknown == 0, "every removal names a stored block", failures)
    check(orphan_parents == 0, "every parent was stored (and not removed) before its child", failures)
    want = blocks["counts"]["prefix_indexed"]
    check(len(stored) == want, "blocks rebuilt from events: %d; /v1/cache/blocks prefix_indexed: %d" % (len(stored), want),
          failures)

    # Hashes recomputed from the prompts.
    missing, seen_salted, collisions = 0, 0, 0
    unsalted_all = set()
    for prompt, salt in jobs:
        if salt is None:
            unsalted_all.update(prompt_hashes(prompt, bs, SEED))
    for prompt, salt in jobs:
        hs = prompt_hashes(prompt, bs, SEED, salt)
        missing += sum(1 for h in hs if h not in ever)
        if salt is not None:
            seen_salted += sum(1 for h in hs if h in salted)
            collisions += sum(1 for h in hs if h in unsalted_all)
        else:
            for b, h in enumerate(hs):
                if h in ever and ever[h] != prompt[b * bs:(b + 1) * bs]:
                    missing += 1
    check(missing == 0, "every full prompt block was published under the hash recomputed here, with its tokens",
          failures)
    check(seen_salted > 0 and collisions == 0,
          "salted prompts: %d blocks published without tokens, none under an unsalted prompt's hash" % seen_salted,
          failures)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
