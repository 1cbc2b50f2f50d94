// A minimal C++ program: the RAII wrappers of kestrel.hpp, a sampled continuation streamed to
// stdout, then the token count. usage: generate_cpp MODEL.gguf "prompt" [max_tokens]
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "kestrel.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.gguf PROMPT [MAX_TOKENS]\n";
    return 2;
  }
  try {
    kestrel::ModelPtr model = kestrel::load_model(argv[1]);
    kestrel::ContextPtr ctx = kestrel::new_context(model.get());

    kestrel_sampler_options sampling;
    kestrel_sampler_options_init(&sampling);
    sampling.temperature = 0.7f;
    sampling.seed = 42;
    kestrel_generate_options go;
    kestrel_generate_options_init(&go);
    go.max_tokens = argc > 3 ? std::atoi(argv[3]) : 48;
    go.sampling = &sampling;
    go.on_token = [](kestrel_token, const char* piece, size_t len, void*) {
      std::fwrite(piece, 1, len, stdout);
      std::fflush(stdout);
      return true;
    };
    int32_t n = 0;
    std::cout << argv[2];
    kestrel::check(kestrel_generate(ctx.get(), argv[2], &go, &n));
    std::cout << "\n[" << n << " tokens on " << kestrel_context_backend(ctx.get()) << "]\n";
  } catch (const kestrel::Error& e) {
    std::cerr << "kestrel: " << kestrel_status_name(e.status()) << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
