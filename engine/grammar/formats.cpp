// JSON Schema formats as regexes (see formats.h).
#include "engine/grammar/formats.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kvserve {
namespace {

// Days per month; February 29 in leap years (divisible by 4, centuries by 400).
#define KVSERVE_DATE                                                                          \
  R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|)" \
  R"((\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29))"
// A leap second only at 23:59:60 UTC (RFC 3339 places it at the end of a UTC day; validators
// check that after the offset, so only the UTC spellings are taken).
#define KVSERVE_TIME                                                                        \
  R"((([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)|23:59:60(\.\d+)?([Zz]|[+-]00:00)))"
#define KVSERVE_LABEL R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
#define KVSERVE_HOST KVSERVE_LABEL R"((\.)" KVSERVE_LABEL ")*"
#define KVSERVE_OCTET R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"
#define KVSERVE_V4 KVSERVE_OCTET R"((\.)" KVSERVE_OCTET "){3}"
#define KVSERVE_H "[0-9a-fA-F]{1,4}"
// RFC 3986: a pchar (unreserved, percent-encoded, sub-delims, ":" and "@").
#define KVSERVE_U R"(([A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2}))"
#define KVSERVE_P "(" KVSERVE_U "|[:@])"

constexpr std::pair<std::string_view, std::string_view> kFormats[] = {
    {"date", "^" KVSERVE_DATE "$"},
    {"time", "^" KVSERVE_TIME "$"},
    {"date-time", "^" KVSERVE_DATE "[Tt]" KVSERVE_TIME "$"},
    {"duration", R"(^P(\d+W|(\d+Y(\d+M)?(\d+D)?|\d+M(\d+D)?|\d+D)(T(\d+H(\d+M)?(\d+S)?|\d+M(\d+S)?|\d+S))?)"
                 R"(|T(\d+H(\d+M)?(\d+S)?|\d+M(\d+S)?|\d+S))$)"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"email", "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" KVSERVE_HOST "$"},
    {"hostname", "^" KVSERVE_HOST "$"},
    {"ipv4", "^" KVSERVE_V4 "$"},
    // RFC 4291's forms, "::" standing for one group or more; with an IPv4 tail (two groups)
    // at most 6 groups precede it in all.
    {"ipv6", "^((" KVSERVE_H ":){7}" KVSERVE_H "|(" KVSERVE_H ":){1,7}:|(" KVSERVE_H ":){1,6}:" KVSERVE_H
             "|(" KVSERVE_H ":){1,5}(:" KVSERVE_H "){1,2}|(" KVSERVE_H ":){1,4}(:" KVSERVE_H "){1,3}"
             "|(" KVSERVE_H ":){1,3}(:" KVSERVE_H "){1,4}|(" KVSERVE_H ":){1,2}(:" KVSERVE_H "){1,5}"
             "|" KVSERVE_H ":(:" KVSERVE_H "){1,6}|:((:" KVSERVE_H "){1,7}|:)"
             "|(" KVSERVE_H ":){6}" KVSERVE_V4 "|::(" KVSERVE_H ":){0,5}" KVSERVE_V4
             "|(" KVSERVE_H ":){1}:(" KVSERVE_H ":){0,4}" KVSERVE_V4 "|(" KVSERVE_H ":){2}:(" KVSERVE_H ":){0,3}"
             KVSERVE_V4 "|(" KVSERVE_H ":){3}:(" KVSERVE_H ":){0,2}" KVSERVE_V4 "|(" KVSERVE_H ":){4}:("
             KVSERVE_H ":){0,1}" KVSERVE_V4 "|(" KVSERVE_H ":){5}:" KVSERVE_V4 ")$"},
    // scheme ":" hier-part ["?" query] ["#" fragment], the hier-part not empty: "//" authority
    // (userinfo "@", a registered name or IPv4 host, ":" port) and a path, an absolute path,
    // or a rootless one; no IP-literal hosts.
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:(//((" KVSERVE_U "|:)*@)?" KVSERVE_U "*(:[0-9]*)?(/" KVSERVE_P "*)*"
            "|/(" KVSERVE_P "+(/" KVSERVE_P "*)*)?|" KVSERVE_P "+(/" KVSERVE_P "*)*)"
            "([?](" KVSERVE_P "|[/?])*)?(#(" KVSERVE_P "|[/?])*)?$"},
};

#undef KVSERVE_DATE
#undef KVSERVE_TIME
#undef KVSERVE_LABEL
#undef KVSERVE_HOST
#undef KVSERVE_OCTET
#undef KVSERVE_V4
#undef KVSERVE_H
#undef KVSERVE_U
#undef KVSERVE_P

}  // namespace

std::optional<std::string_view> FormatRegex(std::string_view name) {
  for (const auto& [format, regex] : kFormats) {
    if (format == name) return regex;
  }
  return std::nullopt;
}

bool IsStandardFormat(std::string_view name) {
  static constexpr std::string_view kStandard[] = {
      "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6", "uri",
      "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex"};
  return std::find(std::begin(kStandard), std::end(kStandard), name) != std::end(kStandard);
}

}  // namespace kvserve
