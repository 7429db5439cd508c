#!/usr/bin/env python3
"""The MaskBench sample of ../shared/structured through `kvserve maskbench`: no invalid instance
accepted (invalidation errors), no file whose mask refused a token that the matcher then
took (internal errors), and at least MIN_PASSING files passing, the rate last measured (it may
not drop). Exit 77 (skipped) without ../shared.

  maskbench_sample.py KVSERVE SHARED_DIR MIN_PASSING
"""
import json
import os
import subprocess
import sys

kvserve, shared, min_passing = sys.argv[1], sys.argv[2], int(sys.argv[3])
sample = os.path.join(shared, "structured", "maskbench")
vocab = os.path.join(shared, "tokenizer", "ggml-vocab-deepseek-llm.gguf")
if not os.path.isdir(sample) or not os.path.exists(vocab):
    print("skipped: no MaskBench sample or vocabulary in", shared)
    sys.exit(77)
run = subprocess.run([kvserve, "maskbench", "--vocab", vocab, "--threads", "2", "--time-limit-s", "60", sample],
                     capture_output=True, text=True)
lines = [json.loads(l) for l in run.stdout.splitlines() if l.strip()]
files, summary = lines[:-1], lines[-1]["summary"]
print(json.dumps(summary))
bad = [f for f in files if f["status"] in ("invalidation_error", "internal_error", "read_error")]
for f in bad:
    print("FAIL", f["file"], f["status"], f.get("detail", ""))
if bad or summary["passing"] < min_passing:
    print(f"passing {summary['passing']} (at least {min_passing} expected), {len(bad)} invalid verdicts")
    sys.exit(1)
