#include "kv/recurrent_state.h"

#include <algorithm>
#include <string>

namespace kestrel {
namespace {

// The tensors' column c of `rows` F32 values.
uint8_t* column(const Tensor& t, int32_t c) { return static_cast<uint8_t*>(t.data) + t.nb[1] * static_cast<size_t>(c); }

}  // namespace

Expected<std::unique_ptr<RecurrentState>> RecurrentState::create(const std::vector<int64_t>& conv_rows,
                                                                 const std::vector<int64_t>& ssm_rows, int32_t n_seq,
                                                                 Device& device) {
  if (conv_rows.size() != ssm_rows.size() || n_seq <= 0)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "recurrent state: inconsistent layout");
  std::unique_ptr<RecurrentState> s(new RecurrentState());
  s->device_ = &device;
  s->n_seq_ = n_seq;
  size_t widest = 0;
  auto make = [&](int64_t rows, std::vector<Tensor>& out) -> Status {
    if (rows <= 0) {
      out.emplace_back();
      return Status::Ok();
    }
    Tensor t = make_tensor(DType::F32, rows, n_seq);
    auto mem = device.alloc(t.n_bytes());
    if (!mem.ok())
      return Error(mem.status().code(), "recurrent state: cannot allocate " + std::to_string(t.n_bytes()) + " bytes (" +
                                            mem.status().message() + ")");
    t.data = mem.value();
    s->buffers_.push_back(t.data);
    s->bytes_ += t.n_bytes();
    widest = std::max(widest, t.nb[1]);
    out.push_back(t);
    return Status::Ok();
  };
  for (size_t l = 0; l < conv_rows.size(); ++l) {
    if ((conv_rows[l] > 0) != (ssm_rows[l] > 0))
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "recurrent state: layer " + std::to_string(l) + " has only one of its two states");
    KS_RETURN_IF_ERROR(make(conv_rows[l], s->conv_));
    KS_RETURN_IF_ERROR(make(ssm_rows[l], s->ssm_));
  }
  s->zeros_.assign(widest, 0);
  KS_RETURN_IF_ERROR(s->zero(-1));
  return s;
}

RecurrentState::~RecurrentState() {
  for (void* p : buffers_) device_->release(p);
}

Status RecurrentState::zero(int32_t seq) {
  for (int32_t c = 0; c < n_seq_; ++c) {
    if (seq >= 0 && c != seq) continue;
    for (const std::vector<Tensor>* v : {&conv_, &ssm_})
      for (const Tensor& t : *v)
        if (t.data) KS_RETURN_IF_ERROR(device_->write(column(t, c), zeros_.data(), t.nb[1]));
  }
  return Status::Ok();
}

Status RecurrentState::copy_columns(const std::vector<Tensor>& a, int32_t from, const std::vector<Tensor>& b, int32_t to) {
  for (size_t l = 0; l < a.size(); ++l)
    if (a[l].data) KS_RETURN_IF_ERROR(device_->copy(column(b[l], to), column(a[l], from), a[l].nb[1]));
  return Status::Ok();
}

Status RecurrentState::copy(int32_t src, int32_t dst) {
  if (src == dst) return Status::Ok();
  KS_RETURN_IF_ERROR(copy_columns(conv_, src, conv_, dst));
  return copy_columns(ssm_, src, ssm_, dst);
}

Status RecurrentState::save(int32_t seq) {
  if (conv_ckpt_.empty()) {  // first use: the checkpoint tensors, shaped like the states
    for (const std::vector<Tensor>* v : {&conv_, &ssm_}) {
      std::vector<Tensor>& out = v == &conv_ ? conv_ckpt_ : ssm_ckpt_;
      for (const Tensor& t : *v) {
        Tensor c = t;
        if (t.data) {
          auto mem = device_->alloc(t.n_bytes());
          if (!mem.ok()) {
            conv_ckpt_.clear();
            ssm_ckpt_.clear();
            return Error(mem.status().code(), "recurrent state: no memory for checkpoints (" + mem.status().message() + ")");
          }
          c.data = mem.value();
          buffers_.push_back(c.data);
        }
        out.push_back(c);
      }
    }
  }
  KS_RETURN_IF_ERROR(copy_columns(conv_, seq, conv_ckpt_, seq));
  return copy_columns(ssm_, seq, ssm_ckpt_, seq);
}

Status RecurrentState::restore(int32_t seq) {
  if (conv_ckpt_.empty()) return Error(KESTREL_ERR_INTERNAL, "recurrent state: restore without a checkpoint");
  KS_RETURN_IF_ERROR(copy_columns(conv_ckpt_, seq, conv_, seq));
  return copy_columns(ssm_ckpt_, seq, ssm_, seq);
}

}  // namespace kestrel
