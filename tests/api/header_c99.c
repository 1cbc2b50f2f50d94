/* Compiled as -std=c99 -pedantic -Wall -Wextra -Werror: the public header must stay plain C. */
#include "kestrel.h"

int kestrel_header_c99_check(void);
int kestrel_header_c99_check(void) {
  kestrel_model_options mo;
  kestrel_context_options co;
  kestrel_sampler_options so;
  kestrel_generate_options go;
  kestrel_batch b;
  (void)mo; (void)co; (void)so; (void)go; (void)b;
  return KESTREL_API_VERSION + (int)KESTREL_OK;
}
