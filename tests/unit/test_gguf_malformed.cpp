// GGUF reader against a corpus of malformed files built here byte by byte: each must give a
// non-ok Status with the expected code and a message naming the problem, never a crash.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.h"

using namespace kestrel;
using namespace kestrel::gguf;

namespace {

constexpr uint64_t kHuge = uint64_t{1} << 62;

// Little-endian byte builder for hand-made GGUF images.
struct Raw {
  std::vector<uint8_t> b;
  template <class T>
  Raw& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  Raw& pad(size_t a = 32) { return zeros((a - b.size() % a) % a); }
  Raw& header(uint64_t n_tensors, uint64_t n_kvs, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kvs);
  }
  Raw& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Raw& tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t e : ne) put(e);
    return u32(type).u64(offset);
  }
};

// A file with one tensor 'w' of the given fields and data_bytes of data after the padding.
std::vector<uint8_t> one_tensor(std::vector<int64_t> ne, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
  return Raw().header(1, 0).tensor("w", ne, type, offset).pad().zeros(data_bytes).b;
}

// A file whose general.alignment is the given raw kv (type + value bytes) and one F32 tensor.
std::vector<uint8_t> alignment_file(uint32_t type, std::vector<uint8_t> value) {
  Raw r;
  r.header(1, 1).str("general.alignment").u32(type);
  r.b.insert(r.b.end(), value.begin(), value.end());
  return r.tensor("w", {8}, 0, 0).pad().zeros(32).b;
}

struct Case {
  const char* what;
  std::vector<uint8_t> bytes;
  kestrel_status code;
  std::vector<std::string> needles;  // each must appear in the message
};

std::vector<Case> corpus() {
  const auto F = KESTREL_ERR_FORMAT;
  const auto U = KESTREL_ERR_UNSUPPORTED;
  std::vector<Case> c;
  c.push_back({"empty file", {}, F, {"magic", "past end of file"}});
  c.push_back({"bad magic", Raw().header(0, 0).b, F, {}});
  c.back().bytes[3] = 'X';
  c.back().needles = {"bad magic 'GGUX'"};
  c.push_back({"version 1", Raw().header(0, 0, 1).b, U, {"version 1 "}});
  c.push_back({"version 4", Raw().header(0, 0, 4).b, U, {"version 4 "}});
  c.push_back({"version max", Raw().header(0, 0, 0xFFFFFFFFu).b, U, {"version 4294967295"}});
  c.push_back({"big-endian", Raw().header(0, 0, 0x03000000u).b, U, {"big-endian"}});
  c.push_back({"truncated counts", Raw().header(0, 0).b, F, {}});
  c.back().bytes.resize(20);
  c.back().needles = {"kv count", "past end of file"};
  c.push_back({"tensor count 2^62", Raw().header(kHuge, 0).zeros(64).b, F,
               {"tensor count 4611686018427387904", "cannot fit"}});
  c.push_back({"kv count 2^62", Raw().header(0, kHuge).zeros(64).b, F,
               {"kv count 4611686018427387904", "cannot fit"}});
  c.push_back({"key length past EOF", Raw().header(0, 1).u64(1000000).zeros(16).b, F,
               {"kv #0", "key of length 1000000", "past end of file"}});
  c.push_back({"string value past EOF", Raw().header(0, 1).str("k").u32(8).u64(1000).zeros(8).b,
               F, {"key 'k'", "string of length 1000", "past end of file"}});
  c.push_back({"array length past EOF",
               Raw().header(0, 1).str("arr").u32(9).u32(4).u64(1000000000).zeros(40).b, F,
               {"key 'arr'", "array of 1000000000 uint32", "past end of file"}});
  c.push_back({"huge nested array count",
               Raw().header(0, 1).str("n").u32(9).u32(9).u64(uint64_t{1} << 40).zeros(40).b, F,
               {"key 'n'", "array of 1099511627776 array"}});
  {
    Raw r;
    r.header(0, 1).str("deep").u32(9);
    for (int d = 0; d < 8; ++d) r.u32(9).u64(1);
    r.u32(4).u64(0);
    c.push_back({"arrays nested 9 deep", r.b, F, {"key 'deep'", "nested more than 8"}});
  }
  c.push_back({"unknown value type", Raw().header(0, 1).str("k").u32(13).zeros(8).b, F,
               {"key 'k'", "unknown value type 13"}});
  c.push_back({"unknown array element type",
               Raw().header(0, 1).str("k").u32(9).u32(99).u64(1).zeros(8).b, F,
               {"key 'k'", "unknown array element type 99"}});
  c.push_back({"bool not 0 or 1", Raw().header(0, 1).str("b").u32(7).put<uint8_t>(2).b, F,
               {"key 'b'", "bool value 2"}});
  c.push_back({"value past EOF", Raw().header(0, 1).str("k").u32(10).u32(0).b, F,
               {"key 'k'", "uint64", "past end of file"}});
  // 1000 was once Kestrel's internal Q4_0_R8 id; no file may name it.
  c.push_back({"unknown tensor type id", one_tensor({8}, 1000, 0, 32), F,
               {"tensor 'w'", "unknown type id 1000"}});
  // Kestrel's FP8 KV cache type has an id (0x4B000002) but is never a weight type.
  c.push_back({"the KV cache's f8_e4m3 type", one_tensor({8}, 0x4B000002u, 0, 32), U,
               {"tensor 'w'", "f8_e4m3", "KV cache type"}});
  c.push_back({"GGML type without kernels", one_tensor({256}, 16, 0, 66), U,
               {"tensor 'w'", "iq2_xxs", "id 16"}});
  c.push_back({"n_dims 0", one_tensor({}, 0, 0, 32), F, {"tensor 'w'", "n_dims 0"}});
  c.push_back({"n_dims 5", one_tensor({1, 1, 1, 1, 1}, 0, 0, 32), F, {"tensor 'w'", "n_dims 5"}});
  c.push_back({"negative ne", one_tensor({8, -5}, 0, 0, 32), F, {"tensor 'w'", "ne[1] = -5"}});
  c.push_back({"ne[0] not a multiple of the block", one_tensor({33}, 8, 0, 64), F,
               {"tensor 'w'", "ne[0] = 33", "q8_0 block size 32"}});
  c.push_back({"tensor data past EOF", one_tensor({64}, 0, 0, 100), F,
               {"tensor 'w'", "data [64, 320) past end of file (size 164)"}});
  c.push_back({"tensor offset wraps uint64", one_tensor({8}, 0, UINT64_MAX - 31, 32), F,
               {"tensor 'w'", "past end of file"}});
  c.push_back({"misaligned tensor offset", one_tensor({8}, 0, 8, 64), F,
               {"tensor 'w'", "data offset 8 is not a multiple of the alignment 32"}});
  c.push_back({"element count overflows int64",
               one_tensor({int64_t{1} << 32, int64_t{1} << 32}, 0, 0, 32), F,
               {"tensor 'w'", "more elements than int64"}});
  c.push_back({"f32 byte size overflows uint64",
               one_tensor({int64_t{1} << 40, int64_t{1} << 22}, 0, 0, 32), F,
               {"tensor 'w'", "byte size", "overflows uint64"}});
  c.push_back({"f64 byte size overflows uint64", one_tensor({int64_t{1} << 61, 2}, 28, 0, 32), F,
               {"tensor 'w'", "f64", "overflows uint64"}});
  c.push_back({"rows overflow with ne[0] = 0",
               one_tensor({0, int64_t{1} << 40, int64_t{1} << 40}, 0, 0, 32), F,
               {"tensor 'w'", "more rows"}});
  c.push_back({"tensor name past EOF", Raw().header(1, 0).u64(5000).zeros(40).b, F,
               {"tensor #0", "name of length 5000"}});
  c.push_back({"empty tensor name", Raw().header(1, 0).tensor("", {8}, 0, 0).pad().zeros(32).b, F,
               {"tensor #0 at offset 24 has an empty name"}});
  c.push_back({"data section past EOF", Raw().header(1, 0).tensor("w", {8}, 0, 0).b, F,
               {"data section would start at offset 64", "past end of file"}});
  c.push_back({"alignment 0", alignment_file(4, {0, 0, 0, 0}), F,
               {"general.alignment' = 0", "power of two"}});
  c.push_back({"alignment 48", alignment_file(4, {48, 0, 0, 0}), F,
               {"general.alignment' = 48", "power of two"}});
  c.push_back({"alignment -32", alignment_file(5, {0xe0, 0xff, 0xff, 0xff}), F,
               {"general.alignment' = -32"}});
  c.push_back({"alignment as string", alignment_file(8, {2, 0, 0, 0, 0, 0, 0, 0, '3', '2'}), F,
               {"general.alignment' has type string"}});
  c.push_back({"alignment as float32", alignment_file(6, {0, 0, 0, 0x42}), F,
               {"general.alignment' has type float32"}});
  c.push_back({"duplicate keys", Raw().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, F,
               {"duplicate key 'k'", "kv #1 at offset 41"}});
  c.push_back({"duplicate tensor names",
               Raw().header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().zeros(64).b,
               F, {"duplicate tensor name 'w'"}});
  c.push_back({"binary tensor name", Raw().header(1, 0).tensor("a\nb", {8}, 77, 0).pad().b, F,
               {"tensor 'a\\x0ab'", "unknown type id 77"}});
  return c;
}

// A valid file using every value type and several tensor types: the seed for truncation and
// mutation.
std::vector<uint8_t> valid_file(uint64_t* data_end) {
  Writer w;
  w.set("general.architecture", Value::make_string("llama"));
  w.set("u8", Value::make_array(ValueType::UINT8, {Value::make_u32(3)}));
  w.set("flag", Value::make_bool(true));
  w.set("i32", Value::make_i32(-4));
  w.set("u64", Value::make_u64(1234567890123ull));
  w.set("f32", Value::make_f32(0.25f));
  w.set("tokens", Value::make_string_array({"<s>", "", "hello"}));
  w.set("scores", Value::make_f32_array({-1.0f, 2.0f}));
  w.set("nested", Value::make_array(ValueType::ARRAY, {Value::make_i32_array({1, 2}),
                                                       Value::make_string_array({"x"})}));
  std::vector<uint8_t> data(2 * 34, 7);
  REQUIRE(w.add_tensor("a", DType::F32, {8}, data.data(), 32).ok());
  REQUIRE(w.add_tensor("b", DType::Q8_0, {32, 2}, data.data(), 68).ok());
  REQUIRE(w.add_tensor("c", DType::F16, {4, 3}, data.data(), 24).ok());
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = File::from_bytes(bytes);
  REQUIRE(f.ok());
  uint64_t end = 0;
  for (const TensorInfo& t : (*f)->tensors()) end = std::max<uint64_t>(end, t.offset + t.nbytes);
  *data_end = bytes.size() - (*f)->data_section_size() + end;  // the section runs to EOF
  return bytes;
}

// Touches every byte the File claims to own, so ASan would catch a range we got wrong.
uint64_t touch(const File& f) {
  uint64_t sum = 0;
  for (const TensorInfo& t : f.tensors())
    for (size_t k = 0; k < t.nbytes; ++k) sum += f.tensor_data(t)[k];
  for (const KeyValue& kv : f.metadata()) sum += kv.key.size() + kv.value.str.size();
  return sum;
}

}  // namespace

TEST_CASE("gguf malformed: every corpus file is rejected with a named reason") {
  const std::vector<Case> cases = corpus();
  CHECK(cases.size() >= 40);
  for (const Case& c : cases) {
    INFO("case: " << std::string(c.what));
    auto f = File::from_bytes(c.bytes, "bad.gguf");
    REQUIRE_FALSE(f.ok());
    const Status& st = f.status();
    INFO("message: " << st.message());
    CHECK(st.code() == c.code);
    CHECK(st.message().rfind("bad.gguf: ", 0) == 0);
    for (const std::string& n : c.needles) CHECK(st.message().find(n) != std::string::npos);
  }
}

TEST_CASE("gguf malformed: limits are limits, not off by one") {
  // Arrays nested exactly 8 deep parse.
  Raw r;
  r.header(0, 1).str("deep").u32(9);
  for (int d = 0; d < 7; ++d) r.u32(9).u64(1);
  r.u32(4).u64(1).u32(42);
  auto f = File::from_bytes(r.b);
  REQUIRE_MESSAGE(f.ok(), f.status().message());
  const Value* v = (*f)->find("deep");
  for (int d = 0; d < 7; ++d) v = &v->array.at(0);
  CHECK(v->array.at(0).u == 42);
  // A tensor ending exactly at the end of the file, and a zero-size tensor at its end.
  CHECK(File::from_bytes(one_tensor({8}, 0, 0, 32)).ok());
  CHECK(File::from_bytes(Raw().header(2, 0).tensor("w", {8}, 0, 0).tensor("z", {0}, 0, 32)
                             .pad().zeros(32).b).ok());
  CHECK_FALSE(File::from_bytes(one_tensor({8}, 0, 0, 31)).ok());
  // More array elements than the item limit (2^24) is refused before anything is allocated.
  Raw big;
  big.header(0, 1).str("big").u32(9).u32(0).u64((uint64_t{1} << 24) + 1).zeros((1 << 24) + 1);
  auto limited = File::from_bytes(std::move(big.b));
  REQUIRE_FALSE(limited.ok());
  CHECK(limited.status().code() == KESTREL_ERR_FORMAT);
  CHECK(limited.status().message().find("(limit)") != std::string::npos);
}

TEST_CASE("gguf malformed: every truncation of a valid file is rejected") {
  uint64_t data_end = 0;
  const std::vector<uint8_t> full = valid_file(&data_end);
  REQUIRE(data_end <= full.size());
  REQUIRE(File::from_bytes(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    INFO("prefix length " << len << " of " << full.size());
    auto f = File::from_bytes(std::vector<uint8_t>(full.begin(), full.begin() + len));
    if (len >= data_end) {  // only trailing padding lost: still a valid file
      CHECK(f.ok());
      continue;
    }
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == KESTREL_ERR_FORMAT);
    const std::string& m = f.status().message();
    CHECK((m.find("past end of file") != std::string::npos ||
           m.find("cannot fit") != std::string::npos));
  }
}

TEST_CASE("gguf malformed: random mutations never crash") {
  uint64_t data_end = 0;
  const std::vector<uint8_t> full = valid_file(&data_end);
  std::mt19937_64 rng(42);
  int rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = full;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      if (rng() % 3 == 0 && at + 8 <= b.size()) {  // a whole 64-bit field
        const uint64_t v = rng() % 2 ? rng() : rng() % 64;
        std::memcpy(b.data() + at, &v, 8);
      } else {
        b[at] = static_cast<uint8_t>(rng());
      }
    }
    auto f = File::from_bytes(std::move(b));
    if (f.ok()) {
      touch(**f);
    } else {
      ++rejected;
      CHECK(!f.status().message().empty());
      CHECK((f.status().code() == KESTREL_ERR_FORMAT ||
             f.status().code() == KESTREL_ERR_UNSUPPORTED));
    }
  }
  CHECK(rejected > 1000);
}

TEST_CASE("gguf malformed: open() names the file and parses the mapping the same way") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kestrel_test_gguf_bad_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  const std::vector<uint8_t> bad = one_tensor({64}, 0, 0, 100);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bad.data()), static_cast<std::streamsize>(bad.size()));
  }
  for (bool use_mmap : {true, false}) {
    auto f = File::open(path, use_mmap);
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == KESTREL_ERR_FORMAT);
    CHECK(f.status().message() ==
          path + ": tensor 'w': data [64, 320) past end of file (size 164)");
  }
  { std::ofstream truncate(path, std::ios::binary | std::ios::trunc); }
  auto empty = File::open(path);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == KESTREL_ERR_FORMAT);
  std::filesystem::remove(path);
}
