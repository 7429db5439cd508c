#!/usr/bin/env bash
# Serving benchmark: BASELINE.md's workload against `kvserve serve`, written to
# bench/results/serving.md next to the reference server's figures and BASELINE.md's targets.
#
# Workload (../shared/docs/BASELINE.md): clients stream completions of 128 tokens (greedy,
# ignore EOS) from the fixed prompt "Once upon a time, there was a little girl named Lily. She
# loved to play outside.", each client sending its requests one after another; the load
# generator (`kvserve bench-serve`) runs on the same cores as the server. A fresh server
# (--threads 2) for every model and client count. Then one more 16-client 150m run on a
# server started with --profile, for where a step's time goes.
#
# Usage (hold the build lock so no compile shares the cores):
#   flock /tmp/kvserve-build.lock bash bench/serve_bench.sh [KVSERVE_BINARY]
# Environment: OUT (default bench/results/serving.md), MODELS (default
# "stories260K synthetic:150m synthetic:150m:q8_0"), CLIENTS (default "1 4 16"),
# REPEATS (runs per row, each on a fresh server; the median by tok/s is reported; default 3),
# REQUESTS_SCALE (multiplies the request counts; default 1).
#
# Shared machines are noisy: for every run the script records the CPU that other processes
# (and the hypervisor: steal) took while it ran, from /proc/stat minus the server's and the
# load generator's own CPU, so a disturbed row shows.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVSERVE=${1:-${KVSERVE:-$ROOT/build/kvserve}}
OUT=${OUT:-$ROOT/bench/results/serving.md}
MODELS=${MODELS:-"stories260K synthetic:150m synthetic:150m:q8_0"}
CLIENTS=${CLIENTS:-"1 4 16"}
SCALE=${REQUESTS_SCALE:-1}
REPEATS=${REPEATS:-3}
STORIES=${STORIES:-$ROOT/../shared/models/stories260K.gguf}
THREADS=2
MAX_TOKENS=128
# Weight MiB one decode step reads (bench/results/forward.md: all matrices + one embedding row).
declare -A WEIGHT_MIB=([synthetic:150m]=242.57 [synthetic:150m:q8_0]=128.90)

[[ -x "$KVSERVE" ]] || { echo "serve_bench.sh: no kvserve binary at $KVSERVE (pass its path)" >&2; exit 2; }
for tool in python3 curl; do
  command -v $tool >/dev/null || { echo "serve_bench.sh: needs $tool" >&2; exit 2; }
done
WORK=$(mktemp -d)
SERVE_PID=""
cleanup() {
  [[ -n "$SERVE_PID" ]] && { kill -KILL "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

# requests MODEL CLIENTS: enough for a steady state, the whole script within ~15 minutes.
requests() {
  local n
  case "$1:$2" in
    stories260K:1) n=32 ;; stories260K:4) n=64 ;; stories260K:*) n=128 ;;
    *:1) n=16 ;; *:4) n=32 ;; *) n=64 ;;
  esac
  echo $((n * SCALE))
}
model_path() { [[ "$1" == stories260K ]] && echo "$STORIES" || echo "$1"; }

# start_server MODEL [extra flags...]: sets SERVE_PID and URL.
# Each server writes its own files ($WORK/serve-N.out/.err; SERVE_ERR names the latest).
SERVERS=0
start_server() {
  local model=$1; shift
  SERVERS=$((SERVERS + 1))
  local out="$WORK/serve-$SERVERS.out"
  SERVE_ERR="$WORK/serve-$SERVERS.err"
  "$KVSERVE" serve --model "$(model_path "$model")" --threads $THREADS --host 127.0.0.1 --http-port 0 --grpc-port -1 \
    --log-level warn "$@" >"$out" 2>"$SERVE_ERR" &
  SERVE_PID=$!
  local deadline=$((SECONDS + 120))
  until grep -q 'HTTP on http://' "$out" 2>/dev/null; do
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$SERVE_ERR" >&2; echo "kvserve exited" >&2; exit 1; }
    (( SECONDS < deadline )) || { echo "kvserve printed no port" >&2; exit 1; }
    sleep 0.1
  done
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$out" | head -1)
  until [[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ready")" == 200 ]]; do
    kill -0 "$SERVE_PID" 2>/dev/null || { cat "$SERVE_ERR" >&2; echo "kvserve exited" >&2; exit 1; }
    (( SECONDS < deadline + 180 )) || { echo "kvserve never became ready" >&2; exit 1; }
    sleep 0.1
  done
}
# CPU accounting (clock ticks): the whole machine's busy and steal time, and one process's.
TICKS=$(getconf CLK_TCK)
machine_cpu() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $9}' /proc/stat; }
process_cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# bench ROW_NAME [bench-serve flags...]: runs bench-serve against $URL and writes
# $WORK/ROW_NAME.json and ROW_NAME.cpu.json (cores that others, steal and the server used).
bench() {
  local name=$1; shift
  local before after server_before server_after t0 t1
  before=$(machine_cpu); server_before=$(process_cpu "$SERVE_PID"); t0=$(date +%s.%N)
  "$KVSERVE" bench-serve --url "$URL" --no-progress --output-json "$WORK/$name.json" "$@" >"$WORK/$name.md"
  after=$(machine_cpu); server_after=$(process_cpu "$SERVE_PID"); t1=$(date +%s.%N)
  python3 - "$WORK/$name.json" "$before" "$after" "$server_before" "$server_after" "$t0" "$t1" "$TICKS" \
    >"$WORK/$name.cpu.json" <<'PY'
import json, sys
path, before, after, s0, s1, t0, t1, hz = sys.argv[1:9]
b0, st0 = map(float, before.split()); b1, st1 = map(float, after.split())
wall, hz = float(t1) - float(t0), float(hz)
client = json.load(open(path))["summary"].get("client_cpu_s", 0)
server = (float(s1) - float(s0)) / hz
others = (b1 - b0) / hz - server - client
print(json.dumps({"wall_s": wall, "server_cores": server / wall, "client_cores": client / wall,
                  "other_cores": max(0.0, others) / wall, "steal_cores": (st1 - st0) / hz / wall}))
PY
}
stop_server() {
  kill -TERM "$SERVE_PID"
  wait "$SERVE_PID" || { echo "kvserve exited with $? after SIGTERM" >&2; exit 1; }
  SERVE_PID=""
}

SERVE_CMD="$KVSERVE serve --model MODEL --threads $THREADS --host 127.0.0.1 --http-port 0 --grpc-port -1 --log-level warn"
BENCH_CMD="$KVSERVE bench-serve --url URL --concurrency C --num-requests N --max-tokens $MAX_TOKENS"
start_time=$SECONDS
for ((run = 1; run <= REPEATS; ++run)); do
  for model in $MODELS; do
    for c in $CLIENTS; do
      n=$(requests "$model" "$c")
      extra=()
      if [[ "$c" == 1 && -n "${WEIGHT_MIB[$model]:-}" ]]; then
        # The roofline's bandwidth, measured right before the row with no server running.
        bw=$("$KVSERVE" bench-serve --measure-bandwidth | grep -o '[0-9.]* GB/s' | head -1 | cut -d' ' -f1)
        echo "$bw" >>"$WORK/bandwidth.txt"
        extra=(--weight-mib-per-token "${WEIGHT_MIB[$model]}" --bandwidth-gb-s "$bw")
      fi
      start_server "$model"
      echo "== run $run/$REPEATS: $model, $c clients, $n requests" >&2
      bench "${model//[:\/]/_}-$c-$run" --concurrency "$c" --num-requests "$n" --max-tokens $MAX_TOKENS "${extra[@]}"
      stop_server
    done
  done
done

# Where the time goes: 16 streams of 150m on a server started with --profile.
PROFILE_MODEL=synthetic:150m
if [[ " $MODELS " == *" $PROFILE_MODEL "* && " $CLIENTS " == *" 16 "* ]]; then
  n=$(requests $PROFILE_MODEL 16)
  start_server $PROFILE_MODEL --profile
  echo "== $PROFILE_MODEL, 16 clients, $n requests, --profile" >&2
  bench profile --concurrency 16 --num-requests "$n" --max-tokens $MAX_TOKENS
  stop_server
  sed -n '/^kvserve serve: profile (whole run/,$p' "$SERVE_ERR" >"$WORK/profile.txt"
fi
elapsed=$((SECONDS - start_time))

MACHINE="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) vCPUs visible, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then COMMIT="$COMMIT + uncommitted changes"; fi

python3 - "$WORK" "$OUT" "$MACHINE" "$COMMIT" "$SERVE_CMD" "$BENCH_CMD" "$elapsed" "$MODELS" "$CLIENTS" \
  "$(date -u '+%Y-%m-%d %H:%M UTC')" "${0#$ROOT/}" "$REPEATS" <<'PY'
import json, os, re, sys
work, out, machine, commit, serve_cmd, bench_cmd, elapsed, models, clients, date, script, repeats = sys.argv[1:13]
models, clients, repeats = models.split(), [int(c) for c in clients.split()], int(repeats)

# BASELINE.md: llama.cpp server, 2 threads: aggregate tok/s, mean TTFT (ms), mean inter-token (ms).
REF = {("stories260K", 1): (2086, 6.9, 0.44), ("stories260K", 4): (1602, 28, 2.25), ("stories260K", 16): (1775, 74, 8.5),
       ("synthetic:150m", 1): (71, 46, 13.9), ("synthetic:150m", 4): (192, 109, 20.2),
       ("synthetic:150m", 16): (233, 625, 64.6)}
NAME = {"stories260K": "stories260K", "synthetic:150m": "150m (F16)", "synthetic:150m:q8_0": "150m (Q8_0)"}

def load_one(name):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path): return None
    r = json.load(open(path))
    r["cpu"] = json.load(open(os.path.join(work, name + ".cpu.json")))
    return r

def load(model, c):
    """All runs of a row, and the one with the median tok/s (the lower middle of an even count)."""
    runs = [r for r in (load_one(f"{model.replace(':', '_').replace('/', '_')}-{c}-{i}") for i in range(1, repeats + 1)) if r]
    if not runs: return None, []
    ranked = sorted(runs, key=lambda r: r["summary"]["output_tokens_per_s"])
    return ranked[(len(ranked) - 1) // 2], runs

def ratio(x, ref):
    return f"{x / ref:.2f}× reference" if ref else "—"

rows, res, cpu_rows = [], {}, []
for m in models:
    for c in clients:
        r, runs = load(m, c)
        if not r: continue
        s = r["summary"]; res[(m, c)] = s
        ref = REF.get((m, c)) or (REF.get(("synthetic:150m", c)) if m == "synthetic:150m:q8_0" else None)
        ref_tok, ref_ttft, ref_itl = ref if ref else (None, None, None)
        all_runs = " / ".join(f"{x['summary']['output_tokens_per_s']:.0f}" for x in runs)
        rows.append("| {} | {} | {} | **{:.1f}** | {} | {} | {} | {:.1f} / {:.1f} | {} | {:.2f} / {:.2f} | {} | {} |".format(
            NAME.get(m, m), c, s["completed"] + s["failed"], s["output_tokens_per_s"], all_runs,
            ref_tok if ref_tok else "—", ratio(s["output_tokens_per_s"], ref_tok),
            s["ttft_ms"]["mean"], s["ttft_ms"]["p50"], ref_ttft if ref_ttft else "—",
            s["itl_ms"]["mean"], s["tpot_ms"]["mean"], ref_itl if ref_itl else "—",
            sum(x["summary"]["failed"] for x in runs)))
        cpu_rows.append("| {} | {} | {} | {} | {} | {} |".format(
            NAME.get(m, m), c, " / ".join(f"{x['cpu']['server_cores']:.2f}" for x in runs),
            " / ".join(f"{x['cpu']['client_cores']:.3f}" for x in runs),
            " / ".join(f"{x['cpu']['other_cores']:.2f}" for x in runs),
            " / ".join(f"{x['cpu']['steal_cores']:.2f}" for x in runs)))

def get(m, c, *path):
    s = res.get((m, c))
    for p in path:
        if s is None: return None
        s = s.get(p)
    return s

targets = []
def target(name, value, goal, fmt, higher=True, note=""):
    if value is None:
        targets.append(f"| {name} | not measured | {goal} | — |"); return
    met = value >= goal if higher else value <= goal
    shortfall = "" if met else (f" (missed by {goal / value:.2f}×)" if higher and value > 0 else
                                f" (missed by {value / goal:.2f}×)" if not higher else "")
    targets.append(f"| {name} | {fmt.format(value)} | {'≥' if higher else '≤'} {fmt.format(goal)} | "
                   f"{'**met**' if met else '**missed**' + shortfall}{note} |")
target("stories260K, 16 clients, tok/s", get("stories260K", 16, "output_tokens_per_s"), 3550, "{:.0f}")
target("stories260K, 1 client, tok/s", get("stories260K", 1, "output_tokens_per_s"), 3100, "{:.0f}")
target("150m F16, 16 clients, tok/s", get("synthetic:150m", 16, "output_tokens_per_s"), 280, "{:.1f}")
target("150m F16, TTFT p50 at 16 clients, ms", get("synthetic:150m", 16, "ttft_ms", "p50"), 310, "{:.0f}", higher=False)
target("150m F16, 1 client, tok/s (BASELINE: ≥ 0.9× reference)", get("synthetic:150m", 1, "output_tokens_per_s"),
       0.9 * 71, "{:.1f}")
# The roofline's bandwidth: the median of every probe this script ran (right before each 1-client
# 150m run, no server running). Single probes on this shared VM wander (see the range).
bw_path = os.path.join(work, "bandwidth.txt")
bws = sorted(float(x) for x in open(bw_path).read().split()) if os.path.exists(bw_path) else []
bw = bws[(len(bws) - 1) // 2] if bws else None
for m, label in (("synthetic:150m", "F16"), ("synthetic:150m:q8_0", "Q8_0")):
    roof = get(m, 1, "roofline")
    if roof and bw:
        limit = bw * 1e9 / roof["bytes_per_token"]
        frac = roof["stream_decode_tok_s"] / limit
        target(f"150m {label}, single-stream decode / bandwidth roofline", frac * 100, 80, "{:.0f}%",
               note=f" ({roof['stream_decode_tok_s']:.1f} of {limit:.1f} tok/s: {roof['bytes_per_token'] / 2**20:.2f} "
                    f"MiB per token at {bw:.1f} GB/s)")
    else:
        target(f"150m {label}, single-stream decode / bandwidth roofline", None, 80, "{:.0f}%")

lines = [
    "# Serving benchmark: kvserve vs the reference server (BASELINE.md's workload)",
    "",
    f"Written by `{script}` on {date}; commit {commit}; total run time {elapsed} s.",
    "",
    f"Machine: {machine}. The load generator (`kvserve bench-serve`) runs on the same cores as the server, as "
    "BASELINE.md's measurements did; the script runs under `flock /tmp/kvserve-build.lock` so no compile shares them.",
    "",
    "Workload: clients stream `/v1/completions` of 128 tokens (temperature 0, `ignore_eos`) from the prompt "
    "\"Once upon a time, there was a little girl named Lily. She loved to play outside.\", each client sending its "
    "requests one after another; a fresh server per row. Aggregate tok/s = all generated tokens (from the server's "
    "usage) / wall time. TTFT = send → first streamed token. Inter-token = gap between successive content chunks; "
    "TPOT = (end-to-end − TTFT) / (tokens − 1), per request. Server defaults otherwise (prefix caching on, "
    "max-num-seqs 64, max-num-batched-tokens 512, F16 KV cache). Reference = llama.cpp's server, 2 threads, on this "
    "machine type (BASELINE.md; medians of 2–3 runs; Q8_0 rows are compared with its F16 figures). "
    f"Each row: {repeats} runs, each on a fresh server; the row shows the run with the median tok/s (all runs' tok/s "
    "in the `runs` column).",
    "",
    "Commands:",
    "",
    "```",
    f"flock /tmp/kvserve-build.lock bash {script}",
    f"# per row, a fresh server:   {serve_cmd}",
    f"# and the load:              {bench_cmd} --output-json ROW.json",
    "#   1-client 150m rows: first `kvserve bench-serve --measure-bandwidth` (2 threads summing 1 GiB, median of",
    "#   9 passes, no server running), then the load with --weight-mib-per-token 242.57 (F16) / 128.90 (Q8_0)",
    "#   --bandwidth-gb-s <measured> (weight MiB per decoded token from bench/results/forward.md)",
    "```",
    "",
    "| model | clients | requests | tok/s | runs (tok/s) | reference tok/s | ratio | TTFT mean / p50 ms | "
    "ref. mean TTFT ms | inter-token / TPOT mean ms | ref. mean inter-token ms | errors (all runs) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    *rows,
    "",
    "CPU during each run (cores, averaged over the run; runs in order): the server, the load generator, everything "
    "else on the machine (other processes; should be ~0) and steal (the hypervisor).",
    "",
    "| model | clients | server | load generator | others | steal |",
    "|---|---|---|---|---|---|",
    *cpu_rows,
    "",
    "## Targets (BASELINE.md)",
    "",
    "| target | measured | goal | result |",
    "|---|---|---|---|",
    *targets,
    "",
]
if bws:
    lines += [f"Bandwidth roofline: read bandwidth {bw:.1f} GB/s = the median of {len(bws)} probes (each: 2 threads "
              f"summing 1 GiB, median of 9 passes) run right before the 1-client 150m runs with no server running; "
              f"probes ranged {bws[0]:.1f}–{bws[-1]:.1f} GB/s (bench/results/forward.md measured 32.1). Per-stream "
              "decode = 1 / mean TPOT of the reported run.", ""]
f16, q8 = get("synthetic:150m", 1, "output_tokens_per_s"), get("synthetic:150m:q8_0", 1, "output_tokens_per_s")
if f16 and q8:
    lines += [f"Q8_0 vs F16, one stream: {q8:.1f} vs {f16:.1f} tok/s = {q8 / f16:.2f}× (Q8_0 reads 0.53× the bytes, "
              "so a bandwidth-bound decode would approach 1.9×).", ""]
cpu = [(m, c, res[(m, c)].get("client_cpu_s", 0) / max(res[(m, c)]["wall_s"], 1e-9)) for (m, c) in res]
if cpu:
    worst = max(cpu, key=lambda x: x[2])
    lines += [f"Load generator CPU: at most {100 * worst[2]:.1f}% of one core ({NAME.get(worst[0], worst[0])}, "
              f"{worst[1]} clients; reported rows): blocking sockets, one thread per client, a SAX pass per event.", ""]

prof = os.path.join(work, "profile.txt")
if os.path.exists(prof):
    text = open(prof).read()
    ps = load_one("profile")["summary"]
    def row(name):
        m = re.search(r"^\| \**" + re.escape(name) + r"\** \| \**([0-9.]+)\** \| \**([0-9.]+)%\** \|", text, re.M)
        return (float(m.group(1)), float(m.group(2))) if m else (None, None)
    step = re.search(r"([0-9]+) steps, ([0-9.]+) ms per step", text)
    outside, net = row("engine step outside the forward pass"), row("network writes (server threads)")
    lines += ["## Where the time goes: 16 streams of 150m F16, `kvserve serve --profile`", "",
              f"A separate run (server started with `--profile`, same load: 16 clients, "
              f"{ps['completed'] + ps['failed']} requests): {ps['output_tokens_per_s']:.1f} tok/s, "
              f"TTFT p50 {ps['ttft_ms']['p50']:.0f} ms. The server prints this on shutdown (ms per engine step, "
              "averaged over all steps of the run).", "", text.split("\n", 1)[1].strip(), ""]
    if outside[0] is not None and net[0] is not None:
        total = outside[1] + net[1]
        lines += [f"Work outside the forward pass, goal < 5 % of step time ({float(step.group(2)):.2f} ms): on the engine "
                  f"thread {outside[0]:.3f} ms/step = **{outside[1]:.1f}%** (**{'met' if outside[1] < 5 else 'missed'}**). "
                  f"The HTTP threads spend another {net[0]:.3f} ms/step of CPU ({net[1]:.1f}%) turning tokens into SSE "
                  f"chunks and writing them; that runs beside the engine thread, but on 2 vCPUs it takes CPU the forward "
                  f"pass could use: counted too, {total:.1f}% (**{'met' if total < 5 else 'missed'}**).", ""]
open(out, "w").write("\n".join(lines))
print("\n".join(lines))
PY
