// Host memory for the backends whose memory is the host's (host_backend.h): small allocations
// from the heap, large ones (a KV cache, a step's arena) as their own mappings on transparent
// huge pages where the kernel grants them. A decode step at depth reads each layer's cache a
// head's slice per cell, a row (all kv heads) apart: on 4 KiB pages that is a TLB miss every
// cell or two, on 2 MiB pages one per thousand.
#pragma once
#include <cstddef>

namespace kestrel {

// 64-byte aligned; nullptr when out of memory.
void* host_alloc(size_t bytes);
// p from host_alloc (or nullptr).
void host_free(void* p);

}  // namespace kestrel
