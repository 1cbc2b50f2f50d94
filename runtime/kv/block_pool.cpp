#include "kv/block_pool.h"

#include <algorithm>
#include <cassert>

namespace kestrel {

BlockPool::BlockPool(int32_t n_blocks)
    : ref_(static_cast<size_t>(n_blocks), 0),
      published_(static_cast<size_t>(n_blocks), 0),
      hash_(static_cast<size_t>(n_blocks), 0),
      lru_pos_(static_cast<size_t>(n_blocks)) {
  reset();
}

void BlockPool::reset() {
  std::fill(ref_.begin(), ref_.end(), 0);
  std::fill(published_.begin(), published_.end(), 0);
  lru_.clear();
  by_hash_.clear();
  free_.clear();
  // Low ids on top of the stack: fresh caches fill from the start of the buffers.
  for (int32_t b = n_blocks() - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();  // evicted from the prefix cache
    lru_.pop_front();
    by_hash_.erase(hash_[static_cast<size_t>(b)]);
    published_[static_cast<size_t>(b)] = 0;
  } else {
    return -1;
  }
  ref_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  int32_t& r = ref_[static_cast<size_t>(b)];
  if (r == 0) {  // a cached block coming back into use
    assert(published(b));
    lru_.erase(lru_pos_[static_cast<size_t>(b)]);
  }
  ++r;
}

void BlockPool::release(int32_t b) {
  int32_t& r = ref_[static_cast<size_t>(b)];
  assert(r > 0);
  if (--r > 0) return;
  if (published(b)) {
    lru_pos_[static_cast<size_t>(b)] = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void BlockPool::publish(int32_t b, uint64_t h) {
  if (published(b) || by_hash_.count(h)) return;  // the same content is already cached
  published_[static_cast<size_t>(b)] = 1;
  hash_[static_cast<size_t>(b)] = h;
  by_hash_[h] = b;
}

void BlockPool::unpublish(int32_t b) {
  if (!published(b)) return;
  by_hash_.erase(hash_[static_cast<size_t>(b)]);
  published_[static_cast<size_t>(b)] = 0;
  if (ref_[static_cast<size_t>(b)] == 0) {  // it was cached: now simply free
    lru_.erase(lru_pos_[static_cast<size_t>(b)]);
    free_.push_back(b);
  }
}

int32_t BlockPool::lookup(uint64_t h) const {
  const auto it = by_hash_.find(h);
  return it == by_hash_.end() ? -1 : it->second;
}

uint64_t block_hash(uint64_t prev, const int32_t* tokens, int32_t n) {
  // FNV-1a over the previous hash and the token ids, then a final mix (splitmix64).
  uint64_t h = 1469598103934665603ULL ^ prev;
  for (int32_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[i]);
    for (int k = 0; k < 4; ++k, v >>= 8) h = (h ^ (v & 0xFF)) * 1099511628211ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace kestrel
