// The KV cache's block pool: fixed-size blocks of cells with reference counts, plus a prefix
// cache. A full block of a sequence that started at position 0 is published under the hash of
// its token prefix; when its last holder lets it go it is not freed but kept, least recently
// used first out, until allocate() needs the room. A new sequence whose prompt starts with the
// same tokens finds it by hash and shares it (retain) instead of recomputing it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace kestrel {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }  // never published, or evicted
  int32_t n_cached() const { return static_cast<int32_t>(lru_.size()); } // published, held by nobody
  int32_t n_available() const { return n_free() + n_cached(); }
  int32_t n_held() const { return n_blocks() - n_available(); }

  // A block nobody holds (refcount 1 afterwards): a free one first, else the least recently
  // used cached one, which leaves the prefix cache. -1 when every block is held.
  int32_t allocate();
  void retain(int32_t b);
  // Refcount down; at zero a published block becomes cached, any other block free.
  void release(int32_t b);
  int32_t refcount(int32_t b) const { return ref_[static_cast<size_t>(b)]; }

  // Prefix cache. publish: b is full and will not change while published.
  void publish(int32_t b, uint64_t hash);
  void unpublish(int32_t b);
  bool published(int32_t b) const { return published_[static_cast<size_t>(b)] != 0; }
  uint64_t hash(int32_t b) const { return hash_[static_cast<size_t>(b)]; }
  // The published block with this hash, or -1. Does not retain it.
  int32_t lookup(uint64_t hash) const;
  // Every block free, the prefix cache empty (no block may be held).
  void reset();

 private:
  std::vector<int32_t> ref_;
  std::vector<uint8_t> published_;
  std::vector<uint64_t> hash_;
  std::vector<int32_t> free_;  // a stack
  std::list<int32_t> lru_;     // cached blocks, least recently released first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

// The content hash of a block: its tokens, chained to the hash of the block before it (0 for
// the first block of a sequence).
uint64_t block_hash(uint64_t prev, const int32_t* tokens, int32_t n);

}  // namespace kestrel
