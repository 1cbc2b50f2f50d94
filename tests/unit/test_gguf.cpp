// GGUF reader/writer: value and tensor round trips, typed look-ups, and every shipped model file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <unistd.h>

#include "common/testdata.h"
#include "gguf/gguf.h"

namespace fs = std::filesystem;
using namespace kestrel;
using namespace kestrel::gguf;

namespace {

Value scalar(ValueType t, uint64_t u, int64_t i = 0, double f = 0) {
  Value v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}
Value u_val(ValueType t, uint64_t u) { return scalar(t, u); }
Value i_val(ValueType t, int64_t i) { return scalar(t, 0, i); }
Value f_val(ValueType t, double f) { return scalar(t, 0, 0, f); }

// Deep equality on the fields that matter for each type (floats bit for bit).
bool same(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32:
    case ValueType::UINT64: case ValueType::BOOL:
      return a.u == b.u;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return a.i == b.i;
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    case ValueType::STRING:
      return a.str == b.str;
    case ValueType::ARRAY:
      if (a.elem_type != b.elem_type || a.array.size() != b.array.size()) return false;
      for (size_t k = 0; k < a.array.size(); ++k)
        if (!same(a.array[k], b.array[k])) return false;
      return true;
  }
  return false;
}

std::string temp_path(const std::string& tag) {
  return (fs::temp_directory_path() /
          ("kestrel_test_gguf_" + std::to_string(getpid()) + "_" + tag + ".gguf"))
      .string();
}

std::unique_ptr<File> parse_ok(std::vector<uint8_t> bytes) {
  auto f = File::from_bytes(std::move(bytes), "test.gguf");
  REQUIRE_MESSAGE(f.ok(), f.status().message());
  return std::move(f).value();
}

// One key of every value type, including nested, empty and string arrays.
std::vector<KeyValue> every_value_type() {
  std::vector<KeyValue> kv;
  kv.push_back({"t.u8", u_val(ValueType::UINT8, 200)});
  kv.push_back({"t.i8", i_val(ValueType::INT8, -100)});
  kv.push_back({"t.u16", u_val(ValueType::UINT16, 60000)});
  kv.push_back({"t.i16", i_val(ValueType::INT16, -30000)});
  kv.push_back({"t.u32", Value::make_u32(4000000000u)});
  kv.push_back({"t.i32", Value::make_i32(-2000000000)});
  kv.push_back({"t.u64", Value::make_u64(std::numeric_limits<uint64_t>::max())});
  kv.push_back({"t.i64", i_val(ValueType::INT64, std::numeric_limits<int64_t>::min())});
  kv.push_back({"t.f32", Value::make_f32(-1.15625f)});
  kv.push_back({"t.f64", f_val(ValueType::FLOAT64, 3.141592653589793)});
  kv.push_back({"t.true", Value::make_bool(true)});
  kv.push_back({"t.false", Value::make_bool(false)});
  kv.push_back({"t.str", Value::make_string("h\xc3\xa9llo \xe2\x96\x81world")});
  kv.push_back({"t.str_nul", Value::make_string(std::string("a\0b", 3))});
  kv.push_back({"t.empty_str", Value::make_string("")});
  kv.push_back({"t.strs", Value::make_string_array({"<unk>", "", "\xe2\x96\x81the", "x"})});
  kv.push_back({"t.f32s", Value::make_f32_array({0.5f, -2.0f, 1e-5f})});
  kv.push_back({"t.i32s", Value::make_i32_array({-1, 0, 7, 2147483647})});
  kv.push_back({"t.u8s", Value::make_array(ValueType::UINT8, {u_val(ValueType::UINT8, 0),
                                                              u_val(ValueType::UINT8, 255)})});
  kv.push_back({"t.i64s", Value::make_array(ValueType::INT64, {i_val(ValueType::INT64, -5)})});
  kv.push_back({"t.f64s",
                Value::make_array(ValueType::FLOAT64, {f_val(ValueType::FLOAT64, 1e300)})});
  kv.push_back({"t.bools", Value::make_array(ValueType::BOOL, {Value::make_bool(true),
                                                               Value::make_bool(false)})});
  kv.push_back({"t.empty_arr", Value::make_array(ValueType::FLOAT32, {})});
  Value inner1 = Value::make_i32_array({1, 2, 3});
  Value inner2 = Value::make_array(ValueType::INT32, {});
  Value deep = Value::make_array(ValueType::ARRAY, {Value::make_string_array({"", "deep"})});
  kv.push_back({"t.nested", Value::make_array(ValueType::ARRAY, {inner1, inner2})});
  kv.push_back({"t.nested3", Value::make_array(ValueType::ARRAY, {deep, deep})});
  kv.push_back({"", Value::make_string("the empty key")});
  return kv;
}

}  // namespace

TEST_CASE("gguf: Value helpers") {
  CHECK(std::string(value_type_name(ValueType::FLOAT64)) == "float64");
  CHECK(std::string(value_type_name(static_cast<ValueType>(99))) == "unknown");
  CHECK(Value::make_u32(7).as_int() == 7);
  CHECK(Value::make_i32(-7).as_int() == -7);
  CHECK(Value::make_bool(true).as_int() == 1);
  CHECK(Value::make_u64(UINT64_MAX).as_int() == std::nullopt);  // no int64 value
  CHECK(Value::make_u64(UINT64_MAX).as_float() == doctest::Approx(1.8446744073709552e19));
  CHECK(Value::make_f32(2.5f).as_float() == 2.5);
  CHECK(Value::make_f32(2.5f).as_int() == std::nullopt);
  CHECK(Value::make_string("3").as_int() == std::nullopt);
  CHECK(Value::make_string("3").as_float() == std::nullopt);
  CHECK(Value::make_i32(1).is_integer());
  CHECK_FALSE(Value::make_bool(true).is_integer());
  CHECK(Value::make_f32(1).is_float());
  Value a = Value::make_string_array({"a", "b"});
  CHECK(a.type == ValueType::ARRAY);
  CHECK(a.elem_type == ValueType::STRING);
  REQUIRE(a.array.size() == 2);
  CHECK(a.array[1].str == "b");
}

TEST_CASE("gguf: every value type round-trips through writer and reader") {
  Writer w;
  const std::vector<KeyValue> kvs = every_value_type();
  for (const KeyValue& kv : kvs) w.set(kv.key, kv.value);
  std::vector<uint8_t> bytes = w.to_bytes();
  CHECK(bytes.size() % 32 == 0);

  auto check = [&](const File& f) {
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.tensors().empty());
    REQUIRE(f.metadata().size() == kvs.size());
    for (size_t k = 0; k < kvs.size(); ++k) {
      INFO("key " << kvs[k].key);
      CHECK(f.metadata()[k].key == kvs[k].key);  // insertion order kept
      CHECK(same(f.metadata()[k].value, kvs[k].value));
      const Value* v = f.find(kvs[k].key);
      REQUIRE(v != nullptr);
      CHECK(same(*v, kvs[k].value));
    }
  };
  check(*parse_ok(bytes));

  // The same bytes through a real file, mapped and read.
  const std::string path = temp_path("values");
  REQUIRE(w.write(path).ok());
  for (bool use_mmap : {true, false}) {
    auto f = File::open(path, use_mmap);
    REQUIRE_MESSAGE(f.ok(), f.status().message());
    CHECK((*f)->path() == path);
    CHECK((*f)->file_size() == bytes.size());
    check(**f);
  }
  fs::remove(path);

  // Version 2 has the same layout.
  bytes[4] = 2;
  auto v2 = parse_ok(bytes);
  CHECK(v2->version() == 2);
  CHECK(v2->get_string("t.str_nul") == std::string("a\0b", 3));
}

TEST_CASE("gguf: typed look-ups") {
  Writer w;
  for (const KeyValue& kv : every_value_type()) w.set(kv.key, kv.value);
  w.set("t.u32", Value::make_u32(11));  // replaces in place
  auto f = parse_ok(w.to_bytes());
  CHECK(f->metadata()[4].key == "t.u32");
  CHECK(f->get_int("t.u32") == 11);
  CHECK(f->get_int("t.u8") == 200);
  CHECK(f->get_int("t.i8") == -100);
  CHECK(f->get_int("t.u16") == 60000);
  CHECK(f->get_int("t.i16") == -30000);
  CHECK(f->get_int("t.i32") == -2000000000);
  CHECK(f->get_int("t.i64") == std::numeric_limits<int64_t>::min());
  CHECK(f->get_int("t.u64") == std::nullopt);  // above INT64_MAX
  CHECK(f->get_int("t.true") == std::nullopt);  // a bool is not an integer
  CHECK(f->get_int("t.str") == std::nullopt);
  CHECK(f->get_int("t.f32") == std::nullopt);
  CHECK(f->get_int("missing") == std::nullopt);
  CHECK(f->get_float("t.f32") == -1.15625);
  CHECK(f->get_float("t.f64") == 3.141592653589793);
  CHECK(f->get_float("t.i16") == -30000.0);  // integers widen to float
  CHECK(f->get_float("t.str") == std::nullopt);
  CHECK(f->get_bool("t.true") == true);
  CHECK(f->get_bool("t.false") == false);
  CHECK(f->get_bool("t.u8") == std::nullopt);
  CHECK(f->get_string("t.empty_str") == "");
  CHECK(f->get_string("t.u32") == std::nullopt);
  CHECK(f->get_string("") == "the empty key");
  const std::vector<Value>* strs = f->get_array("t.strs");
  REQUIRE(strs != nullptr);
  REQUIRE(strs->size() == 4);
  CHECK((*strs)[1].str.empty());
  CHECK((*strs)[2].str == "\xe2\x96\x81the");
  REQUIRE(f->get_array("t.empty_arr") != nullptr);
  CHECK(f->get_array("t.empty_arr")->empty());
  CHECK(f->get_array("t.str") == nullptr);
  CHECK(f->find("t.nested3")->array[1].array[0].array[1].str == "deep");
  CHECK(f->find("nope") == nullptr);
  CHECK(f->find_tensor("nope") == nullptr);
}

TEST_CASE("gguf: tensor data round trip") {
  std::mt19937 rng(1234);
  struct Spec {
    const char* name;
    DType type;
    std::vector<int64_t> ne;
    size_t expect_bytes;  // worked out by hand from the block layouts
  };
  const std::vector<Spec> specs = {
      {"f32.2d", DType::F32, {7, 3}, 7 * 3 * 4},
      {"f16.3d", DType::F16, {16, 2, 2}, 16 * 2 * 2 * 2},
      {"q8_0", DType::Q8_0, {64, 3}, 2 * 34 * 3},
      {"q4_k", DType::Q4_K, {256, 2}, 144 * 2},
      {"q4_0.4d", DType::Q4_0, {32, 1, 2, 3}, 18 * 6},
      {"i32.1d", DType::I32, {5}, 20},
      {"empty", DType::F32, {0, 4}, 0},
      {"mxfp4", DType::MXFP4, {64, 1}, 2 * 17},
  };
  Writer w;
  w.set("general.alignment", Value::make_u32(64));
  w.set("general.architecture", Value::make_string("test"));
  std::vector<std::vector<uint8_t>> data;
  for (const Spec& s : specs) {
    std::vector<uint8_t> d(s.expect_bytes);
    for (uint8_t& b : d) b = static_cast<uint8_t>(rng() | 1);  // random, never zero
    REQUIRE(w.add_tensor(s.name, s.type, s.ne, d.data(), d.size()).ok());
    data.push_back(std::move(d));
  }
  auto f = parse_ok(w.to_bytes());
  CHECK(f->alignment() == 64);
  REQUIRE(f->tensors().size() == specs.size());
  CHECK(reinterpret_cast<uintptr_t>(f->data_section()) % 64 == 0);
  for (size_t k = 0; k < specs.size(); ++k) {
    const Spec& s = specs[k];
    INFO("tensor " << s.name);
    const TensorInfo* t = f->find_tensor(s.name);
    REQUIRE(t != nullptr);
    CHECK(t == &f->tensors()[k]);
    CHECK(t->type == s.type);
    CHECK(t->n_dims == s.ne.size());
    for (size_t d = 0; d < 4; ++d) CHECK(t->ne[d] == (d < s.ne.size() ? s.ne[d] : 1));
    CHECK(t->nbytes == s.expect_bytes);
    CHECK(t->offset % 64 == 0);
    CHECK(t->offset + t->nbytes <= f->data_section_size());
    if (!data[k].empty())
      CHECK(std::memcmp(f->tensor_data(*t), data[k].data(), data[k].size()) == 0);
  }
  CHECK(f->find_tensor("q8_0")->n_elements() == 192);
}

TEST_CASE("gguf: add_tensor rejects inconsistent shapes") {
  Writer w;
  std::vector<uint8_t> buf(4096, 1);
  auto add = [&](DType t, std::vector<int64_t> ne, size_t n, const char* name = "x") {
    return w.add_tensor(name, t, ne, buf.data(), n);
  };
  CHECK(add(DType::F32, {4}, 12).code() == KESTREL_ERR_INVALID_ARGUMENT);   // needs 16
  CHECK(add(DType::Q8_0, {33}, 34).code() == KESTREL_ERR_INVALID_ARGUMENT);  // block 32
  CHECK(add(DType::F32, {}, 0).code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(add(DType::F32, {1, 1, 1, 1, 1}, 4).code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(add(DType::F32, {-1}, 0).code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(add(DType::F32, {int64_t{1} << 40, int64_t{1} << 30}, 4).code() ==
        KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(add(static_cast<DType>(1000), {4}, 16).code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(add(DType::F32, {4}, 16, "").code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(w.add_tensor("null", DType::F32, {4}, nullptr, 16).code() == KESTREL_ERR_INVALID_ARGUMENT);
  Status st = add(DType::Q8_0, {33}, 34, "blk.0.w");
  CHECK(st.message().find("blk.0.w") != std::string::npos);
  REQUIRE(add(DType::F32, {4}, 16, "ok").ok());
  CHECK(add(DType::F32, {4}, 16, "ok").code() == KESTREL_ERR_INVALID_ARGUMENT);  // twice
  CHECK(parse_ok(w.to_bytes())->tensors().size() == 1);
}

TEST_CASE("gguf: minimal and tensor-less files") {
  // Header only: no kvs, no tensors, no padding.
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  b.resize(24, 0);
  auto f = parse_ok(b);
  CHECK(f->metadata().empty());
  CHECK(f->data_section_size() == 0);
  CHECK(Writer().to_bytes().size() == 32);  // 24-byte header padded to the alignment
}

TEST_CASE("gguf: open reports missing files and directories as IO errors") {
  auto f = File::open("/nonexistent/kestrel/model.gguf");
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == KESTREL_ERR_IO);
  CHECK(f.status().message().find("/nonexistent/kestrel/model.gguf") != std::string::npos);
  auto d = File::open(fs::temp_directory_path().string());
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == KESTREL_ERR_IO);
  CHECK(Writer().write("/nonexistent/kestrel/out.gguf").code() == KESTREL_ERR_IO);
}

TEST_CASE("gguf: every shipped model and vocab file parses and is self-consistent") {
  const std::string any = test::testdata_file("models/stories260K-f32.gguf");
  if (any.empty()) return;
  std::vector<fs::path> files;
  for (const char* dir : {"models", "tokenizer"})
    for (const auto& e : fs::directory_iterator(fs::path(any).parent_path().parent_path() / dir))
      if (e.path().extension() == ".gguf") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 30);
  for (const fs::path& p : files) {
    INFO("file " << p.string());
    auto r = File::open(p.string());
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const File& f = **r;
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.get_string("general.architecture").has_value());
    REQUIRE(f.get_array("tokenizer.ggml.tokens") != nullptr);
    CHECK(f.get_array("tokenizer.ggml.tokens")->size() > 0);
    const bool is_model = p.parent_path().filename() == "models";
    CHECK(f.tensors().empty() != is_model);
    // Tensors lie inside the data section, aligned, in disjoint ranges.
    std::vector<const TensorInfo*> by_offset;
    uint64_t sum = 0;
    for (const TensorInfo& t : f.tensors()) {
      const DTypeInfo& ti = dtype_info(t.type);
      CHECK(t.nbytes == static_cast<uint64_t>(t.n_elements() / ti.block_size) * ti.type_size);
      CHECK(t.offset % 32 == 0);
      CHECK(t.offset + t.nbytes <= f.data_section_size());
      sum += t.nbytes;
      by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k)
      CHECK(by_offset[k - 1]->offset + by_offset[k - 1]->nbytes <= by_offset[k]->offset);
    CHECK(sum <= f.data_section_size());
    CHECK(f.data_section_size() <= f.file_size());
  }
}

TEST_CASE("gguf: stories260K facts") {
  const std::string path = test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  auto r = File::open(path);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  const File& f = **r;
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_int("llama.embedding_length") == 64);
  CHECK(f.get_int("llama.block_count") == 5);
  CHECK(f.get_int("llama.attention.head_count") == 8);
  CHECK(f.get_int("llama.attention.head_count_kv") == 4);
  CHECK(f.get_int("llama.feed_forward_length") == 172);
  CHECK(f.get_int("llama.context_length") == 512);
  CHECK(f.get_int("tokenizer.ggml.padding_token_id") == 4294967295LL);
  CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
  CHECK(f.get_int("general.architecture") == std::nullopt);
  const std::vector<Value>* tokens = f.get_array("tokenizer.ggml.tokens");
  REQUIRE(tokens != nullptr);
  CHECK(tokens->size() == 512);
  CHECK(f.find("tokenizer.ggml.tokens")->elem_type == ValueType::STRING);
  CHECK(f.get_array("tokenizer.ggml.scores")->size() == 512);
  CHECK(f.tensors().size() == 48);

  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->type == DType::F32);
  CHECK(emb->n_dims == 2);
  CHECK(emb->ne[0] == 64);
  CHECK(emb->ne[1] == 512);
  CHECK(emb->nbytes == 64 * 512 * 4);
  // output.weight is a copy of the embedding (llama2.c shares them): a check on the offsets.
  const TensorInfo* out = f.find_tensor("output.weight");
  REQUIRE(out != nullptr);
  REQUIRE(out->nbytes == emb->nbytes);
  CHECK(std::memcmp(f.tensor_data(*emb), f.tensor_data(*out), emb->nbytes) == 0);
  const float* w = reinterpret_cast<const float*>(f.tensor_data(*emb));
  int nonzero = 0;
  for (int k = 0; k < 64 * 512; ++k) {
    REQUIRE(std::isfinite(w[k]));
    nonzero += w[k] != 0.0f;
  }
  CHECK(nonzero > 64 * 500);

  // The read() path sees the same bytes.
  auto rr = File::open(path, /*use_mmap=*/false);
  REQUIRE(rr.ok());
  CHECK((*rr)->data_section_size() == f.data_section_size());
  CHECK(std::memcmp((*rr)->data_section(), f.data_section(), f.data_section_size()) == 0);
}

TEST_CASE("gguf: quantized model facts") {
  struct Fact {
    const char* file;
    const char* tensor;
    DType type;
    std::vector<int64_t> ne;
  };
  const Fact facts[] = {
      {"stories260K-q8_0", "blk.0.ffn_down.weight", DType::F16, {172, 64}},
      {"stories260K-q8_0", "blk.0.attn_q.weight", DType::Q8_0, {64, 64}},
      {"stories260K-q8_0", "blk.4.ffn_norm.weight", DType::F32, {64}},
      {"stories260K-q4_0", "output.weight", DType::Q8_0, {64, 512}},
      {"stories260K-q4_0", "token_embd.weight", DType::Q4_0, {64, 512}},
      {"llama-gqa-q4_k_m", "token_embd.weight", DType::Q6_K, {256, 512}},
      {"llama-gqa-q4_k_m", "blk.0.attn_q.weight", DType::Q4_K, {256, 256}},
      {"gpt-oss-mxfp4_moe", "blk.0.ffn_down_exps.weight", DType::MXFP4, {256, 256, 4}},
      {"deepseek2-q4_k_m", "blk.0.attn_k_b.weight", DType::Q5_0, {64, 256, 4}},
  };
  for (const Fact& fact : facts) {
    INFO(fact.file << " " << fact.tensor);
    const std::string path = test::testdata_file(std::string("models/") + fact.file + ".gguf");
    if (path.empty()) continue;
    auto r = File::open(path);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const TensorInfo* t = (*r)->find_tensor(fact.tensor);
    REQUIRE(t != nullptr);
    CHECK(t->type == fact.type);
    REQUIRE(t->n_dims == fact.ne.size());
    for (size_t d = 0; d < fact.ne.size(); ++d) CHECK(t->ne[d] == fact.ne[d]);
  }
}
