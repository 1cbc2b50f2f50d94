/* A minimal C program: load a model, stream a greedy continuation of a prompt to stdout.
 * usage: generate MODEL.gguf "prompt" */
#include <stdio.h>

#include "kestrel.h"

static bool print_piece(kestrel_token token, const char *piece, size_t len, void *user) {
  (void)token;
  (void)user;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  return true;
}

int main(int argc, char **argv) {
  kestrel_model *model = NULL;
  kestrel_context *ctx = NULL;
  kestrel_model_options mo;
  kestrel_context_options co;
  kestrel_sampler_options so;
  kestrel_generate_options go;
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]);
    return 2;
  }
  kestrel_model_options_init(&mo);
  if (kestrel_model_load(argv[1], &mo, &model) != KESTREL_OK) {
    fprintf(stderr, "load failed: %s\n", kestrel_last_error());
    return 1;
  }
  kestrel_context_options_init(&co);
  if (kestrel_context_new(model, &co, &ctx) != KESTREL_OK) {
    fprintf(stderr, "context failed: %s\n", kestrel_last_error());
    kestrel_model_free(model);
    return 1;
  }
  kestrel_sampler_options_init(&so);
  so.temperature = 0.0f; /* greedy */
  kestrel_generate_options_init(&go);
  go.max_tokens = 32;
  go.sampling = &so;
  go.on_token = print_piece;
  fputs(argv[2], stdout);
  if (kestrel_generate(ctx, argv[2], &go, NULL) != KESTREL_OK) {
    fprintf(stderr, "\ngenerate failed: %s\n", kestrel_last_error());
  }
  putchar('\n');
  kestrel_context_free(ctx);
  kestrel_model_free(model);
  return 0;
}
