// CPU kernels that need more than the row-parallel reference loops.
#pragma once
#include "core/thread_pool.h"
#include "tensor/graph.h"

namespace kestrel::cpu {

void matmul(const Node& n, ThreadPool& pool);

}  // namespace kestrel::cpu
