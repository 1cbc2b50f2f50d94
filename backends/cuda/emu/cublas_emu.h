// The emulator's cuBLAS (cublas.h): cublasGemmEx for the types Kestrel asks for, computed on the
// host as cuBLAS documents it (column-major operands, op(A) and op(B), leading dimensions checked
// as cuBLAS checks them), each sum in double rounded once to float. Calls made on a capturing
// stream are recorded and replayed with the graph, like launches.
#pragma once
#include "backends/cuda/cublas.h"

namespace kestrel::cuda_emu {
const kestrel::cuda::CublasApi& emulated_cublas();
}
