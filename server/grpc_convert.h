// Conversions between kvserve.v1 protobuf messages and the engine's plain types, used by the
// gRPC service (server/grpc_service.cpp). Free of gRPC headers: only the generated messages.
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/model/chat_template.h"
#include "generation.pb.h"

namespace kvserve {

// What a request needs from the server beyond its own fields.
struct GrpcRequestEnv {
  const Engine* engine = nullptr;
  const ChatTemplate* chat_template = nullptr;
  std::string model_id;
  int default_max_tokens = 16;  // Generate without max_tokens (Chat: the rest of the context)
  std::string tenant;           // from the API key: owns chat sessions
};

// The engine's context limit: EngineConfig::max_model_len or the model's context length.
int MaxModelLen(const Engine& engine);

// Fills `out` from the proto. Ranges are checked later by Engine::Submit (INVALID_ARGUMENT
// naming the field); `default_max_tokens` < 0 means "leave out.max_tokens for the caller".
void FillSampling(const v1::SamplingOptions& in, int default_max_tokens, SamplingParams* out);

// Builds the engine request. Errors: INVALID_ARGUMENT (neither or both of prompt and
// prompt_tokens, bad messages), NOT_FOUND (options.model names another model).
[[nodiscard]] StatusOr<GenerationRequest> BuildGenerateRequest(const v1::GenerateRequest& in,
                                                               const GrpcRequestEnv& env);
[[nodiscard]] StatusOr<GenerationRequest> BuildChatRequest(const v1::ChatRequest& in, const GrpcRequestEnv& env);

// Checks TokenizeRequest/DetokenizeRequest.model (NOT_FOUND when it names another model).
[[nodiscard]] Status CheckModel(const std::string& requested, const std::string& model_id);

v1::FinishReason ToProto(FinishReason reason);
void FillUsage(const RequestUsage& in, v1::Usage* out);
// Appends one delta as a ChoiceDelta of `out`.
void AppendDelta(const StreamDelta& delta, v1::GenerateStreamResponse* out);
// Merges a delta into the unary response (choices are created in index order on demand).
void MergeDelta(const StreamDelta& delta, v1::GenerateResponse* out);

}  // namespace kvserve
