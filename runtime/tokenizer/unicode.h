// Unicode helpers for the tokenizers: UTF-8 decoding that never fails (invalid bytes are
// reported, not replaced, so byte-level tokenizers stay lossless), NFC normalization, general
// categories, lowercase and accent stripping. Data: unicode_tables.cpp (generated).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::unicode {

// Returned by next_cp for a byte that does not start a valid UTF-8 sequence.
constexpr uint32_t kInvalid = 0xFFFFFFFFu;

// Decodes the code point at s[i] and advances i past it. An invalid, overlong, surrogate or
// truncated sequence consumes exactly one byte and yields kInvalid.
uint32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
// True when every byte sequence in s is valid UTF-8.
bool is_valid_utf8(std::string_view s);

// General category, collapsed to its first letter (Control = Cc, Cf, Co, Cs).
enum class Category : uint8_t { Letter, Mark, Number, Punctuation, Symbol, Separator, Control, Unassigned };
Category category(uint32_t cp);
// The White_Space property (what Rust's char::is_whitespace and llama.cpp test).
bool is_whitespace(uint32_t cp);
// Simple lowercase: the first code point of the full lowercase mapping.
uint32_t to_lower(uint32_t cp);
// First code point of the full canonical decomposition (the base letter of an accented one).
uint32_t nfd_first(uint32_t cp);
uint8_t combining_class(uint32_t cp);

// Unicode Normalization Form C. Bytes that are not valid UTF-8 pass through unchanged and
// act as boundaries. Text that is already NFC is returned as is (fast path).
std::string nfc(std::string_view text);

// The Unicode version the tables were generated from.
const char* tables_version();

}  // namespace kestrel::unicode
