// TemplateError: how the Jinja engine's parts report a template that cannot be parsed or
// rendered. It never leaves the engine: Template::Parse and Render (jinja.h) turn it into a
// Status. kRaised marks raise_exception(message) called by the template itself (the template's
// own answer, passed on unchanged); kLimit a render that ran past its bounds.
#pragma once

#include <stdexcept>
#include <string>

namespace kvserve::jinja {

class TemplateError : public std::runtime_error {
 public:
  enum class Kind { kError, kRaised, kLimit };
  explicit TemplateError(const std::string& message, Kind kind = Kind::kError)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A TemplateError naming the template line.
[[noreturn]] inline void FailAt(int line, const std::string& what) {
  throw TemplateError("line " + std::to_string(line) + ": " + what);
}

}  // namespace kvserve::jinja
