// Whether this test binary runs under AddressSanitizer (roughly 10-50x slower for model work):
// the costliest statistical tests then draw fewer samples; what they check stays the same.
#pragma once

namespace kestrel::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace kestrel::test
