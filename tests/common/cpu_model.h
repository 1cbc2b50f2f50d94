// A model loaded on a backend (the CPU unless named) with one context: what the model-level
// tests start from.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "engine/context.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace kestrel::test {

struct CpuModel {
  std::unique_ptr<Model> model;  // declared first: the context goes first
  std::unique_ptr<Context> ctx;
};

inline CpuModel load_model_on(const std::string& backend, std::unique_ptr<gguf::File> file, const ContextOptions& co) {
  ModelLoadOptions lo;
  lo.backend = backend;
  auto model = Model::from_file(std::move(file), lo);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  auto ctx = Context::create(*model.value(), co);
  REQUIRE_MESSAGE(ctx.ok(), ctx.status().to_string());
  return {std::move(model.value()), std::move(ctx.value())};
}

inline CpuModel load_cpu_model(std::unique_ptr<gguf::File> file, const ContextOptions& co) {
  return load_model_on("cpu", std::move(file), co);
}

inline CpuModel load_cpu_model(std::unique_ptr<gguf::File> file, uint32_t n_ctx = 512) {
  ContextOptions co;
  co.n_ctx = static_cast<int32_t>(n_ctx);
  return load_cpu_model(std::move(file), co);
}

}  // namespace kestrel::test
