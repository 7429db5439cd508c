// EngineCore: pinned prefixes (Engine::PinPrefix, ListPins, Unpin; see engine.h). The prompt
// is prefilled by an ordinary request that samples one token (max_tokens 0 would finish it
// without a step), whose full blocks land in the prefix cache when it finishes; the engine
// thread then pins them (KvCacheManager::PinPrefix) and keeps the pin's description. Pin ids
// are "pin-<cache pin id>".
#include <algorithm>
#include <charconv>
#include <chrono>

#include <fmt/format.h>

#include "engine/engine_core.h"

namespace kvserve {
namespace {

constexpr std::string_view kPinIdPrefix = "pin-";
constexpr std::chrono::milliseconds kCancelPoll{100};

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// 0 when `id` is not a pin id.
PinId ParsePinId(std::string_view id) {
  if (!id.starts_with(kPinIdPrefix)) return 0;
  id.remove_prefix(kPinIdPrefix.size());
  PinId value = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  return ec == std::errc() && end == id.data() + id.size() && value > 0 ? value : 0;
}

}  // namespace

int64_t EngineCore::max_pinned_bytes() const {
  if (config_.max_pinned_bytes >= 0) return config_.max_pinned_bytes;
  return static_cast<int64_t>(cache_->spec().block_bytes()) * config_.num_blocks / 4;
}

StatusOr<PinnedPrefix> EngineCore::PinPrefix(GenerationRequest request, double timeout_seconds,
                                             std::function<bool()> cancelled) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  if (!config_.enable_prefix_caching) {
    return FailedPreconditionError("pinning needs the prefix cache, which this server runs without");
  }
  if (config_.max_pinned_bytes == 0) return FailedPreconditionError("pinning is off (--max-pinned-memory 0)");
  if (!request.session_id.empty()) return InvalidArgumentError("a pinned prefix cannot belong to a chat session");
  const int block = config_.kv.block_size;
  if (static_cast<int>(request.prompt_tokens.size()) < block) {
    return InvalidArgumentError(fmt::format("the prompt has {} tokens and fills no whole KV block of {}; nothing "
                                            "would be pinned",
                                            request.prompt_tokens.size(), block));
  }
  request.n = 1;
  request.detokenize = false;
  request.sampling.max_tokens = 1;
  request.sampling.min_tokens = 0;
  request.sampling.logprobs = -1;
  request.sampling.prompt_logprobs = -1;
  ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, Submit(request));
  std::vector<StreamDelta> deltas;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      Abort(stream->id());
      return UnavailableError("the prompt was not prefilled within the pin request's time limit");
    }
    if (cancelled && cancelled()) {
      Abort(stream->id());
      return CancelledError("the pin request was cancelled while its prompt was prefilled");
    }
    const auto wait = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), kCancelPoll);
    if (!stream->Next(&deltas, wait)) break;
    deltas.clear();
  }
  RETURN_IF_ERROR(stream->status());
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  // The request is copied into the task: after a timeout here it may still run (the pin then
  // shows up in ListPins and can be removed).
  StatusOr<StatusOr<PinnedPrefix>> pinned = RunOnEngineThread<StatusOr<PinnedPrefix>>(
      [this, request] { return PinComputedPrompt(request); }, std::max(left, 1.0));
  if (!pinned.ok()) return pinned.status();
  return *std::move(pinned);
}

StatusOr<PinnedPrefix> EngineCore::PinComputedPrompt(const GenerationRequest& request) {
  const KvCacheManager::Pin pin = cache_->PinPrefix(request.prompt_tokens, request.cache_salt);
  if (pin.id == 0) return UnavailableError("the prompt's blocks were evicted before they could be pinned; retry");
  const int64_t block_bytes = static_cast<int64_t>(cache_->spec().block_bytes());
  const int64_t limit = max_pinned_bytes();
  if (static_cast<int64_t>(cache_->num_pinned_blocks()) * block_bytes > limit) {
    CHECK(cache_->Unpin(pin.id));
    return ResourceExhaustedError(fmt::format(
        "pinning {} more bytes would pass the pinned-memory limit of {} bytes (--max-pinned-memory; {} in use)",
        pin.blocks * block_bytes, limit, static_cast<int64_t>(cache_->num_pinned_blocks()) * block_bytes));
  }
  PinnedPrefix p;
  p.id = fmt::format("{}{}", kPinIdPrefix, pin.id);
  p.tenant = request.tenant;
  p.prompt_tokens = static_cast<int>(request.prompt_tokens.size());
  p.pinned_tokens = pin.tokens;
  p.bytes = pin.blocks * block_bytes;
  p.created = UnixSeconds();
  pins_.emplace(pin.id, p);
  return p;
}

StatusOr<PinList> EngineCore::ListPins(const std::string& tenant, double timeout_seconds) {
  return RunOnEngineThread<PinList>(
      [this, tenant] {
        PinList list;
        for (const auto& [id, pin] : pins_) {
          if (pin.tenant == tenant) list.pins.push_back(pin);
        }
        list.pinned_bytes = static_cast<int64_t>(cache_->num_pinned_blocks()) *
                            static_cast<int64_t>(cache_->spec().block_bytes());
        list.max_pinned_bytes = max_pinned_bytes();
        return list;
      },
      timeout_seconds);
}

Status EngineCore::Unpin(const std::string& tenant, const std::string& id, double timeout_seconds) {
  const PinId pin_id = ParsePinId(id);
  StatusOr<bool> found = RunOnEngineThread<bool>(
      [this, tenant, pin_id] {
        auto it = pins_.find(pin_id);
        if (it == pins_.end() || it->second.tenant != tenant) return false;
        CHECK(cache_->Unpin(pin_id));
        pins_.erase(it);
        return true;
      },
      timeout_seconds);
  if (!found.ok()) return found.status();
  return *found ? OkStatus() : NotFoundError("no pin '" + id + "'");
}

}  // namespace kvserve
