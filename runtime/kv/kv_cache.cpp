#include "kv/kv_cache.h"

#include <algorithm>
#include <string>

#include "core/limits.h"

namespace kestrel {

Expected<std::unique_ptr<KvCache>> KvCache::create(const Options& o, Device& device) {
  if (o.n_cells <= 0 || o.n_cells > limits::kMaxCtx)  // the cap also keeps the block arithmetic in int32
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: n_ctx = " + std::to_string(o.n_cells) + " is outside [1, " +
                                                   std::to_string(limits::kMaxCtx) + "]");
  if (o.n_seq_max <= 0 || o.n_seq_max > kMaxSeq)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "KV cache: n_seq_max must be in [1, " + std::to_string(kMaxSeq) + "]");
  if (o.block_size < 0) return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: block size must be >= 0");
  std::unique_ptr<KvCache> c(new KvCache());
  c->device_ = &device;
  c->n_seq_max_ = o.n_seq_max;
  // Blocks of 16 cells, fewer when the cache is small: each sequence needs a block of its own.
  int32_t bs = o.block_size;
  if (bs == 0) {
    bs = 16;
    while (bs > 1 && (o.n_cells + bs - 1) / bs < 2 * o.n_seq_max) bs /= 2;
  }
  c->block_size_ = bs;
  const int32_t n_blocks = (o.n_cells + bs - 1) / bs;
  const int32_t n_cells = n_blocks * bs;  // storage rounds up to whole blocks
  c->pool_ = std::make_unique<BlockPool>(n_blocks);
  c->cell_pos_.assign(static_cast<size_t>(n_cells), -1);
  c->cell_tok_.assign(static_cast<size_t>(n_cells), -1);
  c->tables_.resize(static_cast<size_t>(o.n_seq_max));
  c->fill_.assign(static_cast<size_t>(o.n_seq_max), 0);
  auto make = [&](int64_t rows, DType type, std::vector<Tensor>& out) -> Status {
    if (rows % dtype_info(type).block_size != 0)
      return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("KV cache: rows of ") + std::to_string(rows) + " values are not whole " +
                                                     dtype_name(type) + " blocks");
    const uint64_t bytes = limits::mul_sat(dtype_row_size(type, rows), static_cast<uint64_t>(n_cells));
    if (bytes > (uint64_t{1} << 62))  // far beyond any machine; also keeps size arithmetic from wrapping
      return Error(KESTREL_ERR_OUT_OF_MEMORY, "KV cache: a layer of " + std::to_string(rows) + " values per cell x " +
                                                  std::to_string(n_cells) + " cells is too large");
    Tensor t = make_tensor(type, rows, n_cells);
    auto mem = device.alloc(t.n_bytes());
    if (!mem.ok())
      return Error(mem.status().code(), "KV cache: cannot allocate " + std::to_string(t.n_bytes()) + " bytes (" +
                                            mem.status().message() + ")");
    t.data = mem.value();
    c->buffers_.push_back(t.data);
    c->bytes_ += t.n_bytes();
    out.push_back(t);
    return Status::Ok();
  };
  if (o.v_rows.size() != o.k_rows.size())
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: K and V layouts have different layer counts");
  const bool recurrent = !o.conv_rows.empty();
  if (recurrent) {
    if (o.conv_rows.size() != o.k_rows.size() || o.ssm_rows.size() != o.k_rows.size())
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: recurrent and K/V layouts have different layer counts");
    auto st = RecurrentState::create(o.conv_rows, o.ssm_rows, o.n_seq_max, device);
    if (!st.ok()) return st.status();
    c->state_ = std::move(st.value());
    c->ckpt_pos_.assign(static_cast<size_t>(o.n_seq_max), -1);
  }
  for (size_t l = 0; l < o.k_rows.size(); ++l) {
    if (o.k_rows[l] == 0 && o.v_rows[l] == 0) {  // a layer without attention (hybrid models): no K/V
      c->k_.emplace_back();
      c->v_.emplace_back();
      continue;
    }
    if (o.k_rows[l] <= 0 || o.v_rows[l] <= 0 || (o.v_in_k && o.v_rows[l] > o.k_rows[l]))
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: layer " + std::to_string(l) + " has K rows " +
                                                     std::to_string(o.k_rows[l]) + ", V rows " + std::to_string(o.v_rows[l]));
    KS_RETURN_IF_ERROR(make(o.k_rows[l], o.type_k, c->k_));
    if (o.v_in_k) {
      if (o.v_rows[l] % dtype_info(o.type_k).block_size != 0)
        return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: V's view of K is not whole blocks");
      Tensor v = make_tensor(o.type_k, o.v_rows[l], n_cells, 1, 1, c->k_.back().data);
      v.nb[1] = c->k_.back().nb[1];
      v.nb[2] = v.nb[3] = v.nb[1] * static_cast<size_t>(n_cells);
      c->v_.push_back(v);
    } else {
      KS_RETURN_IF_ERROR(make(o.v_rows[l], o.type_v, c->v_));
    }
  }
  return c;
}

KvCache::~KvCache() {
  for (void* p : buffers_) device_->release(p);
}

int32_t KvCache::n_used() const {
  int32_t n = 0;
  for (int32_t b = 0; b < pool_->n_blocks(); ++b) {
    if (pool_->refcount(b) == 0) continue;
    for (int32_t j = 0; j < block_size_; ++j) n += cell_pos_[static_cast<size_t>(b * block_size_ + j)] >= 0;
  }
  return n;
}

KvCache::Stats KvCache::stats() const {
  Stats s;
  s.block_size = block_size_;
  s.blocks = pool_->n_blocks();
  s.blocks_held = pool_->n_held();
  s.blocks_cached = pool_->n_cached();
  s.blocks_free = pool_->n_free();
  s.prefix_queries = prefix_queries_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.prefix_query_tokens = prefix_query_tokens_;
  return s;
}

int32_t KvCache::used_in(int32_t seq, size_t i) const {
  return i + 1 == tables_[static_cast<size_t>(seq)].size() ? fill_[static_cast<size_t>(seq)] : block_size_;
}

int32_t KvCache::blocks_needed(std::span<const int32_t> seq) const {
  std::vector<int32_t> n(static_cast<size_t>(n_seq_max_), 0);
  for (int32_t s : seq) ++n[static_cast<size_t>(s)];
  int32_t need = 0;
  for (int32_t s = 0; s < n_seq_max_; ++s) {
    int32_t left = n[static_cast<size_t>(s)];
    if (left == 0) continue;
    const auto& tb = tables_[static_cast<size_t>(s)];
    if (!tb.empty()) {
      const int32_t room = block_size_ - fill_[static_cast<size_t>(s)];
      if (room > 0 && pool_->refcount(tb.back()) > 1) ++need;  // shared last block: copied first
      left -= std::min(left, room);
    }
    need += (left + block_size_ - 1) / block_size_;
  }
  return need;
}

Status KvCache::can_claim(std::span<const int32_t> seq) const {
  const int32_t need = blocks_needed(seq);
  if (need <= pool_->n_available()) return Status::Ok();
  return Error(KESTREL_ERR_CONTEXT_FULL,
               "context full: the batch of " + std::to_string(seq.size()) + " tokens needs " + std::to_string(need) +
                   " new blocks of " + std::to_string(block_size_) + " cells, " + std::to_string(pool_->n_available()) +
                   " of " + std::to_string(pool_->n_blocks()) + " are free (raise n_ctx or remove old tokens)");
}

void KvCache::copy_cells(int32_t from, int32_t to, int32_t n) {
  auto copy_rows = [&](const Tensor& t) {
    const size_t row = t.nb[1], bytes = row * static_cast<size_t>(n);
    uint8_t* base = static_cast<uint8_t*>(t.data);
    Status st = device_->copy(base + row * static_cast<size_t>(to), base + row * static_cast<size_t>(from), bytes);
    if (!st.ok() && device_error_.ok()) device_error_ = Error(st.code(), "KV cache: block copy: " + st.message());
  };
  for (size_t l = 0; l < k_.size(); ++l) {
    if (!k_[l].data) continue;  // a recurrent layer
    copy_rows(k_[l]);
    if (v_[l].data != k_[l].data) copy_rows(v_[l]);
  }
  std::copy_n(cell_pos_.begin() + from, n, cell_pos_.begin() + to);
  std::copy_n(cell_tok_.begin() + from, n, cell_tok_.begin() + to);
}

int32_t KvCache::new_block() {
  const int32_t b = pool_->allocate();
  if (b >= 0) std::fill_n(cell_pos_.begin() + static_cast<std::ptrdiff_t>(b) * block_size_, block_size_, -1);
  return b;
}

int32_t KvCache::copy_block(int32_t b, int32_t n_used_cells) {
  const int32_t nb = new_block();
  if (nb >= 0) copy_cells(b * block_size_, nb * block_size_, n_used_cells);
  return nb;
}

KvCache::Split KvCache::split(int32_t seq, size_t i, int32_t p0, int32_t p1) const {
  Split r;
  const int32_t b = tables_[static_cast<size_t>(seq)][i];
  for (int32_t j = 0; j < used_in(seq, i); ++j) {
    const int32_t cp = cell_pos_[static_cast<size_t>(b * block_size_ + j)];
    if (cp < 0) continue;
    ++r.n_set;
    r.n_in += cp >= p0 && cp < p1;
  }
  return r;
}

void KvCache::maybe_publish(int32_t seq) {
  // A full block is published when it holds positions i*B .. i*B+B-1 of a sequence whose
  // earlier blocks are published too: its hash then names the whole token prefix.
  const auto& tb = tables_[static_cast<size_t>(seq)];
  const size_t i = tb.size() - 1;
  const int32_t b = tb[i], B = block_size_;
  for (int32_t j = 0; j < B; ++j)
    if (cell_pos_[static_cast<size_t>(b * B + j)] != static_cast<int32_t>(i) * B + j) return;
  uint64_t prev = 0;
  if (i > 0) {
    if (!pool_->published(tb[i - 1])) return;
    prev = pool_->hash(tb[i - 1]);
  }
  pool_->publish(b, block_hash(prev, cell_tok_.data() + static_cast<size_t>(b) * B, B));
}

Status KvCache::claim(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::span<const int32_t> seq,
                      std::vector<int32_t>* slots) {
  slots->clear();
  if (tokens.size() != pos.size() || seq.size() != pos.size())
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV claim: tokens, positions and sequence ids differ in length");
  for (size_t t = 0; t < pos.size(); ++t) {
    if (pos[t] < 0)
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(t) + ": negative position");
    if (seq[t] < 0 || seq[t] >= n_seq_max_)
      return Error(KESTREL_ERR_OUT_OF_RANGE, "batch token " + std::to_string(t) + ": sequence id " +
                                                 std::to_string(seq[t]) + " outside [0, " +
                                                 std::to_string(n_seq_max_) + ")");
  }
  KS_RETURN_IF_ERROR(can_claim(seq));
  const int32_t B = block_size_;
  for (size_t t = 0; t < pos.size(); ++t) {
    const int32_t s = seq[t];
    auto& tb = tables_[static_cast<size_t>(s)];
    int32_t& fill = fill_[static_cast<size_t>(s)];
    if (tb.empty() || fill == B) {
      tb.push_back(new_block());  // can_claim() counted it
      fill = 0;
    } else if (pool_->refcount(tb.back()) > 1) {  // copy on write
      const int32_t nb = copy_block(tb.back(), fill);
      pool_->release(tb.back());
      tb.back() = nb;
    }
    const int32_t slot = tb.back() * B + fill++;
    cell_pos_[static_cast<size_t>(slot)] = pos[t];
    cell_tok_[static_cast<size_t>(slot)] = tokens[t];
    slots->push_back(slot);
    if (fill == B) maybe_publish(s);
  }
  return device_error_;
}

void KvCache::pack_attention_batch(std::span<const int32_t> pos, std::span<const int32_t> seq,
                                   std::vector<int32_t>* out) const {
  const int32_t T = static_cast<int32_t>(pos.size()), n_cells = this->n_cells();
  size_t entries = 0, room = 32;
  for (const auto& tb : tables_) entries += tb.size();
  while (room < entries) room *= 2;  // the length steps in powers of two: see attention_batch.h
  out->assign(static_cast<size_t>(AttentionBatch::packed_size(T, n_seq_max_, n_cells, static_cast<int64_t>(room))), 0);
  int32_t* p = out->data();
  p[0] = T, p[1] = n_seq_max_, p[2] = n_cells, p[3] = block_size_, p[5] = static_cast<int32_t>(entries);
  int32_t* at = p + AttentionBatch::kHeader;
  at = std::copy(pos.begin(), pos.end(), at);
  at = std::copy(seq.begin(), seq.end(), at);
  at = std::copy(cell_pos_.begin(), cell_pos_.end(), at);
  int32_t* begin = at;
  int32_t* tables = begin + n_seq_max_ + 1;
  begin[0] = 0;
  for (int32_t s = 0; s < n_seq_max_; ++s) {
    const auto& tb = tables_[static_cast<size_t>(s)];
    tables = std::copy(tb.begin(), tb.end(), tables);
    begin[s + 1] = begin[s] + static_cast<int32_t>(tb.size());
  }
  const AttentionBatch b = AttentionBatch::view(p);
  int32_t max_cells = 0;
  for (int32_t t = 0; t < T; ++t) max_cells = std::max(max_cells, b.n_cells_of(t));
  p[4] = max_cells;
}

int32_t KvCache::attach_prefix(int32_t seq, std::span<const int32_t> tokens) {
  // A recurrent state summarises a whole prefix; none is kept per block, so none is shared.
  if (state_ || seq < 0 || seq >= n_seq_max_ || !tables_[static_cast<size_t>(seq)].empty()) return 0;
  ++prefix_queries_;
  prefix_query_tokens_ += static_cast<int64_t>(tokens.size());
  const int32_t B = block_size_, n = static_cast<int32_t>(tokens.size());
  auto& tb = tables_[static_cast<size_t>(seq)];
  uint64_t prev = 0;
  for (int32_t k = 0; (k + 1) * B < n; ++k) {
    const uint64_t h = block_hash(prev, tokens.data() + k * B, B);
    const int32_t b = pool_->lookup(h);
    if (b < 0) break;
    bool same = true;  // the hash found it; the cells must say the same
    for (int32_t j = 0; j < B && same; ++j)
      same = cell_tok_[static_cast<size_t>(b * B + j)] == tokens[static_cast<size_t>(k * B + j)] &&
             cell_pos_[static_cast<size_t>(b * B + j)] == k * B + j;
    if (!same) break;
    pool_->retain(b);
    tb.push_back(b);
    prev = h;
  }
  fill_[static_cast<size_t>(seq)] = tb.empty() ? 0 : B;
  const int32_t hit = static_cast<int32_t>(tb.size()) * B;
  prefix_hit_tokens_ += hit;
  return hit;
}

Status KvCache::checkpoint(int32_t seq) {
  if (!state_) return Status::Ok();
  if (seq < 0 || seq >= n_seq_max_)
    return Error(KESTREL_ERR_OUT_OF_RANGE, "KV checkpoint: sequence id " + std::to_string(seq) + " outside [0, " +
                                               std::to_string(n_seq_max_) + ")");
  KS_RETURN_IF_ERROR(state_->save(seq));
  ckpt_pos_[static_cast<size_t>(seq)] = seq_pos_max(seq) + 1;
  return Status::Ok();
}

Status KvCache::remove_states(int32_t seq, int32_t p0, int32_t p1, bool apply) {
  for (int32_t s = 0; s < n_seq_max_; ++s) {
    if (seq >= 0 && s != seq) continue;
    const int32_t last = seq_pos_max(s);
    if (last < 0 || p0 > last || p1 <= 0) continue;  // none of its tokens go
    if (p0 == 0 && p1 > last) {  // all of them
      if (apply) {
        KS_RETURN_IF_ERROR(state_->zero(s));
        ckpt_pos_[static_cast<size_t>(s)] = -1;
      }
      continue;
    }
    const int32_t ck = ckpt_pos_[static_cast<size_t>(s)];
    if (p1 > last && p0 == ck) {  // back to the checkpoint
      if (apply) KS_RETURN_IF_ERROR(state_->restore(s));
      continue;
    }
    return Error(KESTREL_ERR_UNSUPPORTED,
                 "KV seq_remove: sequence " + std::to_string(s) + " has recurrent (SSM) layers, whose state cannot drop "
                 "positions [" + std::to_string(p0) + ", " + (p1 == INT32_MAX ? std::string("end") : std::to_string(p1)) +
                 ") of 0.." + std::to_string(last) + (ck >= 0 ? "; it can go back to its checkpoint at " + std::to_string(ck) : "") +
                 ", or be removed whole");
  }
  return Status::Ok();
}

Status KvCache::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT32_MAX;
  if (seq >= n_seq_max_) return Status::Ok();
  if (state_) KS_RETURN_IF_ERROR(remove_states(seq, p0, p1, false));
  const int32_t B = block_size_;
  auto chosen = [&](int32_t s) { return seq < 0 || s == seq; };
  // Blocks that keep some cells and lose others are changed in place, after a private copy when
  // shared: count those copies first so that a shortage changes nothing.
  int32_t copies = 0;
  for (int32_t s = 0; s < n_seq_max_; ++s)
    for (size_t i = 0; chosen(s) && i < tables_[static_cast<size_t>(s)].size(); ++i)
      copies += split(s, i, p0, p1).partial() && pool_->refcount(tables_[static_cast<size_t>(s)][i]) > 1;
  if (copies > pool_->n_available())
    return Error(KESTREL_ERR_CONTEXT_FULL, "KV seq_remove: splitting shared blocks needs " + std::to_string(copies) +
                                               " free blocks, " + std::to_string(pool_->n_available()) + " are free");
  if (state_) KS_RETURN_IF_ERROR(remove_states(seq, p0, p1, true));  // before the positions it reads go
  for (int32_t s = 0; s < n_seq_max_; ++s) {
    if (!chosen(s)) continue;
    auto& tb = tables_[static_cast<size_t>(s)];
    std::vector<int32_t> kept;
    for (size_t i = 0; i < tb.size(); ++i) {
      int32_t b = tb[i];
      const Split sp = split(s, i, p0, p1);
      if (sp.n_in == 0) {
        kept.push_back(b);
        continue;
      }
      if (sp.n_in == sp.n_set) {  // the whole block goes
        pool_->release(b);
        continue;
      }
      if (pool_->refcount(b) > 1) {
        const int32_t nb = copy_block(b, used_in(s, i));
        pool_->release(b);
        b = nb;
      } else {
        pool_->unpublish(b);  // its content changes
      }
      for (int32_t j = 0; j < used_in(s, i); ++j) {
        int32_t& cp = cell_pos_[static_cast<size_t>(b * B + j)];
        if (cp >= p0 && cp < p1) cp = -1;
      }
      kept.push_back(b);
    }
    tb = std::move(kept);
    int32_t fill = 0;  // the last block's cells after its last used one are free again
    if (!tb.empty())
      for (int32_t j = 0; j < B; ++j)
        if (cell_pos_[static_cast<size_t>(tb.back() * B + j)] >= 0) fill = j + 1;
    fill_[static_cast<size_t>(s)] = fill;
  }
  return device_error_;
}

Status KvCache::seq_copy(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (src < 0 || src >= n_seq_max_ || dst < 0 || dst >= n_seq_max_)
    return Error(KESTREL_ERR_OUT_OF_RANGE, "KV seq_copy: sequence id outside [0, " + std::to_string(n_seq_max_) + ")");
  if (src == dst) return Status::Ok();
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT32_MAX;
  if (state_) {  // a state stands for a whole sequence: copied whole, into an empty one
    const int32_t last = seq_pos_max(src);
    if (last < 0 || p0 > last || p1 <= 0) return Status::Ok();
    if (p0 > 0 || p1 <= last || seq_pos_max(dst) >= 0)
      return Error(KESTREL_ERR_UNSUPPORTED, "KV seq_copy: the model has recurrent (SSM) layers: only a whole sequence "
                                            "can be copied, into an empty one");
  }
  const int32_t B = block_size_;
  const auto& st = tables_[static_cast<size_t>(src)];
  // Blocks wholly inside the range are shared; blocks partly inside are copied cell by cell.
  std::vector<Split> sp(st.size());
  int32_t copies = 0;
  for (size_t i = 0; i < st.size(); ++i) {
    sp[i] = split(src, i, p0, p1);
    copies += sp[i].partial();
  }
  if (copies > pool_->n_available())
    return Error(KESTREL_ERR_CONTEXT_FULL, "KV seq_copy: needs " + std::to_string(copies) + " free blocks, " +
                                               std::to_string(pool_->n_available()) + " are free");
  auto& dt = tables_[static_cast<size_t>(dst)];
  for (size_t i = 0; i < st.size(); ++i) {
    if (sp[i].n_in == 0) continue;
    if (!sp[i].partial()) {
      pool_->retain(st[i]);
      dt.push_back(st[i]);
      fill_[static_cast<size_t>(dst)] = used_in(src, i);
      continue;
    }
    const int32_t nb = new_block();
    int32_t m = 0;
    for (int32_t j = 0; j < used_in(src, i); ++j) {
      const int32_t from = st[i] * B + j, cp = cell_pos_[static_cast<size_t>(from)];
      if (cp >= p0 && cp < p1) copy_cells(from, nb * B + m++, 1);
    }
    dt.push_back(nb);
    fill_[static_cast<size_t>(dst)] = m;
  }
  if (state_) {  // the checks above: the whole of a non-empty src
    KS_RETURN_IF_ERROR(state_->copy(src, dst));
    ckpt_pos_[static_cast<size_t>(dst)] = -1;
  }
  return device_error_;
}

void KvCache::drop_table(int32_t seq) {
  for (int32_t b : tables_[static_cast<size_t>(seq)]) pool_->release(b);
  tables_[static_cast<size_t>(seq)].clear();
  fill_[static_cast<size_t>(seq)] = 0;
}

void KvCache::seq_keep(int32_t seq) {
  for (int32_t s = 0; s < n_seq_max_; ++s)
    if (s != seq) drop_table(s);
  reset_states(seq);
}

void KvCache::reset_states(int32_t except) {
  if (!state_) return;
  for (int32_t s = 0; s < n_seq_max_; ++s) {
    if (s == except) continue;
    const Status st = state_->zero(s);
    if (!st.ok() && device_error_.ok()) device_error_ = st;
    ckpt_pos_[static_cast<size_t>(s)] = -1;
  }
}

int32_t KvCache::seq_pos_max(int32_t seq) const {
  int32_t mx = -1;
  if (seq < 0 || seq >= n_seq_max_) return mx;
  const auto& tb = tables_[static_cast<size_t>(seq)];
  for (size_t i = 0; i < tb.size(); ++i)
    for (int32_t j = 0; j < used_in(seq, i); ++j) mx = std::max(mx, cell_pos_[static_cast<size_t>(tb[i] * block_size_ + j)]);
  return mx;
}

void KvCache::clear() {
  for (int32_t s = 0; s < n_seq_max_; ++s) drop_table(s);
  pool_->reset();
  std::fill(cell_pos_.begin(), cell_pos_.end(), -1);
  prefix_queries_ = prefix_hit_tokens_ = prefix_query_tokens_ = 0;
  reset_states(-1);
}

}  // namespace kestrel
