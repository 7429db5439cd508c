// FormatRegex: every format compiles (anchored, under the default state limit) and accepts
// its valid instances and rejects invalid ones (RFC 3339, 4122, 1123, 4291, 3986 examples and
// the near misses a model would produce).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/grammar/formats.h"
#include "engine/grammar/regex.h"

namespace kvserve {
namespace formats_test {

struct FormatCase {
  const char* format;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

const FormatCase kCases[] = {
    {"date", {"2024-01-31", "1999-12-01", "2024-02-29", "2000-02-29", "2023-04-30"},
     {"2024-1-31", "2024-13-01", "2024-01-32", "24-01-01", "2024/01/31", "", "2023-02-29", "1900-02-29", "2023-02-30",
      "2023-04-31"}},
    // A leap second at 23:59:60 UTC only (a random model once wrote 16:30:60Z; ajv refused it).
    {"time", {"23:59:60Z", "23:59:60.5+00:00", "00:00:00+01:00", "12:30:45.123z", "08:15:00-05:30"},
     {"24:00:00Z", "12:60:00Z", "12:30:45", "12:30Z", "12:30:45+1:00", "16:30:60Z", "23:59:60+01:00"}},
    // RFC 3339's note allows a space for the T; JSON Schema validators (Python's, Rust's) do not.
    {"date-time", {"2024-01-31T23:59:59Z", "2024-01-31t00:00:00.5+02:00"},
     {"2024-01-31", "2024-01-31T25:00:00Z", "2024-01-31T10:00:00", "2024-01-31X10:00:00Z", "2024-01-31 10:00:00Z"}},
    {"duration", {"P1Y", "P1Y2M3D", "PT1H30M", "P2W", "P1DT12H", "PT5S", "P3M"},
     {"P", "PT", "1Y", "P1H", "P1Y2W", "PT1D", "P1DT"}},
    {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000", "ABCDEF01-2345-6789-ABCD-EF0123456789"},
     {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"}},
    {"email", {"user@example.com", "first.last+tag@sub.example.org", "a!#$%&'*+/=?^_`{|}~-@x.io"},
     {"user@", "@example.com", "user@@example.com", "us er@example.com", ".user@example.com", "user.@example.com", "user@-x.com"}},
    {"hostname", {"example.com", "a", "xn--80ak6aa92e.com", "my-host.local", "123.example"},
     {"-example.com", "example-.com", "exa_mple.com", "example..com", ".com", "", std::string(64, 'a') + ".com"}},
    {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255", "10.0.0.10"},
     {"256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.-4", "a.b.c.d"}},
    {"ipv6", {"2001:db8::1", "::1", "::", "fe80::1ff:fe23:4567:890a", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::ffff:192.0.2.128", "64:ff9b::192.0.2.33", "1:2:3:4:5:6:1.2.3.4", "1::"},
     {"2001:db8:::1", "1:2:3:4:5:6:7:8:9", "12345::1", "2001:db8::g", "1:2:3:4:5:6:7:1.2.3.4", "1::2::3", ":1"}},
    // RFC 3986 with a hier-part that is not empty (ajv-formats wants one); a random model once
    // wrote "x:]]]]" and "x:", which the old pattern let through.
    {"uri", {"https://example.com/path?q=1#frag", "mailto:user@example.com", "urn:isbn:0451450523", "file:///tmp/x",
             "http://u:p@h.example:8080/a/b;c?d=e/f?g#h/i", "s:/", "tag:x@y,2024:a%20b"},
     {"example.com", "http://exa mple.com", "1http://x", "http://x/<y>", "://x", "http://x\"y", "x:]]]]", "x:",
      "http://a@b@c/", "http://x/%zz", "x:a#b#c", "http://[::1]/"}},
};

TEST(Formats, EachFormatAcceptsItsInstancesAndRejectsNearMisses) {
  for (const FormatCase& c : kCases) {
    SCOPED_TRACE(c.format);
    const std::optional<std::string_view> regex = FormatRegex(c.format);
    ASSERT_TRUE(regex.has_value());
    StatusOr<ByteDfa> dfa = CompileRegex(*regex, {.anchored = true});
    ASSERT_TRUE(dfa.ok()) << dfa.status().ToString();
    for (const std::string& v : c.valid) EXPECT_TRUE(dfa->Matches(v)) << "valid: " << v;
    for (const std::string& v : c.invalid) EXPECT_FALSE(dfa->Matches(v)) << "invalid: " << v;
  }
  EXPECT_FALSE(FormatRegex("phone-number").has_value());
}

}  // namespace formats_test
}  // namespace kvserve
