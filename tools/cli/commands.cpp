#include "commands.h"

#include <string>

#include "backends/backend.h"
#include "backends/cpu/simd.h"
#include "kestrel.h"
#include "kestrel_version.h"  // generated: KESTREL_VERSION_STRING, KESTREL_GIT_COMMIT

namespace kestrel::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"run", "generate a continuation of a prompt, streamed", run_options, cmd_run},
      {"chat", "chat in the terminal (line editing, history, /save, /load)", chat_options, cmd_chat},
      {"serve", "OpenAI- and Anthropic-compatible HTTP server with a web chat", serve_options, cmd_serve},
      {"info", "what a model is and what it needs (a summary; --json for everything)", info_options, cmd_info},
      {"bench", "tokens per second, prompt and generation, against the roofline", bench_options, cmd_bench},
      {"eval", "logits and greedy tokens of a token list (llama.cpp's reference JSON)", eval_options, cmd_eval},
      {"tokenize", "the token ids of a text", tokenize_options, cmd_tokenize},
      {"template", "render a conversation with a chat template", template_options, cmd_template},
      {"quantize", "requantize a GGUF model (llama-quantize's types and mixes)", quantize_options, cmd_quantize},
      {"synth", "a GGUF with a real model's shape and random weights", synth_options, cmd_synth},
      {"perplexity", "perplexity over a text as llama-perplexity computes it; KL divergence vs a base", perplexity_options, cmd_perplexity},
      {"perf", "predict speed and memory on a hardware profile from the model's shape", perf_options, cmd_perf},
  };
  return list;
}

std::string version_text() {
  std::string s = std::string("kestrel ") + KESTREL_VERSION_STRING + " (commit " + KESTREL_GIT_COMMIT + ", C API " +
                  std::to_string(kestrel_api_version()) + ")\nbackends compiled:";
  for (const std::string& b : compiled_backends()) s += " " + b;
  s += "\ncpu kernels: ";
  s += cpu::use_avx512() ? "AVX-512 VNNI + AVX2/FMA" : cpu::has_avx2_fma() ? "AVX2/FMA" : "portable";
  if (cpu::has_avx512_vnni() && !cpu::use_avx512()) s += " (AVX-512 present, off: KESTREL_NO_AVX512)";
  return s + "\n";
}

}  // namespace kestrel::cli
