// The Mamba-2 ops (SSM_CONV, SSM_SCAN) and RELU_SQR on every backend against the reference, and
// the reference against the recurrence itself: a batch of interleaved sequences gives the
// outputs and final states of feeding the same tokens one step at a time.
#include <doctest/doctest.h>

#include <cstring>

#include "op_case.h"

namespace kestrel::test {
namespace {

struct SsmShape {
  int64_t n_head = 4, head_dim = 8, n_group = 2, d_state = 16, d_conv = 4, n_seq = 3;
  int64_t d_inner() const { return n_head * head_dim; }
  int64_t channels() const { return d_inner() + 2 * n_group * d_state; }
  int64_t n_in() const { return d_inner() + channels() + n_head; }
  SsmParams params() const {
    return {.d_inner = static_cast<int32_t>(d_inner()), .n_head = static_cast<int32_t>(n_head),
            .n_group = static_cast<int32_t>(n_group), .d_state = static_cast<int32_t>(d_state)};
  }
};

// The persistent tensors and weights of one Mamba-2 layer, random: A negative, one head's dt
// bias past softplus's linear threshold (20), states mid-sequence (not zero).
struct SsmLayer {
  Tensor w, bias, A, D, dt_bias, conv_state, ssm_state;
  SsmLayer(Buffers& buf, const SsmShape& s, std::mt19937& rng) {
    w = buf.tensor(DType::F32, s.d_conv, s.channels());
    bias = buf.tensor(DType::F32, s.channels());
    A = buf.tensor(DType::F32, s.n_head);
    D = buf.tensor(DType::F32, s.n_head);
    dt_bias = buf.tensor(DType::F32, s.n_head);
    conv_state = buf.tensor(DType::F32, (s.d_conv - 1) * s.channels(), s.n_seq);
    ssm_state = buf.tensor(DType::F32, s.d_state * s.d_inner(), s.n_seq);
    for (Tensor* t : {&w, &bias, &A, &D, &dt_bias, &conv_state, &ssm_state}) fill_random(*t, rng);
    for (int64_t h = 0; h < s.n_head; ++h) static_cast<float*>(A.data)[h] = -0.1f - std::fabs(static_cast<float*>(A.data)[h]);
    static_cast<float*>(dt_bias.data)[1] = 25.0f;
  }
};

// SSM_CONV then SSM_SCAN over zx [n_in, T] for tokens of sequences `seq`; returns the scan's
// output [d_inner, T] (the conv's in *conv_out when asked).
Tensor* add_mamba(Case& c, const SsmShape& s, SsmLayer& L, Tensor* zx, const std::vector<int32_t>& seq,
                  std::vector<int32_t>& packed, Tensor** conv_out = nullptr) {
  const int64_t T = static_cast<int64_t>(seq.size());
  std::vector<int32_t> pos(seq.size(), 0), table_begin(static_cast<size_t>(s.n_seq + 1), 0);
  packed = pack_attention(pos, seq, {}, 1, table_begin, {});
  Tensor* batch = input_i32(c, packed);
  Tensor* xbc = output(c, s.channels(), T);
  c.g.add(Op::SSM_CONV, xbc, zx, c.g.external(L.w), c.g.external(L.bias), c.g.external(L.conv_state), batch).params =
      s.params();
  Tensor* y = output(c, s.d_inner(), T);
  c.g.add(Op::SSM_SCAN, y, xbc, zx, c.g.external(L.A), c.g.external(L.D), c.g.external(L.dt_bias),
          c.g.external(L.ssm_state), batch)
      .params = s.params();
  if (conv_out) *conv_out = xbc;
  return y;
}

}  // namespace

TEST_CASE("RELU_SQR: negatives, zeros and positives") {
  std::mt19937 rng(31);
  Case c;
  c.name = "relu_sqr";
  Tensor* x = input(c, DType::F32, rng, 70, 5);
  static_cast<float*>(x->data)[3] = 0.0f;
  Tensor* y = output(c, 70, 5);
  c.g.add(Op::RELU_SQR, y, x);
  c.outputs.push_back(y);
  check_case(c, 0.0, 0.0);
  const float* a = static_cast<const float*>(x->data);
  const float* b = static_cast<const float*>(y->data);
  for (int i = 0; i < 350; ++i) CHECK(b[i] == (a[i] > 0 ? a[i] * a[i] : 0.0f));
}

TEST_CASE("SSM_CONV and SSM_SCAN: interleaved sequences, a sequence left alone, every backend vs ref") {
  for (const SsmShape s : {SsmShape{}, SsmShape{.n_head = 8, .head_dim = 16, .n_group = 1, .d_state = 64, .d_conv = 2, .n_seq = 2}}) {
    for (const std::vector<int32_t>& seq : {std::vector<int32_t>{0}, std::vector<int32_t>{1, 0, 0, 1, 1, 0, 0}}) {
      std::mt19937 rng(7 + static_cast<unsigned>(seq.size()));
      Case c;
      c.name = "ssm d_state " + std::to_string(s.d_state) + ", " + std::to_string(seq.size()) + " tokens";
      SsmLayer L(c.buf, s, rng);
      Tensor* zx = input(c, DType::F32, rng, s.n_in(), static_cast<int64_t>(seq.size()));
      Tensor* xbc = nullptr;
      Tensor* y = add_mamba(c, s, L, zx, seq, c.i32a, &xbc);
      c.outputs = {xbc, y, c.g.external(L.conv_state), c.g.external(L.ssm_state)};
      check_case(c, 1e-5, 1e-4);
    }
  }
}

// The reference against the recurrence: the batch above, then each token alone in order, from the
// same starting states. Outputs and final states agree bit for bit (the same float operations).
TEST_CASE("SSM_CONV and SSM_SCAN: a batch equals its tokens one step at a time") {
  const SsmShape s;
  const std::vector<int32_t> seq = {1, 0, 0, 1, 1, 0, 0};
  const int64_t T = static_cast<int64_t>(seq.size());
  std::mt19937 rng(11);
  Case whole;
  SsmLayer L(whole.buf, s, rng);
  const std::vector<float> conv0(static_cast<float*>(L.conv_state.data), static_cast<float*>(L.conv_state.data) + L.conv_state.n_elements());
  const std::vector<float> ssm0(static_cast<float*>(L.ssm_state.data), static_cast<float*>(L.ssm_state.data) + L.ssm_state.n_elements());
  Tensor* zx = input(whole, DType::F32, rng, s.n_in(), T);
  Tensor* y = add_mamba(whole, s, L, zx, seq, whole.i32a);
  auto ref = make_ref_backend();
  run_graph(*ref, whole.g);
  const std::vector<float> conv1(static_cast<float*>(L.conv_state.data), static_cast<float*>(L.conv_state.data) + conv0.size());
  const std::vector<float> ssm1(static_cast<float*>(L.ssm_state.data), static_cast<float*>(L.ssm_state.data) + ssm0.size());
  std::memcpy(L.conv_state.data, conv0.data(), conv0.size() * sizeof(float));
  std::memcpy(L.ssm_state.data, ssm0.data(), ssm0.size() * sizeof(float));
  bool same = true;
  for (int64_t t = 0; t < T; ++t) {
    Case one;
    Tensor col = make_tensor(DType::F32, s.n_in(), 1, 1, 1, static_cast<float*>(zx->data) + t * s.n_in());
    Tensor* yt = add_mamba(one, s, L, one.g.external(col), {seq[static_cast<size_t>(t)]}, one.i32a);
    run_graph(*ref, one.g);
    same &= std::memcmp(yt->data, static_cast<float*>(y->data) + t * s.d_inner(), s.d_inner() * sizeof(float)) == 0;
  }
  CHECK(same);
  CHECK(std::memcmp(L.conv_state.data, conv1.data(), conv1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(L.ssm_state.data, ssm1.data(), ssm1.size() * sizeof(float)) == 0);
  // The untouched sequence 2 kept its states.
  const int64_t cr = L.conv_state.ne[0], sr = L.ssm_state.ne[0];
  CHECK(std::memcmp(conv1.data() + 2 * cr, conv0.data() + 2 * cr, cr * sizeof(float)) == 0);
  CHECK(std::memcmp(ssm1.data() + 2 * sr, ssm0.data() + 2 * sr, sr * sizeof(float)) == 0);
}

}  // namespace kestrel::test
