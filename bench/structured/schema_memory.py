#!/usr/bin/env python3
"""What distinct large JSON Schemas cost a server (issue 54, D3: 64 distinct 120 KB schemas took
a server from 108 MB to 8.4 GB).

Makes a model with a real vocabulary (`kvserve mkmodel --preset tiny --vocab VOCAB`), starts
`kvserve serve` on it, and sends --schemas chat completions one after the other, each with a
schema of its own as `response_format` (an object of --properties string properties, each with
a pattern of its own: about 120 KB of JSON and 100,000+ automaton states at the defaults), 1
token each. After each request it reads the server's resident memory (VmRSS) and, where the
binary exports it, kvserve_grammar_cache_bytes. Prints a markdown table per binary: RSS before,
after 1, 16, 32 and all schemas, peak (VmHWM), the grammar cache's bytes at the end, the median
and slowest request, and the replies' status codes.

  python3 bench/structured/schema_memory.py --kvserve build/kvserve [--kvserve-b OLD/kvserve] \\
      --vocab ../shared/tokenizer/ggml-vocab-deepseek-llm.gguf [--schemas 64]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e", "lib"))
from kvserve_process import start  # noqa: E402


def schema(index, properties):
    """An object schema of `properties` strings, each with a pattern no other schema has."""
    props = {}
    for i in range(properties):
        props[f"s{index}_field_{i}"] = {
            "type": "string",
            "description": f"Field {i} of schema {index}: an identifier with a fixed shape.",
            "pattern": f"^s{index}x{i}[a-z]{{2,{i % 17 + 3}}}-[0-9]{{{i % 13 + 1}}}$",
        }
    return {"type": "object", "properties": props, "additionalProperties": False}


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def metric(url, name):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            m = re.search(rf"^{name} (\S+)$", r.read().decode(), re.M)
            return float(m.group(1)) if m else None
    except OSError:
        return None


def run(binary, model, count, properties):
    work = tempfile.mkdtemp(prefix="kvserve-schema-memory-")
    proc, url = start(binary, ["--model", model, "--threads", "2", "--log-level", "warn"], work)
    try:
        rss = [status_kb(proc.pid, "VmRSS")]
        seconds, codes, sizes = [], {}, []
        for k in range(count):
            s = schema(k, properties)
            sizes.append(len(json.dumps(s)))
            body = json.dumps({"messages": [{"role": "user", "content": "Fill the form."}], "max_tokens": 1,
                               "response_format": {"type": "json_schema",
                                                   "json_schema": {"name": f"form{k}", "schema": s}}}).encode()
            t = time.time()
            try:
                req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=600) as r:
                    r.read()
                    code = r.status
            except urllib.error.HTTPError as e:
                code = e.code
                if code != 200 and k == 0:
                    print(f"  first reply {code}: {e.read()[:300]!r}", file=sys.stderr)
            seconds.append(time.time() - t)
            codes[code] = codes.get(code, 0) + 1
            rss.append(status_kb(proc.pid, "VmRSS"))
        return {
            "rss": rss, "hwm": status_kb(proc.pid, "VmHWM"), "cache": metric(url, "kvserve_grammar_cache_bytes"),
            "seconds": sorted(seconds), "codes": codes, "kb": sum(sizes) / len(sizes) / 1024,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--kvserve-b", help="a second binary (an older commit), measured the same way after the first")
    ap.add_argument("--vocab", required=True, help="a vocabulary GGUF (mkmodel --vocab)")
    ap.add_argument("--schemas", type=int, default=64)
    ap.add_argument("--properties", type=int, default=700)
    args = ap.parse_args()
    model = os.path.join(tempfile.mkdtemp(prefix="kvserve-schema-memory-model-"), "tiny.gguf")
    subprocess.run([args.kvserve, "mkmodel", "--preset", "tiny", "--vocab", args.vocab, "-o", model], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"| binary | schemas (KB each) | RSS before | after 1 | after 16 | after 32 | after {args.schemas} | "
          "peak RSS | grammar cache | request p50 / max (s) | replies |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for binary in [args.kvserve] + ([args.kvserve_b] if args.kvserve_b else []):
        r = run(binary, model, args.schemas, args.properties)
        mb = lambda kb: f"{kb / 1024:,.0f} MB"  # noqa: E731
        at = lambda i: mb(r["rss"][min(i, len(r["rss"]) - 1)])  # noqa: E731
        cache = "-" if r["cache"] is None else f"{r['cache'] / 2**20:,.0f} MiB"
        s = r["seconds"]
        print(f"| {binary} | {args.schemas} ({r['kb']:.0f}) | {at(0)} | {at(1)} | {at(16)} | {at(32)} | "
              f"{at(args.schemas)} | {mb(r['hwm'])} | {cache} | {s[len(s) // 2]:.2f} / {s[-1]:.2f} | "
              f"{', '.join(f'{c}: {n}' for c, n in sorted(r['codes'].items()))} |", flush=True)


if __name__ == "__main__":
    main()
