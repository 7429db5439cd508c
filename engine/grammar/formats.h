// JSON Schema `format` values as regexes (regex.h syntax, anchored), for the schema compiler:
// the string's content must match. What a regex cannot check is named: a hostname's total
// length (253, accepted), an email's quoted local parts and address literals (refused), a
// URI's scheme-specific rules beyond RFC 3986's characters (accepted).
//
//   date       RFC 3339 full-date          2024-01-31 (days per month, leap years)
//   time       RFC 3339 full-time          23:59:60.5+01:00 (leap second, offset or Z)
//   date-time  date "T" time (t and a space too, as RFC 3339 allows)
//   duration   ISO 8601 as JSON Schema's appendix A (P1Y2M, PT1H30M, P2W)
//   uuid       RFC 4122 hex groups 8-4-4-4-12, any case
//   email      dot-atom local part "@" a hostname
//   hostname   RFC 1123 labels of 1-63 letters, digits and inner hyphens, dot separated
//   ipv4       dotted quad 0-255 without leading zeros
//   ipv6       RFC 4291 text forms (:: compression, an embedded IPv4 tail)
//   uri        scheme ":" then RFC 3986 characters (no spaces, quotes, <>, \, ^, `, {|})
#pragma once

#include <optional>
#include <string_view>

namespace kvserve {

// The regex of format `name`, or nullopt when the format is unknown.
std::optional<std::string_view> FormatRegex(std::string_view name);
// Whether `name` is a format the JSON Schema specification defines (2020-12 and earlier).
bool IsStandardFormat(std::string_view name);

}  // namespace kvserve
