// The sampler's random numbers: xoshiro256** (Blackman & Vigna) seeded through SplitMix64.
// Both are fixed integer recipes, so one seed gives the same stream on every compiler and
// platform (unlike std::mt19937 + std::uniform_real_distribution, whose mapping is unspecified).
#pragma once
#include <array>
#include <cstdint>

namespace kestrel {

// One SplitMix64 step: advances *state and returns the next output.
inline uint64_t splitmix64_next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  // The state is four consecutive SplitMix64 outputs from seed (never all zero).
  void reseed(uint64_t seed) {
    uint64_t sm = seed;
    for (uint64_t& w : s_) w = splitmix64_next(&sm);
  }

  // For tests against published vectors; an all-zero state would only ever return zeros.
  static Rng from_state(const std::array<uint64_t, 4>& s) {
    Rng r;
    r.s_ = s;
    return r;
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1): the top 53 bits scaled by 2^-53 (every value exactly representable).
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
};

}  // namespace kestrel
