// kestrel quantize IN.gguf OUT.gguf TYPE [-t THREADS] [--pure] [--allow-requantize] [--verbose]:
// requantizes an F32/F16/BF16 model the way llama-quantize does (runtime/quantize/quantize.h).
#include <cstdio>
#include <string>

#include "args.h"
#include "quantize/quantize.h"

namespace kestrel::cli {
namespace {

void print_types(std::FILE* out) {
  std::fprintf(out, "types (case-insensitive):\n");
  for (const quant::FileTypeName& f : quant::file_type_names())
    std::fprintf(out, "  %-10s %s\n", f.name, f.note);
}

bool quantize_progress(float p) {
  const int width = 30, filled = static_cast<int>(p * width);
  std::fprintf(stderr, "\rquantizing [%.*s%*s] %3d%%", filled, "==============================",
               width - filled, "", static_cast<int>(p * 100));
  if (p >= 1.0f) std::fprintf(stderr, "\n");
  return true;
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

Opts quantize_options() {
  std::string types = "the output type (case-insensitive):";
  for (const quant::FileTypeName& f : quant::file_type_names()) types += std::string(" ") + f.name;
  return {{"IN", "", "the input GGUF (F32, F16 or BF16 tensors)"},
          {"OUT", "", "the GGUF to write"},
          {"TYPE", "", types},
          {"-t,--threads", "N", "threads (default 0: one per core)"},
          {"--pure", "", "every quantized tensor gets TYPE (no per-tensor mix rules)"},
          {"--allow-requantize", "", "accept already-quantized input tensors"},
          {"-v,--verbose", "", "print each tensor's type change"},
          {"--list-types", "", "list the types with what each is"}};
}

int cmd_quantize(const Args& a) {
  if (a.has("--list-types")) {
    print_types(stdout);
    return 0;
  }
  const auto& pos = a.positional();
  if (pos.size() != 3) throw UsageError("quantize needs IN OUT TYPE (kestrel quantize --list-types lists the types)");
  const quant::FileTypeName* type = quant::find_file_type(pos[2]);
  if (!type) {
    std::fprintf(stderr, "kestrel quantize: unknown type '%s'\n", pos[2].c_str());
    print_types(stderr);
    return 2;
  }
  const long long threads = a.integer("--threads", 0);
  if (threads < 0 || threads > 1024) throw UsageError("--threads must be between 0 and 1024");

  quant::QuantizeOptions opt;
  opt.ftype = type->ftype;
  opt.n_threads = static_cast<int>(threads);
  opt.pure = a.has("--pure");
  opt.allow_requantize = a.has("--allow-requantize");
  if (stderr_is_tty()) opt.progress = quantize_progress;

  auto r = quant::quantize_file(pos[0], pos[1], opt);
  if (!r.ok()) {
    std::fprintf(stderr, "kestrel quantize: %s\n", r.status().to_string().c_str());
    return 1;
  }
  int n_fallback = 0;
  for (const quant::TensorPlan& t : r->tensors) {
    n_fallback += t.fallback;
    if (a.has("--verbose"))
      std::fprintf(stderr, "%-40s %-7s -> %-7s%s\n", t.name.c_str(), dtype_name(t.from), dtype_name(t.to),
                   t.fallback ? "  (row length fits no block of the mix's type)" : "");
  }
  std::printf("%s: %.2f MiB -> %s: %.2f MiB (%s, %zu tensors%s) in %.2f s\n", pos[0].c_str(),
              mib(r->in_file_bytes), pos[1].c_str(), mib(r->out_file_bytes),
              quant::file_type_name(type->ftype), r->tensors.size(),
              n_fallback ? (", " + std::to_string(n_fallback) + " by fallback").c_str() : "",
              r->seconds);
  return 0;
}

}  // namespace kestrel::cli
