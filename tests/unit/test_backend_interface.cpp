// The backend interface (backends/backend.h) and the graph's per-step inputs: memory moves through
// Status-returning calls on every compiled backend, supports() tells layouts apart, inputs lead the
// arena in creation order and every op node carries its own parameter struct.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/repacked.h"
#include "backends/host_memory.h"
#include "common/test_backend.h"
#include "tensor/graph.h"

using namespace kestrel;

TEST_CASE("every compiled backend moves bytes with write, copy and read") {
  int tried = 0;
  for (const std::string& name : compiled_backends()) {
    auto d = create_device(name);
    if (!d.ok()) {  // compiled, no device here: a clean error, never a crash
      CHECK(d.status().code() != KESTREL_OK);
      continue;
    }
    CAPTURE(name);
    Device& dev = *d.value();
    std::vector<int32_t> src(1000), back(1000, -1);
    std::iota(src.begin(), src.end(), 7);
    auto a = dev.alloc(src.size() * 4), b = dev.alloc(src.size() * 4);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(dev.write(a.value(), src.data(), src.size() * 4).ok());
    REQUIRE(dev.copy(b.value(), a.value(), src.size() * 4).ok());
    REQUIRE(dev.read(back.data(), b.value(), back.size() * 4).ok());
    CHECK(back == src);
    dev.release(a.value());
    dev.release(b.value());
    auto ex = dev.create_executor(1);
    REQUIRE(ex.ok());
    CHECK(&ex.value()->device() == &dev);
    ++tried;
  }
  CHECK(tried >= 2);  // cpu and ref at least
}

TEST_CASE("host memory: small blocks from the heap, large ones mapped on huge-page boundaries") {
  // Sizes around the 8 MiB switch; every byte writable and kept until freed, blocks distinct.
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (size_t n : {size_t{1}, size_t{4096}, (size_t{8} << 20) - 1, size_t{8} << 20, (size_t{8} << 20) + 12345,
                   size_t{40} << 20}) {
    CAPTURE(n);
    auto* p = static_cast<uint8_t*>(host_alloc(n));
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    if (n >= kHostMappedBytes) CHECK(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20) == 0);
    std::memset(p, static_cast<int>(n & 0xFF), n);
    blocks.emplace_back(p, n);
  }
  for (auto [p, n] : blocks) {
    CHECK(p[0] == static_cast<uint8_t>(n & 0xFF));
    CHECK(p[n - 1] == static_cast<uint8_t>(n & 0xFF));
    host_free(p);
  }
  host_free(nullptr);
}

TEST_CASE("supports(): a regrouped matrix only where the CPU's kernels read it") {
  auto cpu = create_device("cpu"), ref = create_device("ref");
  REQUIRE(cpu.ok());
  REQUIRE(ref.ok());
  Tensor w = make_tensor(DType::Q4_0, 64, 8), x = make_tensor(DType::F32, 64, 1), y = make_tensor(DType::F32, 8, 1);
  Node mm;
  mm.op = Op::MATMUL;
  mm.dst = &y;
  mm.src[0] = &w;
  mm.src[1] = &x;
  CHECK(cpu.value()->supports(mm));
  CHECK(ref.value()->supports(mm));
  w.layout = cpu::kLayoutGrouped8;
  CHECK(cpu.value()->supports(mm));
  CHECK(!ref.value()->supports(mm));  // the scalar kernels read file layouts only
  Node add = mm;
  add.op = Op::ADD;
  add.src[0] = &x;
  add.src[1] = &w;
  CHECK(!cpu.value()->supports(add));  // no elementwise kernel reads a grouped tensor
}

TEST_CASE("graph inputs lead the arena in creation order; intermediates follow; views of inputs bind") {
  Graph g;
  Tensor* ids = g.input(DType::I32, 5);     // 20 bytes -> 64
  Tensor* pos = g.input(DType::I32, 17);    // 68 bytes -> 128
  Tensor* pos2d = g.reshape(pos, 17, 1);
  CHECK(g.input_offset(ids) == 0);
  CHECK(g.input_offset(pos) == 64);
  CHECK(g.input_bytes() == 192);
  Tensor table = make_tensor(DType::F32, 4, 9);
  std::vector<float> table_data(36);
  table.data = table_data.data();
  Tensor* rows = g.intermediate(DType::F32, 4, 5);
  g.add(Op::GET_ROWS, rows, g.external(table), ids);
  Tensor* rows2 = g.intermediate(DType::F32, 4, 17);
  g.add(Op::GET_ROWS, rows2, g.external(table), pos2d);
  const size_t need = g.plan();
  CHECK(need >= 192 + 4 * 5 * 4);
  std::vector<uint8_t> arena(need + 64);
  uint8_t* base = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64;
  g.bind(base);
  CHECK(ids->data == base);
  CHECK(pos->data == base + 64);
  CHECK(pos2d->data == pos->data);
  for (Tensor* t : {rows, rows2}) CHECK(static_cast<uint8_t*>(t->data) >= base + 192);  // never over the inputs
}

TEST_CASE("every node carries the parameter struct ops.def names for its op") {
  Graph g;
  Tensor* x = g.intermediate(DType::F32, 8);
  CHECK(std::holds_alternative<NormParams>(g.add(Op::RMS_NORM, x, x).params));
  CHECK(std::holds_alternative<RopeParams>(g.add(Op::ROPE, x, x).params));
  CHECK(std::holds_alternative<AttentionParams>(g.add(Op::ATTENTION, x, x).params));
  CHECK(std::holds_alternative<RouterParams>(g.add(Op::ROUTER, x, x).params));
  CHECK(std::holds_alternative<SwigluOaiParams>(g.add(Op::SWIGLU_OAI, x, x).params));
  CHECK(std::holds_alternative<SoftmaxParams>(g.add(Op::SOFTMAX, x, x).params));
  CHECK(std::holds_alternative<NoParams>(g.add(Op::ADD, x, x, x).params));
  CHECK(g.nodes()[0].param<NormParams>().eps == NormParams{}.eps);
}
