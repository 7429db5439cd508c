"""gRPC half of the bad-input catalogue (run by bad_inputs.test.mjs with Debian's python3-grpcio).

Generates the kvserve.v1 stubs from --proto-dir into a temporary folder, then sends every case
of --cases (a JSON list written by the Node test from bad_inputs.cases.mjs): `request` is the
request message in proto3 JSON (or {"raw_hex": ...}: bytes sent as they are), `code` the
expected grpc.StatusCode name. Afterwards a good Generate call must still succeed. Prints one
line per mismatch; exits 1 if there was any.
"""
import argparse
import json
import subprocess
import sys
import tempfile

import grpc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--proto-dir", required=True)
    args = parser.parse_args()

    out = tempfile.mkdtemp(prefix="kvserve-grpc-")
    subprocess.run(["protoc", "-I", args.proto_dir, "--python_out=" + out, "--grpc_python_out=" + out,
                    "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                    args.proto_dir + "/kvserve/v1/generation.proto"], check=True)
    sys.path.insert(0, out)
    from google.protobuf import json_format
    from kvserve.v1 import generation_pb2 as pb

    request_types = {"Generate": pb.GenerateRequest, "GenerateStream": pb.GenerateRequest,
                     "Chat": pb.ChatRequest, "ChatStream": pb.ChatRequest,
                     "Tokenize": pb.TokenizeRequest, "Detokenize": pb.DetokenizeRequest,
                     "CreatePin": pb.CreatePinRequest, "ListPins": pb.ListPinsRequest,
                     "DeletePin": pb.DeletePinRequest}
    streaming = {"GenerateStream", "ChatStream"}
    channel = grpc.insecure_channel(args.grpc, options=[("grpc.max_send_message_length", 1 << 24)])
    grpc.channel_ready_future(channel).result(timeout=30)

    def call(method, payload, metadata):
        path = "/kvserve.v1.Generation/" + method
        identity = lambda b: b  # noqa: E731 -- bytes in, bytes out
        if method in streaming:
            stream = channel.unary_stream(path, request_serializer=identity, response_deserializer=identity)
            for _ in stream(payload, metadata=metadata, timeout=30):
                pass
        else:
            unary = channel.unary_unary(path, request_serializer=identity, response_deserializer=identity)
            unary(payload, metadata=metadata, timeout=30)

    failures = []
    cases = json.load(open(args.cases))
    for case in cases:
        request = case["request"]
        if "raw_hex" in request:
            payload = bytes.fromhex(request["raw_hex"])
        else:
            payload = json_format.ParseDict(request, request_types[case["method"]]()).SerializeToString()
        auth = case.get("auth", True)
        metadata = [] if auth is False else [("authorization", "Bearer " + args.key if auth is True else auth)]
        got = "OK"
        try:
            call(case["method"], payload, metadata)
        except grpc.RpcError as e:
            got = e.code().name
            detail = e.details() or ""
            if "/" in detail and ("/work" in detail or ".cpp" in detail):
                failures.append(f"{case['name']}: the status message leaks a path: {detail}")
        if got != case["code"]:
            failures.append(f"{case['name']}: {got}, expected {case['code']}")

    good = json_format.ParseDict({"prompt": "Once upon a time", "sampling": {"maxTokens": 3, "temperature": 0}},
                                 pb.GenerateRequest()).SerializeToString()
    try:
        call("Generate", good, [("authorization", "Bearer " + args.key)])
    except grpc.RpcError as e:
        failures.append(f"a good Generate call failed afterwards: {e.code().name} {e.details()}")
    for f in failures:
        print("FAIL: " + f)
    print(f"{len(cases)} gRPC cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
