// `kestrel bench --calibrate`: this machine measured for the performance model (kestrel perf
// --hw local). DRAM read bandwidth and the thread pool's cost per op at 1, 2, 4 .. n threads; each
// common weight type's matmul rate on one core with the weights in cache (batch 64: the compute
// side); a q4_0 matmul streaming a large matrix at batch 1 against the read probe (the fraction of
// the bandwidth a real kernel reaches).
#pragma once
#include "hw_profile.h"

namespace kestrel::cli {

// Measures (progress lines on stderr when verbose) and returns the profile named "local".
HwProfile calibrate_cpu(int max_threads, bool verbose);
// Writes it to local_profile_path() (creating the directory); throws UsageError when it cannot.
void save_local_profile(const HwProfile& p);

}  // namespace kestrel::cli
