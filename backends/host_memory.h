// Host memory for the backends whose memory is the host's (host_backend.h): small allocations
// from the heap, large ones (a KV cache, a step's arena) as their own mappings on transparent
// huge pages where the kernel grants them. A decode step at depth reads every layer's cache,
// cells a row (all kv heads, 1-4 KiB) apart: on 4 KiB pages a TLB miss every cell or few, on
// 2 MiB pages one per thousand or more.
#pragma once
#include <cstddef>

namespace kestrel {

// Blocks of this many bytes and more are mappings of their own, on 2 MiB boundaries (8 MiB;
// SIZE_MAX under AddressSanitizer).
extern const size_t kHostMappedBytes;

// 64-byte aligned; nullptr when out of memory.
void* host_alloc(size_t bytes);
// p from host_alloc (or nullptr).
void host_free(void* p);

}  // namespace kestrel
