#!/usr/bin/env python3
"""A long chat, turn by turn: kvserve's chat sessions next to llama.cpp's server (issue 36).

One client holds a conversation of TURNS turns as OpenAI clients do: every turn re-sends the
whole history (its server's own replies as returned) to /v1/chat/completions, streaming,
greedy, REPLY tokens per reply (ignore_eos), with ~USER_WORDS words per user message, so the
history grows to about 4k tokens. kvserve keeps the conversation in a chat session
(`session_id`); llama.cpp keeps it in its slot (`cache_prompt`, one slot). Per turn: the
prompt tokens each server computed (kvserve: prompt - cached tokens; llama.cpp: its
timings.prompt_n) and the client's time to first token. Then the restart: kvserve is stopped
(SIGTERM) and started again on the same --state-dir, and turn TURNS+1 is sent; next to it the
same turn on a fresh kvserve without a state directory and on a fresh llama.cpp server (cold
starts: everything is prefilled). Both servers read the same GGUF: `kvserve mkmodel` random
weights over a real vocabulary (GPT-2's byte-level BPE, from ../shared/tokenizer by default)
with the ChatML or Llama 3 template, which both servers render; prints Markdown.

  bench/sessions_vs_llamacpp.py BUILD/kvserve LLAMA_BIN_DIR [--template chatml|llama3] [--preset 150m]
                                [--turns 20] [--vocab GGUF]
"""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, tempfile, time, urllib.error, urllib.request

# Templates both servers render (the published Jinja texts): ChatML keeps the reply as sent;
# Llama 3's trims it, so the reply's leading space is gone from the next prompt.
TEMPLATES = {
    "chatml": ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
               "{% endif %}", ["<|im_start|>", "<|im_end|>"], None, "<|im_end|>"),
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
               ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|begin_of_text|>",
               "<|eot_id|>"),
}
WORDS = ("the river keeps a quiet record of every boat that passed under the old stone bridge while "
         "merchants argued about prices and children counted fish in the green water near the mill").split()


def user_text(turn, n):
    return f"Question {turn}: " + " ".join(WORDS[(turn * 11 + i * 7) % len(WORDS)] for i in range(n)) + "?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, path, proc):
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + path, timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.2)


class Server:
    def __init__(self, kind, args, port):
        self.kind, self.url = kind, f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(self.url, "/ready" if kind == "kvserve" else "/health", self.proc)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def kvserve(a, model, state_dir=None):
    port = free_port()
    args = [a.kvserve, "serve", "--model", model, "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port",
            "-1", "--threads", "2", "--kv-cache-memory", "1GiB", "--log-level", "warn"]
    if state_dir:
        args += ["--state-dir", state_dir]
    return Server("kvserve", args, port)


def llama(a, model):
    port = free_port()
    return Server("llama.cpp", [os.path.join(a.llama, "llama-server"), "-m", model, "--host", "127.0.0.1", "--port",
                                str(port), "-c", "8192", "-np", "1", "-t", "2", "-tb", "2"], port)


def turn(server, messages, reply_tokens):
    """One streamed turn: (reply text, prompt tokens, prompt tokens computed, TTFT seconds).
    The model id is kvserve's for model.gguf (llama.cpp ignores it)."""
    body = {"model": "model", "messages": messages, "max_tokens": reply_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if server.kind == "kvserve":
        body["session_id"] = "bench"
    else:
        body["cache_prompt"] = True
    req = urllib.request.Request(server.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    start = time.perf_counter()
    ttft, text, prompt, computed = None, "", None, None
    try:
        r = urllib.request.urlopen(req, timeout=900)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{server.kind}: HTTP {e.code}: {e.read().decode()}") from None
    with r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices") or []:
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    ttft = ttft or time.perf_counter() - start
                    text += piece
            if chunk.get("usage"):
                u = chunk["usage"]
                prompt = u["prompt_tokens"]
                computed = prompt - ((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            if chunk.get("timings"):  # llama.cpp: what this request prefilled
                computed = chunk["timings"]["prompt_n"]
    return text, prompt, computed, ttft


def conversation(server, a, turns):
    messages, rows = [], []
    for t in range(turns):
        messages.append({"role": "user", "content": user_text(t, a.user_words)})
        text, prompt, computed, ttft = turn(server, messages, a.reply)
        messages.append({"role": "assistant", "content": text})
        rows.append((prompt, computed, ttft))
    return messages, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvserve")
    ap.add_argument("llama", help="folder with llama.cpp's llama-server")
    ap.add_argument("--preset", default="150m")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--user-words", type=int, default=100)
    ap.add_argument("--reply", type=int, default=64)
    ap.add_argument("--template", choices=sorted(TEMPLATES), default="chatml")
    ap.add_argument("--vocab", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "../../shared/tokenizer/ggml-vocab-gpt-2.gguf"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kvserve-sessions-bench-")
    try:
        model = os.path.join(work, "model.gguf")
        text, control, bos, eos = TEMPLATES[a.template]
        with open(os.path.join(work, "template.jinja"), "w") as f:
            f.write(text)
        args = [a.kvserve, "mkmodel", "--preset", a.preset, "--dtype", "f16", "-o", model, "--vocab", a.vocab,
                "--eos", eos, "--chat-template", os.path.join(work, "template.jinja")]
        args += [x for c in control for x in ("--control-token", c)] + (["--bos", bos] if bos else [])
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        state = os.path.join(work, "state")
        results = {}
        for kind in ("kvserve", "llama.cpp"):
            server = kvserve(a, model, state) if kind == "kvserve" else llama(a, model)
            messages, rows = conversation(server, a, a.turns)
            server.stop()
            messages.append({"role": "user", "content": user_text(a.turns, a.user_words)})
            after = {}
            if kind == "kvserve":
                server = kvserve(a, model, state)  # the same state directory: the session comes back
                after["restart"] = turn(server, messages, a.reply)[1:]
                server.stop()
                server = kvserve(a, model)
            else:
                server = llama(a, model)  # llama.cpp keeps nothing across a restart
            after["cold"] = turn(server, messages, a.reply)[1:]
            server.stop()
            results[kind] = (rows, after)

        kv_rows, kv_after = results["kvserve"]
        ll_rows, ll_after = results["llama.cpp"]
        print(f"Model: synthetic `{a.preset}` F16 over `{os.path.basename(a.vocab)}` with the {a.template} template "
              f"(`kvserve mkmodel --vocab`), both servers on the same file, 2 threads each, "
              f"one client; {a.turns} turns of ~{a.user_words} words + {a.reply}-token replies (greedy, ignore_eos), "
              f"streamed /v1/chat/completions re-sending the whole history. kvserve: `session_id`, F16 KV; "
              f"llama.cpp: `-c 8192 -np 1 -t 2 -tb 2`, `cache_prompt`.\n")
        print("| turn | prompt tokens kvserve / llama.cpp | computed kvserve | computed llama.cpp "
              "| TTFT kvserve (ms) | TTFT llama.cpp (ms) | TTFT ratio |\n|---|---|---|---|---|---|---|")
        for t, (k, l) in enumerate(zip(kv_rows, ll_rows), 1):
            print(f"| {t} | {k[0]} / {l[0]} | {k[1]} | {l[1]} | {k[2] * 1e3:.0f} | {l[2] * 1e3:.0f} "
                  f"| {l[2] / k[2]:.2f}x |")
        later = slice(1, None)
        kv_ttft = statistics.median(r[2] for r in kv_rows[later])
        ll_ttft = statistics.median(r[2] for r in ll_rows[later])
        print(f"\nTurns 2-{a.turns}: computed prompt tokens in all kvserve {sum(r[1] for r in kv_rows[later])}, "
              f"llama.cpp {sum(r[1] for r in ll_rows[later])}; median TTFT kvserve {kv_ttft * 1e3:.0f} ms, "
              f"llama.cpp {ll_ttft * 1e3:.0f} ms ({ll_ttft / kv_ttft:.2f}x).\n")
        print(f"| turn {a.turns + 1} after a restart | prompt tokens | computed | TTFT (ms) |\n|---|---|---|---|")
        for name, (prompt, computed, ttft) in (("kvserve, restarted on its --state-dir", kv_after["restart"]),
                                               ("kvserve, cold start", kv_after["cold"]),
                                               ("llama.cpp, cold start", ll_after["cold"])):
            print(f"| {name} | {prompt} | {computed} | {ttft * 1e3:.0f} |")
        print(f"\nkvserve after a restart: {kv_after['cold'][2] / kv_after['restart'][2]:.1f}x faster to the first "
              f"token than its cold start, {ll_after['cold'][2] / kv_after['restart'][2]:.1f}x faster than "
              f"llama.cpp's.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
