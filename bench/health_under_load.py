#!/usr/bin/env python3
"""/health latency while clients send large request bodies.

Starts `kvserve serve` (synthetic:tiny, HTTP only), then for --seconds: --clients threads
each POST a --body-mb MB completion request over and over (parsed and tokenized by the
server, then refused: the prompt is longer than the context), while one thread GETs /health
every 10 ms on a keep-alive connection and records its latency. Prints a markdown table of
/health p50 / p99 / max, the same with no load first, and the number of large requests.

  python3 bench/health_under_load.py --kvserve build/kvserve [--kvserve-b OTHER]

With --kvserve-b, runs the same for a second binary (e.g. a build of an older commit) in the
same process, so both are measured on the same machine state.
"""
import argparse
import http.client
import json
import socket
import subprocess
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(binary, port):
    proc = subprocess.Popen([binary, "serve", "--model", "synthetic:tiny", "--host", "127.0.0.1",
                             "--http-port", str(port), "--grpc-port", "-1", "--http-threads", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{binary} did not become ready")


def measure(port, clients, body_mb, seconds):
    body = json.dumps({"model": "synthetic:tiny", "prompt": "hello world " * int(body_mb * 1e6 / 12),
                       "max_tokens": 1}).encode()
    stop = threading.Event()
    sent = [0]

    def sender():
        while not stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                c.getresponse().read()
                sent[0] += 1
            except OSError:
                pass

    def health(duration):
        latencies = []
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        end = time.time() + duration
        while time.time() < end:
            t = time.perf_counter()
            c.request("GET", "/health")
            c.getresponse().read()
            latencies.append(time.perf_counter() - t)
            time.sleep(0.01)
        return sorted(latencies)

    idle = health(3)
    threads = [threading.Thread(target=sender) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1)
    loaded = health(seconds)
    stop.set()
    for t in threads:
        t.join()
    return idle, loaded, sent[0]


def pct(values, p):
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--kvserve-b")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--body-mb", type=float, default=7.5)
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    print(f"| binary | load | /health p50 ms | p99 ms | max ms | samples | large requests |")
    print(f"|---|---|---|---|---|---|---|")
    for binary in [b for b in (args.kvserve, args.kvserve_b) if b]:
        port = free_port()
        proc = start(binary, port)
        try:
            idle, loaded, sent = measure(port, args.clients, args.body_mb, args.seconds)
        finally:
            proc.terminate()
            proc.wait()
        for name, lat, n in (("none", idle, "-"), (f"{args.clients} x {args.body_mb} MB bodies", loaded, sent)):
            print(f"| {binary} | {name} | {pct(lat, 50):.2f} | {pct(lat, 99):.2f} | {lat[-1] * 1e3:.2f} | {len(lat)} | {n} |")


if __name__ == "__main__":
    main()
