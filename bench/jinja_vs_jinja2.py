#!/usr/bin/env python3
# Chat-template rendering speed: kvserve's Jinja engine (bench_jinja_render) beside Python's
# jinja2 in transformers' environment (scripts/chat-template-expectations.py's), on the same
# machine in one run: microseconds per render (best of 5 batches each), per template, on a
# six-message conversation and a tool-call conversation, and the ratio (jinja2 / kvserve).
# The template is parsed once in both (transformers caches compiled templates too).
#
#   bench/jinja_vs_jinja2.py [--build build] [--templates ../shared/templates] [--renders 200]
import argparse
import importlib.util
import json
import math
import os
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--templates", default=os.path.join(REPO, "..", "shared", "templates"))
    ap.add_argument("--renders", type=int, default=200)
    args = ap.parse_args()
    conversations_path = os.path.join(REPO, "tests/data/chat_templates/conversations.json")
    spec = importlib.util.spec_from_file_location("cte", os.path.join(REPO, "scripts/chat-template-expectations.py"))
    cte = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cte)
    env = cte.make_env()

    ours = {}
    out = subprocess.run([os.path.join(args.build, "bench", "bench_jinja_render"), args.templates, conversations_path,
                          str(args.renders)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        name, conv, us = line.split()
        ours[(name, conv)] = None if us == "error" else float(us)

    with open(conversations_path, encoding="utf-8") as f:
        convs = {c["name"]: c for c in json.load(f)["conversations"] if c["name"] in ("multi_turn", "tool_call_string_args")}
    rows, ratios = [], []
    for (name, conv), us in sorted(ours.items()):
        if us is None:
            continue
        with open(os.path.join(args.templates, name), encoding="utf-8") as f:
            template = env.from_string(f.read())
        c = convs[conv]
        kwargs = dict(c.get("kwargs") or {})
        kwargs.update(messages=c["messages"], tools=c["tools"], documents=None,
                      add_generation_prompt=c["add_generation_prompt"], bos_token="<s>", eos_token="</s>")
        try:
            template.render(**kwargs)
        except Exception:
            continue
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(args.renders):
                template.render(**kwargs)
            best = min(best, (time.perf_counter() - start) * 1e6 / args.renders)
        rows.append((name, conv, best, us, best / us))
        ratios.append(best / us)
    print("| template | conversation | jinja2 us | kvserve us | jinja2/kvserve |")
    print("|---|---|---:|---:|---:|")
    for name, conv, theirs, us, ratio in rows:
        print(f"| {name} | {conv} | {theirs:.1f} | {us:.1f} | {ratio:.2f}x |")
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"\n{len(rows)} renders compared; geometric mean jinja2/kvserve = {geomean:.2f}x "
          f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
