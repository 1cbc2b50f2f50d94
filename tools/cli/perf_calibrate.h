// `kestrel bench --calibrate`: this machine measured for the performance model (kestrel perf
// --hw local). DRAM read bandwidth and the thread pool's cost per op at 1, 2, 4 .. n threads; each
// common weight type's matmul rate on one core with the weights in cache (batch 64: the compute
// side); a q4_0 matmul streaming a large matrix at batch 1 against the read probe (the fraction of
// the bandwidth a real kernel reaches).
#pragma once
#include <set>
#include <string>

#include "hw_profile.h"

namespace kestrel::cli {

// Measures (progress lines on stderr when verbose) and returns the profile named "local".
HwProfile calibrate_cpu(int max_threads, bool verbose);
// Measures again only what the memory's speed sets in a profile calibrate_cpu made (by this build
// of kestrel: UsageError otherwise): the read bandwidths, each type's batch-1 stream (its batches
// 2-8 scaled alike), the experts' streams and attention's cache streams: a third of the whole
// calibration's time, for a shared machine whose bandwidth drifts from one minute to the next.
// A scope that is not `all` measures only the streams it names (a model's: a tenth of the time),
// the bandwidths and the cache streams always.
struct MemoryScope {
  bool all = true;
  std::set<std::string> dense, experts;  // weight types whose batch-1 stream, whose experts' stream
};
void recalibrate_memory(HwProfile& p, bool verbose, const MemoryScope& scope = {});
// Writes it to local_profile_path() (creating the directory); throws UsageError when it cannot.
void save_local_profile(const HwProfile& p);

}  // namespace kestrel::cli
