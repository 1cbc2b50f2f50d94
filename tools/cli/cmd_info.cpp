// kestrel info: the model's architecture, hyper-parameters, tensors and memory needs as JSON.
#include <cstdio>

#include "common.h"

namespace kestrel::cli {

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, kModelOptions, {});
  ModelPtr model = load_model_from_args(a);
  std::printf("%s\n", describe(model.get()).c_str());
  return 0;
}

}  // namespace kestrel::cli
