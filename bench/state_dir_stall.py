#!/usr/bin/env python3
"""Inter-token latency of running streams while chat sessions go to and come back from disk
(issue 54, item 1: the engine thread must not wait for the disk).

Starts `kvserve serve --model MODEL --threads 2 --max-sessions 4`, then for --seconds:
  - --streams threads each stream /v1/completions of 128 tokens (greedy, ignore_eos) one after
    another and record the gap between successive streamed chunks;
  - one churn thread sends turns of --sessions sessions in a round (session_id s0, s1, ..., a
    prompt of --session-tokens tokens, 4 tokens out). With at most 4 sessions in memory every
    turn drops the least recently used session and continues one that was dropped: with
    --state-dir each turn writes one session's KV cache to disk and reads another's back.
The same run without --state-dir is the reference (sessions dropped are recomputed). Prints a
markdown table: per binary and mode, the streams' inter-token p50 / p99 / max, tokens streamed,
churn turns, and the p99 ratio to the run without --state-dir.

  python3 bench/state_dir_stall.py --kvserve build/kvserve [--kvserve-b OLD/kvserve] [--seconds 40]

With --kvserve-b, the same for a second binary (an older commit), measured in the same process.
"""
import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e", "lib"))
from kvserve_process import start  # noqa: E402


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def run(binary, model, seconds, streams, session_tokens, sessions, state_dir):
    args = ["--model", model, "--threads", "2", "--max-sessions", "4", "--log-level", "warn"]
    if state_dir:
        args += ["--state-dir", state_dir]
    work = tempfile.mkdtemp(prefix="kvserve-stall-work-")
    proc, url = start(binary, args, work)
    port = urllib.parse.urlparse(url).port
    stop = threading.Event()
    gaps, tokens, turns, errors = [], [0], [0], [0]
    lock = threading.Lock()

    def streamer(i):
        body = json.dumps({"prompt": f"Stream {i}: once upon a time", "max_tokens": 128, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        while not stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                last = None
                mine = []
                while True:
                    line = r.readline()
                    if not line:
                        break
                    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                        continue
                    now = time.perf_counter()
                    if last is not None:
                        mine.append(now - last)
                    last = now
                with lock:
                    gaps.extend(mine)
                    tokens[0] += len(mine) + 1
            except OSError:
                with lock:
                    errors[0] += 1

    def churn():
        filler = " ".join(f"word{k}" for k in range(session_tokens // 2))
        n = 0
        while not stop.is_set():
            sid = f"s{n % sessions}"
            body = json.dumps({"prompt": f"Session {sid}: {filler}", "max_tokens": 4, "temperature": 0,
                               "session_id": sid}).encode()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                with lock:
                    if r.status == 200:
                        turns[0] += 1
                    else:
                        errors[0] += 1
            except OSError:
                with lock:
                    errors[0] += 1
            n += 1

    threads = [threading.Thread(target=streamer, args=(i,)) for i in range(streams)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    proc.terminate()
    proc.wait(timeout=120)
    shutil.rmtree(work, ignore_errors=True)
    ms = [g * 1000 for g in gaps]
    return {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms) if ms else float("nan"),
            "tokens": tokens[0], "turns": turns[0], "errors": errors[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--kvserve-b")
    ap.add_argument("--model", default="synthetic:150m")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--session-tokens", type=int, default=256)
    ap.add_argument("--sessions", type=int, default=8)
    a = ap.parse_args()
    print(f"model {a.model}, {a.streams} streams of 128 tokens, churn over {a.sessions} sessions of ~{a.session_tokens} "
          f"prompt tokens with --max-sessions 4, {a.seconds:.0f} s per row\n")
    print("| binary | --state-dir | inter-token p50 ms | p99 ms | max ms | tokens streamed | churn turns | errors | p99 / no state dir |")
    print("|---|---|---|---|---|---|---|---|---|")
    for binary in [b for b in (a.kvserve, a.kvserve_b) if b]:
        base = run(binary, a.model, a.seconds, a.streams, a.session_tokens, a.sessions, None)
        d = tempfile.mkdtemp(prefix="kvserve-stall-")
        shutil.rmtree(d)
        try:
            with_dir = run(binary, a.model, a.seconds, a.streams, a.session_tokens, a.sessions, d)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        for label, r in (("off", base), ("on", with_dir)):
            print(f"| {binary} | {label} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} | {r['tokens']} | "
                  f"{r['turns']} | {r['errors']} | {r['p99'] / base['p99']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
