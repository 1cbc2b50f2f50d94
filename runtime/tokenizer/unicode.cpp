// UTF-8 decoding, NFC and character properties over the tables generated into
// unicode_tables.cpp. The packed tables are parsed once, on first use (thread-safe static).
#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode_tables.h"

namespace kestrel::unicode {
namespace {

// Hangul syllables decompose algorithmically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

struct Run {
  uint32_t first, last;
  uint8_t value;
};
struct LowerRun {
  uint32_t start, count, step;
  int32_t delta;
};

struct Tables {
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomp;  // second = 0: singleton
  std::unordered_map<uint64_t, uint32_t> compose;                      // (first << 21 | second)
  std::vector<bool> composes_second;  // code points < 0x20000 that can be a pair's second half
  std::vector<Run> ccc;
  std::vector<uint32_t> cat_start;
  std::vector<Category> cat_value;
  std::vector<LowerRun> lower;

  Tables() {
    composes_second.assign(0x20000, false);
    parse_entries(tables::kDecompositions, [&](const char* e) {
      char* p;
      const uint32_t cp = std::strtoul(e, &p, 16);
      const uint32_t d1 = std::strtoul(p + 1, &p, 16);
      uint32_t d2 = 0;
      if (*p == ',') d2 = std::strtoul(p + 1, &p, 16);
      decomp[cp] = {d1, d2};
      if (d2 != 0 && *p != '*') {
        compose[(uint64_t{d1} << 21) | d2] = cp;
        if (d2 < composes_second.size()) composes_second[d2] = true;
      }
    });
    parse_entries(tables::kCombiningClasses, [&](const char* e) {
      char* p;
      const uint32_t first = std::strtoul(e, &p, 16);
      const uint32_t last = *p == '-' ? std::strtoul(p + 1, &p, 16) : first;
      ccc.push_back({first, last, static_cast<uint8_t>(std::strtoul(p + 1, nullptr, 10))});
    });
    parse_entries(tables::kCategories, [&](const char* e) {
      char* p;
      cat_start.push_back(std::strtoul(e, &p, 16));
      cat_value.push_back(category_of_letter(p[1]));
    });
    parse_entries(tables::kLowercase, [&](const char* e) {
      char* p;
      LowerRun r;
      r.start = std::strtoul(e, &p, 16);
      r.count = std::strtoul(p + 1, &p, 10);
      r.step = std::strtoul(p + 1, &p, 10);
      r.delta = static_cast<int32_t>(std::strtol(p + 1, &p, 10));
      lower.push_back(r);
    });
  }

  static Category category_of_letter(char c) {
    switch (c) {
      case 'L': return Category::Letter;
      case 'M': return Category::Mark;
      case 'N': return Category::Number;
      case 'P': return Category::Punctuation;
      case 'S': return Category::Symbol;
      case 'Z': return Category::Separator;
      case 'C': return Category::Control;
      default: return Category::Unassigned;
    }
  }

  // Calls fn on each space-separated entry of a packed table.
  template <class Fn>
  static void parse_entries(const char* s, Fn fn) {
    while (*s) {
      while (*s == ' ') ++s;
      if (!*s) break;
      fn(s);
      while (*s && *s != ' ') ++s;
    }
  }
};

const Tables& tables_instance() {
  static const Tables t;
  return t;
}

void decompose(const Tables& t, uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it = t.decomp.find(cp);
  if (it == t.decomp.end()) {
    out.push_back(cp);
    return;
  }
  decompose(t, it->second.first, out);
  if (it->second.second) decompose(t, it->second.second, out);
}

// The primary composite of (a, b), or 0.
uint32_t compose_pair(const Tables& t, uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = t.compose.find((uint64_t{a} << 21) | b);
  return it == t.compose.end() ? 0 : it->second;
}

// A code point that NFC leaves alone whatever surrounds it.
bool nfc_stable(const Tables& t, uint32_t cp) {
  if (cp < 0x300) return true;
  if (cp >= kSBase && cp < kSBase + kSCount) return false;  // may take a trailing jamo T
  if (cp >= kLBase && cp < 0x1200) return false;           // conjoining jamo
  if (cp < t.composes_second.size() && t.composes_second[cp]) return false;
  return combining_class(cp) == 0 && t.decomp.find(cp) == t.decomp.end();
}

// Canonical ordering then canonical composition of one segment (code points, no invalid bytes).
void compose_segment(const Tables& t, std::vector<uint32_t>& buf) {
  for (size_t i = 1; i < buf.size(); ++i) {  // stable insertion sort of non-starter runs
    const uint8_t c = combining_class(buf[i]);
    if (c == 0) continue;
    for (size_t j = i; j > 0; --j) {
      const uint8_t p = combining_class(buf[j - 1]);
      if (p == 0 || p <= c) break;
      std::swap(buf[j - 1], buf[j]);
    }
  }
  if (buf.empty()) return;
  size_t starter = 0, out = 1;
  int last_class = combining_class(buf[0]) ? 256 : 0;
  for (size_t i = 1; i < buf.size(); ++i) {
    const uint32_t ch = buf[i];
    const int cls = combining_class(ch);
    // Not blocked: nothing between the starter and ch, or everything between has a lower class.
    const uint32_t comp = (last_class < cls || last_class == 0) ? compose_pair(t, buf[starter], ch) : 0;
    if (comp) {
      buf[starter] = comp;
      continue;
    }
    if (cls == 0) starter = out;
    last_class = cls;
    buf[out++] = ch;
  }
  buf.resize(out);
}

}  // namespace

uint32_t next_cp(std::string_view s, size_t& i) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  size_t len;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  else {
    ++i;
    return kInvalid;
  }
  if (i + len > s.size()) {
    ++i;
    return kInvalid;
  }
  for (size_t k = 1; k < len; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kInvalid;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return kInvalid;
  }
  i += len;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();)
    if (next_cp(s, i) == kInvalid) return false;
  return true;
}

Category category(uint32_t cp) {
  const Tables& t = tables_instance();
  auto it = std::upper_bound(t.cat_start.begin(), t.cat_start.end(), cp);
  if (it == t.cat_start.begin()) return Category::Unassigned;
  return t.cat_value[static_cast<size_t>(it - t.cat_start.begin()) - 1];
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const Tables& t = tables_instance();
  auto it = std::upper_bound(t.lower.begin(), t.lower.end(), cp,
                             [](uint32_t v, const LowerRun& r) { return v < r.start; });
  if (it == t.lower.begin()) return cp;
  const LowerRun& r = *(it - 1);
  const uint32_t off = cp - r.start;
  if (off % r.step != 0 || off / r.step >= r.count) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + r.delta);
}

uint32_t nfd_first(uint32_t cp) {
  if (cp < 0xC0) return cp;
  if (cp >= kSBase && cp < kSBase + kSCount) return kLBase + (cp - kSBase) / kNCount;
  const Tables& t = tables_instance();
  for (auto it = t.decomp.find(cp); it != t.decomp.end(); it = t.decomp.find(cp)) cp = it->second.first;
  return cp;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const Tables& t = tables_instance();
  auto it = std::upper_bound(t.ccc.begin(), t.ccc.end(), cp, [](uint32_t v, const Run& r) { return v < r.first; });
  if (it == t.ccc.begin()) return 0;
  const Run& r = *(it - 1);
  return cp <= r.last ? r.value : 0;
}

std::string nfc(std::string_view text) {
  // Fast path: every code point below U+0300 (ASCII, Latin-1, ...) is already NFC.
  bool simple = true;
  for (char c : text)
    if (static_cast<uint8_t>(c) >= 0xCC) {
      simple = false;
      break;
    }
  if (simple) return std::string(text);
  const Tables& t = tables_instance();
  bool stable = true;
  for (size_t i = 0; i < text.size() && stable;) {
    const uint32_t cp = next_cp(text, i);
    if (cp != kInvalid && !nfc_stable(t, cp)) stable = false;
  }
  if (stable) return std::string(text);

  std::string out;
  out.reserve(text.size());
  std::vector<uint32_t> seg;  // decomposed code points since the last stable boundary
  auto flush = [&]() {
    compose_segment(t, seg);
    for (uint32_t cp : seg) append_utf8(out, cp);
    seg.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t cp = next_cp(text, i);
    if (cp == kInvalid) {  // an invalid byte is a hard boundary, kept verbatim
      flush();
      out += text[start];
      continue;
    }
    // A stable starter cannot interact with what precedes it: the segment before is final.
    if (nfc_stable(t, cp)) flush();
    decompose(t, cp, seg);
  }
  flush();
  return out;
}

const char* tables_version() { return tables::kUnicodeVersion; }

}  // namespace kestrel::unicode
