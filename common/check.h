// CHECK macros: broken invariants abort the process with file:line and a message.
//
// CHECK(cond) << "details";  CHECK_EQ(a, b);  DCHECK only in debug builds.
// Use Status for anything a user or a file can cause; CHECK only for programming errors.
#pragma once

#include <sstream>
#include <string>

namespace kvserve::internal {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << ...` be an expression of type void in both branches.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvserve::internal

#define CHECK(condition)                    \
  (condition) ? (void)0                     \
              : ::kvserve::internal::Voidify() & \
                    ::kvserve::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define CHECK_OP_(a, b, op) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) CHECK_OP_(a, b, ==)
#define CHECK_NE(a, b) CHECK_OP_(a, b, !=)
#define CHECK_LT(a, b) CHECK_OP_(a, b, <)
#define CHECK_LE(a, b) CHECK_OP_(a, b, <=)
#define CHECK_GT(a, b) CHECK_OP_(a, b, >)
#define CHECK_GE(a, b) CHECK_OP_(a, b, >=)

#ifdef NDEBUG
#define DCHECK(condition) \
  while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
