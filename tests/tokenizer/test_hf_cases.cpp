// Hugging Face tokenizers converted by tools/convert/hf_to_gguf.py, checked against the ids HF
// produced (testdata/tokenizer/hf/*/cases.json) and llama.cpp's Gemma vectors; plus the Python
// GGUF writer read back by the C++ reader. Needs python3 (KESTREL_PYTHON overrides); each
// vocabulary is converted once per run into a temporary folder.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "kestrel.h"
#include "tokenizer/tokenizer.h"

using namespace kestrel;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* const kFolders[] = {"deepseek_v3", "gemma3", "gptoss", "llama2", "llama3", "qwen3"};

// This file lives in tests/tokenizer/, two levels below the repository root.
fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

std::string python() {
  const char* env = std::getenv("KESTREL_PYTHON");
  return env && *env ? env : "python3";
}

std::string quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// A temporary folder for this run, removed at exit.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kestrel_hf_cases_XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};
const fs::path& temp_dir() {
  static TempDir dir;
  return dir.path;
}

// Runs a shell command; returns its exit code and puts stdout+stderr in *log.
int run(const std::string& cmd, std::string* log) {
  const fs::path log_path = temp_dir() / "cmd.log";
  const int rc = std::system((cmd + " >" + quote(log_path.string()) + " 2>&1").c_str());
  *log = test::read_text_file(log_path.string());
  return rc;
}

// The GGUF converted from testdata/tokenizer/hf/<name> ("" when the data is missing).
std::string converted(const std::string& name) {
  static std::map<std::string, std::string> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  const std::string cases = test::testdata_file("tokenizer/hf/" + name + "/cases.json");
  if (cases.empty()) return "";
  REQUIRE_MESSAGE(!temp_dir().empty(), "cannot create a temporary folder");
  const std::string out = (temp_dir() / (name + ".gguf")).string();
  const std::string cmd = python() + " " + quote((repo_root() / "tools/convert/hf_to_gguf.py").string()) + " " +
                          quote(fs::path(cases).parent_path().string()) + " --vocab-only -o " + quote(out);
  std::string log;
  const int rc = run(cmd, &log);
  REQUIRE_MESSAGE(rc == 0, "converter failed (" << rc << "): " << cmd << "\n" << log);
  return cache[name] = out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str() + "]";
}

std::string escaped(const std::string& text) { return json(text).dump(); }

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& path) {
  Loaded l;
  auto f = gguf::File::open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().to_string());
  l.file = std::move(f.value());
  auto t = Tokenizer::from_gguf(*l.file);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  l.tok = std::move(t.value());
  return l;
}

// The public API loads the file with vocab_only and tokenizes like the internal tokenizer.
void check_c_api(const std::string& path, const std::string& text, const std::vector<int32_t>& want) {
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.vocab_only = true;
  kestrel_model* m = nullptr;
  const kestrel_status st = kestrel_model_load(path.c_str(), &mo, &m);
  CHECK_MESSAGE(st == KESTREL_OK, "kestrel_model_load(vocab_only): " << std::string(kestrel_last_error()));
  if (st != KESTREL_OK) return;
  std::vector<kestrel_token> ids(text.size() + 8);
  size_t n = 0;
  CHECK(kestrel_tokenize(m, text.data(), text.size(), false, true, ids.data(), ids.size(), &n) == KESTREL_OK);
  ids.resize(n);
  CHECK(ids == want);
  kestrel_model_free(m);
}

struct Mismatches {
  int count = 0;
  std::string detail;  // the first few, for the log
  void add(const std::string& what) {
    if (++count <= 6) detail += "\n  " + what;
  }
};

void check_hf_folder(const std::string& name) {
  const std::string gguf_path = converted(name);
  if (gguf_path.empty()) return;
  const json doc = json::parse(test::read_text_file(test::testdata_file("tokenizer/hf/" + name + "/cases.json")));
  const auto& cases = doc.at("cases");
  REQUIRE(cases.size() > 0);
  check_c_api(gguf_path, cases[0].at("text").get<std::string>(), cases[0].at("ids_plain").get<std::vector<int32_t>>());
  Loaded l = load(gguf_path);
  // Where detokenization cannot give the text back exactly: NFC changes it, and a dummy-prefix
  // vocabulary prepends U+2581 to the text after each special token as well (HF Prepend).
  const bool nfc = l.file->get_string("tokenizer.kestrel.normalizer").value_or("") == "nfc";
  const bool prefix = l.file->get_bool("tokenizer.ggml.add_space_prefix").value_or(false);

  Mismatches plain, with_special, round_trip;
  int exact = 0, stable = 0, skipped = 0;
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::string label = c.at("name").get<std::string>() + " " + escaped(text);
    const auto want_plain = c.at("ids_plain").get<std::vector<int32_t>>();
    const auto want_special = c.at("ids_with_special").get<std::vector<int32_t>>();
    auto got_plain = l.tok->tokenize(text, false, true);
    auto got_special = l.tok->tokenize(text, true, true);
    REQUIRE_MESSAGE(got_plain.ok(), label << ": " << got_plain.status().to_string());
    REQUIRE_MESSAGE(got_special.ok(), label << ": " << got_special.status().to_string());
    if (got_plain.value() != want_plain)
      plain.add(label + "\n    want " + show(want_plain) + "\n    got  " + show(got_plain.value()));
    if (got_special.value() != want_special)
      with_special.add(label + "\n    want " + show(want_special) + "\n    got  " + show(got_special.value()));

    // Round trip of HF's own ids (independent of our tokenization), special tokens rendered.
    bool has_special = false;
    for (int32_t id : want_plain) has_special |= l.tok->is_control(id);
    const std::string back = l.tok->detokenize(want_plain, true);
    if (back == text) {
      ++exact;
    } else if (prefix && has_special) {
      ++skipped;
    } else if (nfc && l.tok->tokenize(back, false, true).value() == want_plain) {
      ++stable;  // the text came back normalized, and normalized text gives the same ids
    } else {
      round_trip.add(label + " came back as " + escaped(back));
    }
  }
  const int n = static_cast<int>(cases.size());
  MESSAGE(name << ": ids_plain " << n - plain.count << "/" << n << ", ids_with_special " << n - with_special.count
               << "/" << n << ", round trip exact " << exact << " + normalized " << stable << " + not representable "
               << skipped << " of " << n);
  CHECK_MESSAGE(plain.count == 0, name << " ids_plain mismatches: " << plain.count << plain.detail);
  CHECK_MESSAGE(with_special.count == 0, name << " ids_with_special mismatches: " << with_special.count
                                              << with_special.detail);
  CHECK_MESSAGE(round_trip.count == 0, name << " round-trip failures: " << round_trip.count << round_trip.detail);
}

// llama.cpp's .inp format: cases separated by "\n__ggml_vocab_test__\n"; the last separator is optional.
std::vector<std::string> split_inp(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t p; (p = inp.find(sep, pos)) != std::string::npos; pos = p + sep.size())
    out.push_back(inp.substr(pos, p - pos));
  if (pos < inp.size()) out.push_back(inp.substr(pos));
  return out;
}

std::vector<std::vector<int32_t>> split_out(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream nums(line);
    std::vector<int32_t> ids;
    for (int32_t id; nums >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

}  // namespace

TEST_CASE("HF cases: llama3 (byte-level BPE, ignore_merges)") { check_hf_folder("llama3"); }
TEST_CASE("HF cases: qwen3 (byte-level BPE, NFC)") { check_hf_folder("qwen3"); }
TEST_CASE("HF cases: deepseek_v3 (byte-level BPE, three split regexes, BOS from the config)") {
  check_hf_folder("deepseek_v3");
}
TEST_CASE("HF cases: gptoss (o200k)") { check_hf_folder("gptoss"); }
TEST_CASE("HF cases: llama2 (Mistral SentencePiece-BPE, byte fallback, dummy prefix)") { check_hf_folder("llama2"); }
TEST_CASE("HF cases: gemma3 (SentencePiece-BPE, byte fallback, no prefix)") { check_hf_folder("gemma3"); }

TEST_CASE("llama.cpp Gemma vectors on the converted gemma3 vocabulary") {
  const std::string rel = "tokenizer/llama.cpp/ggml-vocab-gemma-4.NO-GGUF.vocab-is-hf-gemma3";
  const std::string inp = test::testdata_file(rel + ".inp");
  const std::string outp = test::testdata_file(rel + ".out");
  if (inp.empty() || outp.empty()) return;
  const std::string gguf_path = converted("gemma3");
  if (gguf_path.empty()) return;
  Loaded l = load(gguf_path);
  const auto cases = split_inp(test::read_text_file(inp));
  const auto want = split_out(test::read_text_file(outp));
  REQUIRE(cases.size() == 46);
  REQUIRE(want.size() == cases.size());
  Mismatches bad;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = l.tok->tokenize(cases[i], false, false);
    REQUIRE(ids.ok());
    if (ids.value() != want[i])
      bad.add("case " + std::to_string(i) + " " + escaped(cases[i]) + "\n    want " + show(want[i]) + "\n    got  " +
              show(ids.value()));
  }
  MESSAGE("gemma vectors: " << cases.size() - bad.count << "/" << cases.size());
  CHECK_MESSAGE(bad.count == 0, "gemma vector mismatches: " << bad.count << bad.detail);
}

TEST_CASE("hf_to_gguf: Python unit tests, and the Python writer read by the C++ reader") {
  const std::string script = quote((repo_root() / "tests/tools/convert_test.py").string());
  std::string log;
  CHECK_MESSAGE(run(python() + " " + script, &log) == 0, log);
  REQUIRE_MESSAGE(!temp_dir().empty(), "cannot create a temporary folder");
  const std::string sample = (temp_dir() / "sample.gguf").string();
  REQUIRE_MESSAGE(run(python() + " " + script + " --write-sample " + quote(sample), &log) == 0, log);
  auto opened = gguf::File::open(sample);
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  const gguf::File& f = *opened.value();
  CHECK(f.version() == 3);
  CHECK(f.get_int("t.u8") == 200);
  CHECK(f.get_int("t.i8") == -100);
  CHECK(f.get_int("t.u16") == 60000);
  CHECK(f.get_int("t.i16") == -30000);
  CHECK(f.get_int("t.u32") == 4000000000ll);
  CHECK(f.get_int("t.i32") == -2000000000ll);
  CHECK(f.get_float("t.f32") == 1.5);
  CHECK(f.get_bool("t.bool") == true);
  CHECK(f.get_string("t.str") == std::string("h\xc3\xa9llo \xe2\x96\x81 \xf0\x9f\x98\x80"));
  REQUIRE(f.find("t.u64"));
  CHECK(f.find("t.u64")->u == (uint64_t{1} << 63) + 5);
  CHECK(f.get_int("t.i64") == -(int64_t{1} << 62));
  CHECK(f.get_float("t.f64") == -0.25);
  const auto* strs = f.get_array("t.arr_str");
  REQUIRE(strs);
  REQUIRE(strs->size() == 3);
  CHECK((*strs)[0].str == "a b");
  CHECK((*strs)[1].str == "");
  CHECK((*strs)[2].str == "\xe2\x96\x81x");
  const auto* i32 = f.get_array("t.arr_i32");
  REQUIRE(i32);
  REQUIRE(i32->size() == 3);
  CHECK((*i32)[1].as_int() == -2);
  const auto* f32 = f.get_array("t.arr_f32");
  REQUIRE(f32);
  REQUIRE(f32->size() == 2);
  CHECK((*f32)[1].as_float() == -1.0);
  REQUIRE(f.get_array("t.arr_empty"));
  CHECK(f.get_array("t.arr_empty")->empty());
  const auto* nested = f.get_array("t.arr_nested");
  REQUIRE(nested);
  REQUIRE(nested->size() == 2);
  CHECK((*nested)[0].array.size() == 2);
  CHECK((*nested)[1].array.at(0).str == "z");
  REQUIRE(f.tensors().size() == 2);
  const gguf::TensorInfo* b = f.find_tensor("b");
  REQUIRE(b);
  CHECK(b->n_dims == 2);
  CHECK(b->ne[0] == 2);
  CHECK(b->ne[1] == 2);
  float vals[4];
  std::memcpy(vals, f.tensor_data(*b), sizeof vals);
  CHECK(vals[0] == 4.0f);
  CHECK(vals[3] == 7.0f);
}
