"""E2E gRPC client for kvserve (run by grpc_test.sh and tls_test.sh with Debian's python3-grpcio).

Against a running `kvserve serve --api-key KEY`: authentication, health (raw bytes: the
grpc.health.v1 stubs are not packaged), model info, streaming vs unary greedy output, chat,
a stream cancelled mid-way whose KV blocks must be free again (read from /metrics), and
pinned prefixes (CreatePin, ListPins, DeletePin).
Over TLS (and mutual TLS) with --tls-ca (--tls-cert, --tls-client-key). Exits non-zero with a
message on the first failed check.
"""
import argparse
import ssl
import sys
import time
import urllib.request

import grpc

from kvserve.v1 import generation_pb2 as pb
from kvserve.v1 import generation_pb2_grpc as pb_grpc


def check(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)


TLS = None  # ssl.SSLContext for an https:// --http (set from --tls-ca)


def metric(http, series):
    """The value of `series` (e.g. 'kvserve_kv_cache_blocks{state="used"}') in /metrics."""
    with urllib.request.urlopen(http + "/metrics", timeout=10, context=TLS) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return None


def wait_for(condition, seconds=15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def expect_error(code, call, what):
    try:
        call()
        check(False, f"{what} succeeded")
    except grpc.RpcError as e:
        check(e.code() == code, f"{what}: {e.code()} {e.details()}")


def check_pins(stub, auth, info):
    """CreatePin / ListPins / DeletePin: a pinned prompt is reused by a later request that
    starts with it, listed to its owner, deleted once, and bad pins are INVALID_ARGUMENT."""
    # No trailing space: the continuation's " The" must not change the prompt's last tokens.
    system = " ".join(["Once upon a time there was a little girl named Lily who loved to play outside."] * 3)
    pin = stub.CreatePin(pb.CreatePinRequest(prompt=system), metadata=auth, timeout=60)
    check(pin.id.startswith("pin-") and pin.bytes > 0, f"pin {pin}")
    check(info.block_size <= pin.pinned_tokens <= pin.prompt_tokens and pin.pinned_tokens % info.block_size == 0,
          f"pin tokens {pin}")
    reuse = stub.Generate(pb.GenerateRequest(prompt=system + " The end.",
                                             sampling=pb.SamplingOptions(max_tokens=2, temperature=0)),
                          metadata=auth, timeout=60)
    check(reuse.usage.cached_prompt_tokens >= pin.pinned_tokens, f"reuse cached {reuse.usage.cached_prompt_tokens}")
    chat_pin = stub.CreatePin(pb.CreatePinRequest(messages=[pb.ChatMessage(role="system", content=system)]),
                              metadata=auth, timeout=60)
    listed = stub.ListPins(pb.ListPinsRequest(), metadata=auth, timeout=10)
    check([p.id for p in listed.pins] == [pin.id, chat_pin.id], f"listed {listed}")
    check(0 < listed.pinned_bytes <= listed.max_pinned_bytes, f"pinned bytes {listed}")
    for p in (pin, chat_pin):
        stub.DeletePin(pb.DeletePinRequest(id=p.id), metadata=auth, timeout=10)
    expect_error(grpc.StatusCode.NOT_FOUND,
                 lambda: stub.DeletePin(pb.DeletePinRequest(id=pin.id), metadata=auth, timeout=10), "delete twice")
    check(len(stub.ListPins(pb.ListPinsRequest(), metadata=auth, timeout=10).pins) == 0, "pins left after delete")
    expect_error(grpc.StatusCode.INVALID_ARGUMENT,
                 lambda: stub.CreatePin(pb.CreatePinRequest(prompt="Hi"), metadata=auth, timeout=10), "a short pin")
    expect_error(grpc.StatusCode.INVALID_ARGUMENT,
                 lambda: stub.CreatePin(pb.CreatePinRequest(prompt=system, prompt_tokens=[1, 2]), metadata=auth,
                                        timeout=10), "prompt and prompt_tokens")
    expect_error(grpc.StatusCode.UNAUTHENTICATED,
                 lambda: stub.ListPins(pb.ListPinsRequest(), timeout=10), "ListPins without a key")
    print(f"pins: {pin.pinned_tokens} of {pin.prompt_tokens} tokens pinned ({pin.bytes} bytes) and reused")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--grpc", required=True, help="host:port of kvserve's gRPC server")
    parser.add_argument("--http", required=True, help="http://host:port of kvserve's HTTP server")
    parser.add_argument("--key", required=True, help="API key the server was started with")
    parser.add_argument("--tls-ca", help="PEM CA of a TLS server: gRPC over TLS and https:// --http")
    parser.add_argument("--tls-cert", help="PEM client certificate (with --tls-client-key) for mutual TLS")
    parser.add_argument("--tls-client-key", help="PEM key of --tls-cert")
    args = parser.parse_args()

    if args.tls_ca:
        global TLS
        TLS = ssl.create_default_context(cafile=args.tls_ca)
        read = lambda path: open(path, "rb").read() if path else None  # noqa: E731
        if args.tls_cert:
            TLS.load_cert_chain(args.tls_cert, args.tls_client_key)
        credentials = grpc.ssl_channel_credentials(root_certificates=read(args.tls_ca),
                                                   private_key=read(args.tls_client_key),
                                                   certificate_chain=read(args.tls_cert))
        channel = grpc.secure_channel(args.grpc, credentials)
    else:
        channel = grpc.insecure_channel(args.grpc)
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = pb_grpc.GenerationStub(channel)
    auth = [("authorization", "Bearer " + args.key)]

    # Authentication.
    try:
        stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        check(False, "GetModelInfo without a key succeeded")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"no key: {e.code()}")
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), metadata=auth, timeout=10)
    print(f"model {info.model_id}: context {info.context_length}, vocab {info.vocab_size}, "
          f"kv {info.kv_dtype} x {info.block_size}, backend {info.backend}, template {info.chat_template}")

    # grpc.health.v1.Health/Check with raw protobuf bytes: b"" = HealthCheckRequest{service: ""},
    # b"\x08\x01" = HealthCheckResponse{status: SERVING}.
    health = channel.unary_unary("/grpc.health.v1.Health/Check")
    check(health(b"", timeout=10) == b"\x08\x01", "health is not SERVING")

    # Streaming: text deltas per choice, the finish reason on the last, usage at the end. The
    # server coalesces the tokens produced while a write is in flight into one message, and a
    # tiny model makes 32 tokens in a few ms, so ask for enough tokens to see several messages.
    n = 400
    request = pb.GenerateRequest(
        prompt="Once upon a time",
        sampling=pb.SamplingOptions(max_tokens=n, temperature=0, ignore_eos=True))
    text, tokens, messages, finish, usage = "", [], 0, None, None
    for message in stub.GenerateStream(request, metadata=auth, timeout=60):
        for delta in message.choices:
            text += delta.text
            tokens += list(delta.token_ids)
            if delta.finish_reason != pb.FINISH_REASON_UNSPECIFIED:
                finish = delta.finish_reason
        if message.HasField("usage"):
            usage = message.usage
        messages += 1
    check(len(tokens) == n, f"streamed {len(tokens)} tokens, wanted {n}")
    check(messages > 2, f"only {messages} stream messages")
    check(finish == pb.FINISH_REASON_LENGTH, f"finish reason {finish}")
    check(usage is not None and usage.completion_tokens == n, f"usage {usage}")
    print(f"stream: {messages} messages, {len(tokens)} tokens: {text[:60]!r}...")

    unary = stub.Generate(request, metadata=auth, timeout=60)
    check(unary.choices[0].text == text, "unary text differs from the streamed text")
    check(list(unary.choices[0].token_ids) == tokens, "unary tokens differ from the streamed tokens")

    chat = pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="Tell me a story.")],
                          sampling=pb.SamplingOptions(max_tokens=16, temperature=0))
    chat_text = "".join(d.text for m in stub.ChatStream(chat, metadata=auth, timeout=60) for d in m.choices)
    print(f"chat: {chat_text!r}")

    # Cancel mid-stream: the request is aborted and its KV blocks are free again.
    aborted_before = metric(args.http, 'kvserve_requests_total{status="aborted"}') or 0
    long_request = pb.GenerateRequest(
        prompt="Once upon a time",
        sampling=pb.SamplingOptions(max_tokens=info.context_length - 64, temperature=0, ignore_eos=True))
    call = stub.GenerateStream(long_request, metadata=auth, timeout=120)
    first = next(call)
    check(len(first.choices) == 1, "the first stream message has no delta")
    call.cancel()
    try:
        for _ in call:
            pass
        check(False, "the cancelled stream ended without an error")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.CANCELLED, f"cancelled stream: {e.code()}")
    used = 'kvserve_kv_cache_blocks{state="used"}'
    running = 'kvserve_requests{state="running"}'
    aborted = 'kvserve_requests_total{status="aborted"}'
    freed = wait_for(lambda: metric(args.http, used) == 0 and metric(args.http, running) == 0
                     and metric(args.http, aborted) == aborted_before + 1)
    check(freed, f"after the cancel: used blocks {metric(args.http, used)}, aborted {metric(args.http, aborted)}")
    print("cancel: request aborted, KV blocks free")

    check_pins(stub, auth, info)
    print("PASS: gRPC e2e")


if __name__ == "__main__":
    main()
