#!/usr/bin/env python3
"""TTFT of a request whose long shared prefix is pinned vs one that prefills it (issue 16).

Starts `kvserve serve` on a model, then for each of N rounds sends a completion (max_tokens 1,
so its latency is its time to first token) whose ~PREFIX-token prefix is new (cold prefill),
and one whose prefix was pinned with POST /v1/cache/pins, each with a new short suffix.
Between rounds it fills the cache with unrelated prompts, so an unpinned prefix would have
been evicted. Prints a Markdown table (medians) and the ratio.

  bench/pin_ttft.py BUILD/kvserve [--model synthetic:150m:f16] [--rounds 5]
"""
import argparse, json, re, statistics, subprocess, sys, time, urllib.request

def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return out, time.perf_counter() - t

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvserve")
    ap.add_argument("--model", default="synthetic:150m:f16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--words", type=int, default=700)
    a = ap.parse_args()
    proc = subprocess.Popen([a.kvserve, "serve", "--model", a.model, "--host", "127.0.0.1", "--http-port", "0",
                             "--grpc-port", "-1", "--kv-cache-memory", "256MiB"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = None
        for line in proc.stdout:
            m = re.search(r"HTTP on (http://[^\s]+)", line)
            if m:
                url = m.group(1)
                break
        while True:
            try:
                urllib.request.urlopen(url + "/ready", timeout=5)
                break
            except Exception:
                time.sleep(0.2)
        words = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()
        def text(seed, n):
            return " ".join(words[(seed * 7 + i * 3) % len(words)] + str((seed + i) % 97) for i in range(n))
        pinned_prefix = text(1, a.words)
        pin, pin_s = post(url, "/v1/cache/pins", {"prompt": pinned_prefix})
        cold, hot, cached = [], [], []
        for r in range(a.rounds):
            for j in range(4):  # unrelated traffic that would evict an unpinned prefix
                post(url, "/v1/completions", {"prompt": text(1000 + 10 * r + j, a.words), "max_tokens": 1})
            _, s = post(url, "/v1/completions", {"prompt": text(50 + r, a.words) + f" round {r}", "max_tokens": 1})
            cold.append(s)
            out, s = post(url, "/v1/completions", {"prompt": pinned_prefix + f" round {r}", "max_tokens": 1})
            hot.append(s)
            cached.append(out["usage"]["prompt_tokens_details"]["cached_tokens"])
        print(f"Model `{a.model}`, prefix {pin['prompt_tokens']} tokens ({pin['pinned_tokens']} pinned, "
              f"{pin['bytes']} bytes), {a.rounds} rounds, 4 unrelated prompts between rounds; pinning took "
              f"{pin_s * 1e3:.0f} ms.\n")
        print("| request | TTFT median (ms) | cached prompt tokens |\n|---|---|---|")
        print(f"| new prefix (cold prefill) | {statistics.median(cold) * 1e3:.1f} | 0 |")
        print(f"| pinned prefix | {statistics.median(hot) * 1e3:.1f} | {min(cached)} |")
        print(f"\nratio cold / pinned: {statistics.median(cold) / statistics.median(hot):.1f}x")
    finally:
        proc.terminate()
        proc.wait()

if __name__ == "__main__":
    main()
