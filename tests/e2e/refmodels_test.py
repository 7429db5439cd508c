#!/usr/bin/python3
"""E2E: the reference models of ../shared/refmodels through the HTTP server.

For every model file of llamacpp-refs.jsonl, `kvserve serve --model FILE --kv-dtype f32` is
started and each reference prompt is sent back as one completion request: the prompt tokens
followed by llama.cpp's 32 greedy tokens, with echo and logprobs, so the server scores every
reference token teacher-forced (its log-probability given everything before it) through the
whole serving path: request parsing, scheduling and chunked prefill, the paged F32 KV cache,
prompt log-probabilities. The mean |our log-probability - llama.cpp's| over the reference
tokens must stay within the refmodels README's bound (0.03 for F16 files, 0.15 quantized).

Usage: refmodels_test.py KVSERVE_BINARY REFMODELS_DIR
Exit:  0 pass, 1 fail, 77 skipped (no llamacpp-refs.jsonl).
"""
import json
import os
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from kvserve_process import start  # noqa: E402


def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def main():
    kvserve, refdir = sys.argv[1], sys.argv[2]
    refs_path = os.path.join(refdir, "llamacpp-refs.jsonl")
    if not os.path.exists(refs_path):
        print("SKIP: %s not found" % refs_path)
        return 77
    by_model = {}
    for line in open(refs_path):
        if line.strip():
            ref = json.loads(line)
            by_model.setdefault(ref["model"], []).append(ref)
    failures = []
    with tempfile.TemporaryDirectory() as work:
        for model, refs in sorted(by_model.items()):
            bound = 0.15 if "-q" in model else 0.03
            proc, url = start(kvserve, ["--model", os.path.join(refdir, model), "--kv-dtype", "f32", "--log-level",
                                        "warn"], work)
            try:
                diffs = []
                for ref in refs:
                    prompt = ref["prompt_tokens"] + ref["tokens"]
                    reply = post(url + "/v1/completions", {"model": model[:-5], "prompt": prompt, "max_tokens": 1,
                                                           "echo": True, "logprobs": 1, "temperature": 0})
                    ours = reply["choices"][0]["logprobs"]["token_logprobs"]
                    first = len(ref["prompt_tokens"])
                    for i, token in enumerate(ref["tokens"]):
                        theirs = dict((t, lp) for t, lp in ref["top_logprobs"][i]).get(token)
                        if theirs is not None:
                            diffs.append(abs(ours[first + i] - theirs))
                mean = sum(diffs) / len(diffs)
                print("%-28s %d reference tokens scored over HTTP: mean |d logprob| %.4f (bound %.2f)"
                      % (model, len(diffs), mean, bound))
                if not diffs or mean > bound:
                    failures.append("%s: mean |d logprob| %.4f over %d tokens > %.2f" % (model, mean, len(diffs), bound))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
