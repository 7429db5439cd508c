// OpenAI request bodies and streamed-event parsing for bench-serve.
#include "tools/loadgen/openai_requests.h"

#include <iterator>
#include <vector>

namespace kvserve::bench {
namespace {

using json = nlohmann::json;

// A SAX pass that looks only at the paths bench-serve needs:
//   choices[i].text, choices[i].delta.content, choices[i].message.content  (content)
//   choices[i].finish_reason, usage.completion_tokens, usage.prompt_tokens, error[.message]
class EventSax {
 public:
  explicit EventSax(EventInfo* info) : info_(info) {}

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t v) { return Number(static_cast<int64_t>(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Number(static_cast<int64_t>(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Number(static_cast<int64_t>(v)); }
  bool binary(json::binary_t&) { return true; }
  bool string(json::string_t& s) {
    const size_t d = stack_.size();
    if (d == 3 && InChoice() && stack_[2].key == "text") {
      if (!s.empty()) ++info_->content_pieces;
    } else if (d == 4 && InChoice() && stack_[3].object && stack_[3].key == "content" &&
               (stack_[2].key == "delta" || stack_[2].key == "message")) {
      if (!s.empty()) ++info_->content_pieces;
    } else if (d == 3 && InChoice() && stack_[2].key == "finish_reason") {
      if (!s.empty()) info_->finished = true;
    } else if (d == 1 && stack_[0].key == "error") {
      info_->error = s;
    } else if (d == 2 && stack_[0].key == "error" && stack_[1].object && stack_[1].key == "message") {
      info_->error = s;
    }
    return true;
  }
  bool start_object(std::size_t) {
    if (stack_.size() == 1 && stack_[0].key == "error" && !info_->error) info_->error = "error";
    stack_.push_back({true, {}});
    return true;
  }
  bool key(json::string_t& k) {
    stack_.back().key = k;
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    stack_.push_back({false, {}});
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    info_->malformed = true;
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::string key;  // objects: the current member's key
  };
  // stack_[0] top object at "choices", stack_[1] the array, stack_[2] a choice object.
  bool InChoice() const {
    return stack_[0].object && stack_[0].key == "choices" && !stack_[1].object && stack_[2].object;
  }
  bool Number(int64_t v) {
    if (stack_.size() == 2 && stack_[0].object && stack_[0].key == "usage" && stack_[1].object) {
      if (stack_[1].key == "completion_tokens") info_->completion_tokens = v;
      if (stack_[1].key == "prompt_tokens") info_->prompt_tokens = v;
    }
    return true;
  }

  EventInfo* info_;
  std::vector<Frame> stack_;
};

constexpr const char* kWords[] = {
    "the",   "a",     "and",   "to",    "was",   "he",    "she",   "it",    "they",  "in",    "on",    "with",
    "big",   "small", "red",   "blue",  "happy", "sad",   "good",  "bad",   "old",   "new",   "hot",   "cold",
    "dog",   "cat",   "bird",  "fish",  "tree",  "sun",   "moon",  "star",  "car",   "ball",  "box",   "book",
    "house", "park",  "day",   "time",  "man",   "boy",   "girl",  "mom",   "dad",   "friend", "water", "food",
    "ran",   "saw",   "had",   "said",  "went",  "came",  "made",  "got",   "took",  "gave",  "found", "looked",
    "play",  "run",   "jump",  "walk",  "eat",   "see",   "like",  "love",  "help",  "want",  "know",  "think",
    "one",   "two",   "three", "all",   "some",  "many",  "very",  "not",   "up",    "down",  "out",   "back",
    "then",  "there", "here",  "when",  "what",  "so",    "but",   "of",    "for",   "at",    "his",   "her",
};

}  // namespace

const char* EndpointPath(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

std::string BuildRequestBody(const RequestSpec& spec) {
  json j;
  j["model"] = spec.model;
  if (spec.endpoint == Endpoint::kChat) {
    j["messages"] = json::array({json{{"role", "user"}, {"content", spec.prompt}}});
  } else {
    j["prompt"] = spec.prompt;
  }
  j["max_tokens"] = spec.max_tokens;
  j["temperature"] = spec.temperature;
  j["stream"] = spec.stream;
  if (spec.stream && spec.include_usage) j["stream_options"] = {{"include_usage", true}};
  if (spec.ignore_eos) j["ignore_eos"] = true;
  for (const nlohmann::json* extra : {spec.extra_body, spec.variant}) {
    if (extra == nullptr || !extra->is_object()) continue;
    for (const auto& [k, v] : extra->items()) j[k] = v;
  }
  return j.dump();
}

EventInfo ParseEvent(std::string_view data) {
  EventInfo info;
  std::string_view trimmed = data;
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\n' || trimmed.back() == '\r')) {
    trimmed.remove_suffix(1);
  }
  if (trimmed == "[DONE]") {
    info.done = true;
    return info;
  }
  EventSax sax(&info);
  if (!json::sax_parse(trimmed, &sax)) info.malformed = true;
  return info;
}

StatusOr<std::string> FirstModelId(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    return j["data"][0]["id"].get<std::string>();
  }
  return UnavailableError("/v1/models: no model id in the reply");
}

std::string ErrorMessage(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  std::string text(body.substr(0, 200));
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string WordPrompt(int num_words, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string out;
  for (int i = 0; i < num_words; ++i) {
    if (i > 0) out += ' ';
    out += kWords[pick(rng)];
  }
  return out;
}

}  // namespace kvserve::bench
