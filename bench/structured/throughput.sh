#!/usr/bin/env bash
# Throughput under JSON Schemas (issue 38): 16 clients, each request under a different JSON
# Schema of the MaskBench sample, against 16 unconstrained clients, on one kvserve serving the
# 150m preset with a real vocabulary (Llama 2's, 32k), in one run, alternated twice.
#
#   bench/structured/throughput.sh KVSERVE_BIN OUT_DIR [SHARED_DIR] [REQUESTS]
#
# Writes OUT_DIR/{free,json}-{1,2}.json (bench-serve --output-json) and prints the table. The
# schemas are the first 16 files of the sample (every 8th, sorted) that the server compiles.
set -euo pipefail
BIN=$(realpath "$1"); OUT=$2; SHARED=${3:-$(dirname "$0")/../../../shared}; REQUESTS=${4:-64}
mkdir -p "$OUT"
MODEL="$OUT/150m-llama-spm.gguf"
[[ -f $MODEL ]] || "$BIN" mkmodel --preset 150m --vocab "$SHARED/tokenizer/ggml-vocab-llama-spm.gguf" -o "$MODEL" >/dev/null
PORT=$((20000 + RANDOM % 20000))
"$BIN" serve --model "$MODEL" --host 127.0.0.1 --http-port "$PORT" --grpc-port -1 --max-num-seqs 16 \
  >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT
for _ in $(seq 300); do curl -sf "$URL/ready" >/dev/null && break; sleep 0.2; done

python3 - "$SHARED/structured/maskbench" "$URL" "$OUT/schemas.jsonl" <<'PY'
import json, os, sys, urllib.request, urllib.error
folder, url, out = sys.argv[1:]
chosen = []
for name in sorted(os.listdir(folder))[::8]:
    schema = json.load(open(os.path.join(folder, name)))["schema"]
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    req = urllib.request.Request(url + "/v1/chat/completions", headers={"content-type": "application/json"},
                                 data=json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, **body}).encode())
    try:
        urllib.request.urlopen(req).read()
    except urllib.error.HTTPError:
        continue  # a schema kvserve refuses
    chosen.append(body)
    if len(chosen) == 16:
        break
with open(out, "w") as f:
    for b in chosen:
        f.write(json.dumps(b) + "\n")
print(f"{len(chosen)} schemas", file=sys.stderr)
PY

run() {  # name, extra bench-serve args
  "$BIN" bench-serve --url "$URL" --endpoint chat -c 16 -n "$REQUESTS" --max-tokens 128 --temperature 1 \
    --stream --include-usage --output-json "$OUT/$1.json" "${@:2}" >"$OUT/$1.txt"
}
run free-1
run json-1 --extra-bodies "$OUT/schemas.jsonl"
run free-2
run json-2 --extra-bodies "$OUT/schemas.jsonl"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    s = json.load(open(f"{out}/{name}.json"))["summary"]
    return s
rows = []
for name in ["free-1", "json-1", "free-2", "json-2"]:
    s = load(name)
    rows.append((name, s))
print("| run | completed | failed | output tokens | tokens/request | output tok/s | TTFT p50 (ms) | ITL p50 (ms) |")
print("|---|---|---|---|---|---|---|---|")
for name, s in rows:
    print(f"| {name} | {s['completed']} | {s['failed']} | {s['output_tokens']} | "
          f"{s['output_tokens'] / max(1, s['completed']):.1f} | {s['output_tokens_per_s']:.1f} | "
          f"{s['ttft_ms']['p50']:.0f} | {s['itl_ms']['p50']:.1f} |")
free = sum(s["output_tokens_per_s"] for n, s in rows if n.startswith("free")) / 2
js = sum(s["output_tokens_per_s"] for n, s in rows if n.startswith("json")) / 2
print(f"\nconstrained / free output throughput: {js / free:.3f}")
PY
grep -E "grammar_(compiles|cache_hits|forced)" <(curl -s "$URL/metrics") | grep -v "^#" || true
