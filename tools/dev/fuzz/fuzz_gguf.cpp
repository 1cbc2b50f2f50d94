// libFuzzer target: the GGUF reader (gguf::File::from_bytes) on arbitrary bytes. Any crash,
// sanitizer report or leak is a bug: File must turn every input into a Status whose message says
// why; whatever it accepts must be readable in full and survive a write/read round trip.
// Built and run with the other targets by tools/dev/fuzz/run.sh (see README.md there); seeds: a
// tiny GGUF written by gen_seeds.cpp with the library's GGUF writer.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"

using namespace kestrel::gguf;

static volatile uint64_t g_sink;  // keeps the reads above from being optimized away

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
  if (!f.ok()) {
    if (f.status().message().empty()) __builtin_trap();  // every error must say why
    return 0;
  }
  // Touch everything the File claims, so an out-of-range tensor or string shows up under ASan.
  const File& file = **f;
  uint64_t sum = 0;
  for (const TensorInfo& t : file.tensors()) {
    if (file.find_tensor(t.name) == nullptr) __builtin_trap();
    const uint8_t* p = file.tensor_data(t);
    for (size_t k = 0; k < t.nbytes; ++k) sum += p[k];
    sum += static_cast<uint64_t>(t.n_elements());
  }
  for (const KeyValue& kv : file.metadata()) {
    if (file.find(kv.key) == nullptr) __builtin_trap();
    sum += kv.value.str.size() + kv.value.array.size();
    sum += static_cast<uint64_t>(file.get_int(kv.key).value_or(0));
  }
  // Whatever parsed must survive a write/read round trip through the Writer.
  Writer w;
  for (const KeyValue& kv : file.metadata()) w.set(kv.key, kv.value);
  for (const TensorInfo& t : file.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (!w.add_tensor(t.name, t.type, ne, file.tensor_data(t), t.nbytes).ok()) __builtin_trap();
  }
  auto again = File::from_bytes(w.to_bytes(), "fuzz-roundtrip.gguf");
  if (!again.ok() || (*again)->tensors().size() != file.tensors().size()) __builtin_trap();
  g_sink = sum;
  return 0;
}
