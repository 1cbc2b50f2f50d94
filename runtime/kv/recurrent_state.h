// The recurrent-state cache of hybrid models, beside the paged KV cache: per SSM layer and
// sequence, the conv window (the last d_conv - 1 inputs of each channel) and the scan's state,
// F32 in device memory, one column per sequence. A constant per sequence, however long it runs.
// Unlike KV cells a state cannot forget its last tokens: it is zeroed (the sequence restarts),
// copied whole to another sequence, or checkpointed (saved beside itself, restored later:
// speculative decoding's rollback). Checkpoint columns are allocated on the first save.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace kestrel {

class RecurrentState {
 public:
  // conv_rows / ssm_rows: per layer, values per sequence (0: not an SSM layer).
  static Expected<std::unique_ptr<RecurrentState>> create(const std::vector<int64_t>& conv_rows,
                                                          const std::vector<int64_t>& ssm_rows, int32_t n_seq,
                                                          Device& device);
  ~RecurrentState();

  bool has(int layer) const { return conv_[static_cast<size_t>(layer)].data != nullptr; }
  const Tensor& conv(int layer) const { return conv_[static_cast<size_t>(layer)]; }  // [rows, n_seq]
  const Tensor& ssm(int layer) const { return ssm_[static_cast<size_t>(layer)]; }    // [rows, n_seq]
  size_t bytes() const { return bytes_; }  // without checkpoints
  size_t bytes_per_seq() const { return bytes_ / static_cast<size_t>(n_seq_); }

  Status zero(int32_t seq);  // seq < 0: every sequence
  Status copy(int32_t src, int32_t dst);
  Status save(int32_t seq);     // the checkpoint of seq := its state
  Status restore(int32_t seq);  // its state := its checkpoint (saved before)

 private:
  RecurrentState() = default;
  // Copies column `from` of every state tensor in `a` to column `to` of the same layer in `b`.
  Status copy_columns(const std::vector<Tensor>& a, int32_t from, const std::vector<Tensor>& b, int32_t to);

  Device* device_ = nullptr;
  int32_t n_seq_ = 1;
  size_t bytes_ = 0;
  std::vector<Tensor> conv_, ssm_;            // empty tensors for layers without a state
  std::vector<Tensor> conv_ckpt_, ssm_ckpt_;  // same shapes; allocated on the first save
  std::vector<void*> buffers_;
  std::vector<uint8_t> zeros_;  // one column of the widest state, for zero()
};

}  // namespace kestrel
