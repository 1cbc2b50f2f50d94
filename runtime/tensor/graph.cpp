#include "tensor/graph.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <map>

namespace kestrel {

std::string op_label(const Node& n) {
  std::string label;
  for (const char* c = op_name(n.op); *c; ++c) label += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  if ((n.op == Op::MATMUL || n.op == Op::MATMUL_ID) && n.src[0]) label += std::string(" ") + dtype_name(n.src[0]->type);
  return label;
}

const char* op_name(Op op) {
  static const char* const kNames[] = {
#define KS_OP(name, params, doc) #name,
#include "tensor/ops.def"
#undef KS_OP
  };
  return op < Op::COUNT ? kNames[static_cast<int>(op)] : "?";
}

OpParams default_params(Op op) {
  switch (op) {
#define KS_OP(name, params, doc) \
  case Op::name: return params{};
#include "tensor/ops.def"
#undef KS_OP
    case Op::COUNT: break;
  }
  return NoParams{};
}

Graph::Slot& Graph::slot_of(Tensor* t) { return slots_[index_.at(t)]; }

Tensor* Graph::external(const Tensor& t) {
  tensors_.push_back(t);
  Tensor* p = &tensors_.back();
  index_[p] = slots_.size();
  slots_.push_back(Slot{p});
  return p;
}

Tensor* Graph::input(DType type, int64_t ne0, int64_t ne1) {
  constexpr size_t kAlign = 64;
  Tensor* p = external(make_tensor(type, ne0, ne1));
  Slot& s = slots_.back();
  s.is_input = true;
  s.offset = input_bytes_;
  input_bytes_ += (p->n_bytes() + kAlign - 1) / kAlign * kAlign;
  return p;
}

Tensor* Graph::intermediate(DType type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
  Tensor* p = external(make_tensor(type, ne0, ne1, ne2, ne3));
  slots_.back().is_intermediate = true;
  return p;
}

Tensor* Graph::reshape(Tensor* src, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
  Slot s = slot_of(src);
  Tensor* p = external(make_tensor(src->type, ne0, ne1, ne2, ne3, src->data));
  p->name = src->name;
  if (s.is_intermediate || s.is_input) {
    slots_.back().is_intermediate = true;
    slots_.back().view_of = s.view_of ? s.view_of : src;
    slots_.back().view_offset = s.view_offset;
  }
  return p;
}

Tensor* Graph::columns(Tensor* src, int64_t c0, int64_t n) {
  Slot s = slot_of(src);
  Tensor t = *src;
  t.ne[1] = n;
  const size_t off = static_cast<size_t>(c0) * src->nb[1];
  t.data = src->data ? static_cast<uint8_t*>(src->data) + off : nullptr;
  Tensor* p = external(t);
  if (s.is_intermediate || s.is_input) {
    slots_.back().is_intermediate = true;
    slots_.back().view_of = s.view_of ? s.view_of : src;
    slots_.back().view_offset = s.view_offset + off;
  }
  return p;
}

Tensor* Graph::view(Tensor* src, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t offset) {
  Slot s = slot_of(src);
  Tensor t = make_tensor(src->type, ne0, ne1, ne2);
  t.name = src->name;
  t.nb[1] = nb1;
  t.nb[2] = nb2;
  t.nb[3] = nb2 * static_cast<size_t>(ne2);
  t.data = src->data ? static_cast<uint8_t*>(src->data) + offset : nullptr;
  Tensor* p = external(t);
  if (s.is_intermediate || s.is_input) {
    slots_.back().is_intermediate = true;
    slots_.back().view_of = s.view_of ? s.view_of : src;
    slots_.back().view_offset = s.view_offset + offset;
  }
  return p;
}

Node& Graph::add(Op op, Tensor* dst, Tensor* s0, Tensor* s1, Tensor* s2, Tensor* s3, Tensor* s4, Tensor* s5,
                 Tensor* s6, Tensor* s7) {
  Node n;
  n.op = op;
  n.params = default_params(op);
  n.dst = dst;
  Tensor* const srcs[Node::kMaxSrc] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (int i = 0; i < Node::kMaxSrc; ++i) n.src[i] = srcs[i];
  nodes_.push_back(n);
  return nodes_.back();
}

void Graph::mark_output(Tensor* t) {
  Slot& s = slot_of(t);
  (s.view_of ? slot_of(s.view_of) : s).output = true;
}

bool Graph::used_after(const Tensor* t, size_t i) const {
  const Slot& s = slots_[index_.at(t)];
  const Slot& o = s.view_of ? slots_[index_.at(s.view_of)] : s;
  if (!o.is_intermediate || o.is_input || o.output) return true;
  return o.last_use == SIZE_MAX || o.last_use > i;
}

size_t Graph::plan() {
  constexpr size_t kAlign = 64;
  // Storage owner of every intermediate tensor, and its live range in node indices.
  auto owner = [&](Tensor* t) -> Slot* {
    if (!t) return nullptr;
    Slot& s = slot_of(t);
    if (!s.is_intermediate) return nullptr;
    Slot* o = s.view_of ? &slot_of(s.view_of) : &s;
    return o->is_input ? nullptr : o;  // inputs keep their place for the whole step
  };
  std::unordered_map<Slot*, std::pair<size_t, size_t>> live;  // first, last
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    Tensor* ts[1 + Node::kMaxSrc] = {n.dst};
    for (int k = 0; k < Node::kMaxSrc; ++k) ts[1 + k] = n.src[k];
    for (Tensor* t : ts) {
      Slot* o = owner(t);
      if (!o) continue;
      auto it = live.find(o);
      if (it == live.end()) live[o] = {i, i};
      else it->second.second = i;
    }
  }
  std::vector<std::vector<Slot*>> starts(nodes_.size()), ends(nodes_.size());
  for (auto& [o, r] : live) {
    o->last_use = r.second;
    starts[r.first].push_back(o);
    if (!o->output) ends[r.second].push_back(o);
  }
  std::map<size_t, size_t> free_blocks;  // offset -> size
  size_t top = input_bytes_;  // the inputs come first
  auto alloc = [&](size_t size) {
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
      if (it->second >= size) {
        const size_t off = it->first, rest = it->second - size;
        free_blocks.erase(it);
        if (rest) free_blocks[off + size] = rest;
        return off;
      }
    }
    const size_t off = top;
    top += size;
    return off;
  };
  auto release = [&](size_t off, size_t size) {
    auto it = free_blocks.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free_blocks.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_blocks.erase(next);
    }
    if (it != free_blocks.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_blocks.erase(it);
      }
    }
  };
  auto padded = [&](Slot* o) { return (o->t->n_bytes() + kAlign - 1) / kAlign * kAlign; };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (Slot* o : starts[i]) o->offset = alloc(padded(o));
    for (Slot* o : ends[i]) release(o->offset, padded(o));
  }
  return top;
}

void Graph::bind(uint8_t* arena) {
  for (Slot& s : slots_) {
    if (!(s.is_intermediate || s.is_input) || s.view_of) continue;
    s.t->data = arena + s.offset;
  }
  for (Slot& s : slots_) {
    if (!s.is_intermediate || !s.view_of) continue;
    s.t->data = static_cast<uint8_t*>(slot_of(s.view_of).t->data) + s.view_offset;
  }
}

}  // namespace kestrel
