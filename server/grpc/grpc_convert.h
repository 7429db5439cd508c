// Conversions between kvserve.v1 protobuf messages and the engine's plain types, used by the
// gRPC service (server/grpc/grpc_server.cpp). Free of gRPC headers: only the generated messages.
// Stateless functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "generation.pb.h"
#include "server/api/request_builder.h"

namespace kvserve {

// The generation request a proto carries, for RequestBuilder::Submit. Sampling ranges are
// checked later by Engine::Submit; unset max_tokens is left to the builder.
// INVALID_ARGUMENT: neither or both of prompt and prompt_tokens.
[[nodiscard]] StatusOr<GenerationInput> ToGenerationInput(const v1::GenerateRequest& in);
[[nodiscard]] GenerationInput ToGenerationInput(const v1::ChatRequest& in);
// The prompt a CreatePin names (BuildPin's input). INVALID_ARGUMENT: not exactly one of
// prompt, prompt_tokens and messages, or n / session_id set.
[[nodiscard]] StatusOr<GenerationInput> ToGenerationInput(const v1::CreatePinRequest& in);
void FillPin(const PinnedPrefix& in, v1::Pin* out);
std::vector<ChatMessage> ToChatMessages(const google::protobuf::RepeatedPtrField<v1::ChatMessage>& in);

v1::FinishReason ToProto(FinishReason reason);
void FillUsage(const RequestUsage& in, v1::Usage* out);
// Appends the deltas to `out` with one ChoiceDelta per choice index (in order of first
// appearance): a message that carries several deltas of a choice (coalesced while a write was
// in flight) has their text, tokens and logprobs concatenated.
void AppendDeltas(std::span<const StreamDelta> deltas, v1::GenerateStreamResponse* out);
// Merges a delta into the unary response (choices are created in index order on demand).
void MergeDelta(const StreamDelta& delta, v1::GenerateResponse* out);

}  // namespace kvserve
