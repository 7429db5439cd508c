"""vLLM's sha256_cbor block hashes, written anew from its definition (vllm/v1/core/kv_cache_utils.py)
as an oracle for kvserve's KV events: canonical CBOR by hand, hashlib's SHA-256.

  root       = SHA-256(CBOR(seed text))
  block      = SHA-256(CBOR([parent digest (32-byte string), [token ids], extra keys or null]))
  event hash = the digest's last 8 bytes, big-endian
A salt (cache_salt) is the first block's only extra key, as vLLM folds it.

Used by tests/e2e/kv_events_test.py and bench/scale_out.py (its router)."""
import hashlib


def cbor_head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | info]) + n.to_bytes(width, "big")
    raise ValueError(n)


def cbor_text(s):
    b = s.encode()
    return cbor_head(3, len(b)) + b


def block_digest(parent, tokens, salt=None):
    extra = b"\xf6" if salt is None else cbor_head(4, 1) + cbor_text(salt)
    body = cbor_head(4, 3) + cbor_head(2, 32) + parent + cbor_head(4, len(tokens))
    body += b"".join(cbor_head(0, t) for t in tokens) + extra
    return hashlib.sha256(body).digest()


def prompt_hashes(tokens, block_size, seed="vllm-none-hash", salt=None):
    """The event hashes of the full blocks of `tokens`."""
    parent, out = hashlib.sha256(cbor_text(seed)).digest(), []
    for b in range(len(tokens) // block_size):
        parent = block_digest(parent, tokens[b * block_size:(b + 1) * block_size], salt if b == 0 else None)
        out.append(int.from_bytes(parent[24:], "big"))
    return out
