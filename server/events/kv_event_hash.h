// Block hashes for KV events, as vLLM computes them with --prefix-caching-hash-algo
// sha256_cbor, so a router that matches engine hashes bit for bit (llm-d's indexer before
// v0.5) and one that recomputes its own keys from the published tokens (llm-d >= 0.5) both
// read kvserve's events:
//
//   root        = SHA-256(CBOR(seed))                       seed: a text string (vLLM's
//                                                           PYTHONHASHSEED, or "vllm-none-hash")
//   block       = SHA-256(CBOR([parent digest (32-byte bytes), [token ids], extra_keys | null]))
//   event value = the digest's last 8 bytes, big-endian (vLLM's maybe_convert_block_hash)
//
// CBOR is canonical (RFC 8949: shortest integer heads), written by nlohmann::json::to_cbor.
// A salted prefix (a tenant's or a request's cache_salt) folds the salt into its first block's
// extra_keys as vLLM does with cache_salt, so its whole chain is a hash no other salt and no
// unsalted prompt can produce. Thread-safe (pure).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvserve {

using KvEventDigest = std::array<uint8_t, 32>;

// SHA-256(CBOR(seed)).
KvEventDigest KvEventRootDigest(std::string_view seed);

// SHA-256(CBOR([parent, tokens, salt.empty() ? null : [salt]])).
KvEventDigest KvEventBlockDigest(const KvEventDigest& parent, std::span<const int32_t> tokens, std::string_view salt);

// The 64-bit value events carry: bytes 24..31 of the digest, big-endian.
uint64_t KvEventHashValue(const KvEventDigest& digest);

}  // namespace kvserve
