// The parsers of every setting's text, shared by the core and the vendor libraries (header-only,
// no torch): one meaning of "a switch", "a count" and "a comma-separated list" everywhere.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace devx::text {

inline std::string_view trim(std::string_view text, std::string_view blanks = " \t\n\r") {
  const size_t begin = text.find_first_not_of(blanks);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(blanks) - begin + 1);
}

inline std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// 1/0, true/false, on/off, yes/no in any case; false when the text is none of them.
inline bool parse_switch(std::string_view text, bool* out) {
  const std::string word = lower(trim(text));
  if (word == "1" || word == "true" || word == "on" || word == "yes") {
    *out = true;
  } else if (word == "0" || word == "false" || word == "off" || word == "no") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

inline constexpr const char* kSwitchWords = "use 1/0, true/false, on/off or yes/no";

// An optional minus sign and digits only, within [lo, hi]: "2.5" or "0x2" is a typo worth reporting,
// not something to round. False when the text is not such an integer or out of range.
inline bool parse_int(std::string_view text, int64_t lo, int64_t hi, int64_t* out) {
  text = trim(text);
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || text.size() > 19) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > (negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1)) return false;
  const int64_t signed_value = negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
  if (signed_value < lo || signed_value > hi) return false;
  *out = signed_value;
  return true;
}

// The items of "a, b,,c" with blanks (and the characters in `strip`) trimmed and empty items left out.
inline std::vector<std::string> split_list(std::string_view text, std::string_view strip = " \t\n\r") {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(pos, comma - pos), strip);
    if (!item.empty()) items.emplace_back(item);
    pos = comma + 1;
  }
  return items;
}

}  // namespace devx::text
