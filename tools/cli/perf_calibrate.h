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
// Measures again part of a profile calibrate_cpu made (by this build of kestrel: UsageError
// otherwise), for a shared machine whose bandwidth, and cores, drift from one minute to the next:
// always the read bandwidths and attention's cache streams; each type's batch-1 stream (its
// batches 2-8 scaled alike) and its experts' stream, of every type (`all`: a third of the whole
// calibration's time) or of the types named (a model's: a tenth); with `compute`, also the named
// types' prefill and expert rates, attention's rates, the elementwise ops' and the sampler's
// (what a model's prefill reads).
struct RefreshScope {
  bool all = true;
  std::set<std::string> dense, experts;  // weight types whose stream (and rate), whose experts'
  bool compute = false;
};
void refresh_profile(HwProfile& p, bool verbose, const RefreshScope& scope = {});
// Writes it to local_profile_path() (creating the directory); throws UsageError when it cannot.
void save_local_profile(const HwProfile& p);

}  // namespace kestrel::cli
