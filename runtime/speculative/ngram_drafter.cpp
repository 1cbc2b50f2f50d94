// Prompt-lookup drafting: find the latest earlier occurrence of the history's last n tokens and
// propose what followed it. Text that repeats (code being edited, quoted documents, lists,
// extraction) drafts itself; other text drafts nothing and costs one scan.
#include <algorithm>

#include "speculative/drafter.h"

namespace kestrel {
namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& o) : n_min_(std::max(1, o.n_min)), n_max_(std::max(o.n_min, o.n_max)) {}
  const char* name() const override { return "ngram"; }

  Status propose(std::span<const DraftRequest> reqs, std::span<Draft> out) override {
    for (size_t i = 0; i < reqs.size(); ++i) {
      out[i].clear();
      lookup(reqs[i].history, reqs[i].k, &out[i].tokens);
    }
    return Status::Ok();
  }

 private:
  // Longest suffix first; within one length, the latest match (recent text predicts best).
  void lookup(std::span<const int32_t> h, int32_t k, std::vector<int32_t>* tokens) const {
    const int64_t len = static_cast<int64_t>(h.size());
    for (int64_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_ && k > 0; --n) {
      const std::span<const int32_t> suffix = h.subspan(static_cast<size_t>(len - n));
      for (int64_t j = len - n - 1; j >= 0; --j) {
        if (!std::equal(suffix.begin(), suffix.end(), h.begin() + j)) continue;
        const int64_t from = j + n, to = std::min<int64_t>(from + k, len);
        tokens->assign(h.begin() + from, h.begin() + to);
        return;
      }
    }
  }

  int32_t n_min_, n_max_;
};

}  // namespace

std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& opts) { return std::make_unique<NgramDrafter>(opts); }

}  // namespace kestrel
