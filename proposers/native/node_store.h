// The trie's node record and its page storage (part of the native suffix index, suffix_index.h).
//
//  * nodes: 32-byte records in fixed-size pages (growth never copies), so every field a visit
//    touches shares one cache line: tok, cnt, par, ref_seq, ref_pos, first_child, next_sib,
//    dep (uint16), open, flags.
//  * ref_seq / ref_pos mean different things in the two node states; read and write them only
//    through the accessors below, which name the meaning (and check the state when built with
//    -DSPECDRAFT_CHECK_NODES):
//      closed node (seen once): its single occurrence, occ_seq() (an internal sequence *slot*,
//        dense and reused, not the caller's id) and occ_pos();
//      open node (seen twice or more; the Python twin keeps its ref up to date, but no
//        algorithm reads an open node's ref, so the fields are reused): suffix_link() (the node
//        of its gram without the first token) and either heavy_entry() (a high-fanout node's
//        entry in the heavy pool, heavy_topk.h) or child_count() (a light node's children).
//  * a dead node (on the free list) holds no reference: clear_refs().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "index_errors.h"

namespace specdraft {

constexpr int32_t kRoot = 0;
constexpr int kMaxDepthLimit = 65535;

enum : uint8_t { F_MARK = 1, F_HEAVY = 2, F_ZOMBIE = 4 };

struct Node {
  int32_t tok;
  int32_t cnt;
  int32_t par;
  int32_t ref_seq;  // closed: occ_seq; open: suffix_link (use the accessors below)
  int32_t ref_pos;  // closed: occ_pos; open: heavy_entry (heavy) or child_count (light)
  int32_t first_child;
  int32_t next_sib;
  uint16_t dep;
  uint8_t open;
  uint8_t flags;  // F_MARK (scratch, 0 between calls), F_HEAVY, F_ZOMBIE
};
static_assert(sizeof(Node) == 32, "Node must stay 32 bytes");

// ------------------------------------------------------------- fields by node state
inline bool is_heavy(const Node& n) { return (n.flags & F_HEAVY) != 0; }

// closed node: its single occurrence (sequence slot, position)
inline int32_t occ_seq(const Node& n) {
  SD_NODE_ASSERT(!n.open, "occ_seq of an open node");
  return n.ref_seq;
}
inline int32_t occ_pos(const Node& n) {
  SD_NODE_ASSERT(!n.open, "occ_pos of an open node");
  return n.ref_pos;
}
inline void set_occurrence(Node& n, int32_t seq, int32_t pos) {
  SD_NODE_ASSERT(!n.open, "occurrence set on an open node");
  n.ref_seq = seq;
  n.ref_pos = pos;
}

// open node: the node of its gram without the first token (-1: none)
inline int32_t suffix_link(const Node& n) {
  SD_NODE_ASSERT(n.open, "suffix_link of a closed node");
  return n.ref_seq;
}
inline void set_suffix_link(Node& n, int32_t link) {
  SD_NODE_ASSERT(n.open, "suffix link set on a closed node");
  n.ref_seq = link;
}

// open heavy node: its entry in the heavy pool
inline int32_t heavy_entry(const Node& n) {
  SD_NODE_ASSERT(n.open && is_heavy(n), "heavy_entry of a node that is not heavy");
  return n.ref_pos;
}
inline void set_heavy_entry(Node& n, int32_t e) {  // makes the node heavy
  SD_NODE_ASSERT(n.open, "heavy entry set on a closed node");
  n.flags |= F_HEAVY;
  n.ref_pos = e;
}
inline int32_t take_heavy_entry(Node& n) {  // the node stops being heavy; returns its entry
  const int32_t e = heavy_entry(n);
  n.flags &= (uint8_t)~F_HEAVY;
  n.ref_pos = -1;
  return e;
}

// open light node: the number of children linked under it (zombies included)
inline int32_t child_count(const Node& n) {
  SD_NODE_ASSERT(n.open && !is_heavy(n), "child_count of a closed or heavy node");
  return n.ref_pos;
}
inline void set_child_count(Node& n, int32_t c) {
  SD_NODE_ASSERT(n.open && !is_heavy(n), "child count set on a closed or heavy node");
  n.ref_pos = c;
}

// dead node: no reference
inline void clear_refs(Node& n) {
  n.ref_seq = -1;
  n.ref_pos = -1;
}

// Node storage in fixed-size pages: growth never copies or doubles the array (no transient 2x
// memory for a large cache) and at most one page is partly unused.
class NodeStore {
 public:
  explicit NodeStore(int page_shift = 14) : shift_(page_shift), mask_(((size_t)1 << page_shift) - 1) {}
  Node& operator[](size_t i) { return pages_[i >> shift_][i & mask_]; }
  const Node& operator[](size_t i) const { return pages_[i >> shift_][i & mask_]; }
  size_t size() const { return size_; }
  size_t capacity() const { return pages_.size() << shift_; }
  void emplace_back() {
    if (size_ == capacity()) pages_.emplace_back(new Node[(size_t)1 << shift_]);
    ++size_;
  }
  void push_back(const Node& x) {
    emplace_back();
    (*this)[size_ - 1] = x;
  }
  void clear() {
    std::vector<std::unique_ptr<Node[]>>().swap(pages_);
    size_ = 0;
  }
  void swap(NodeStore& o) {
    pages_.swap(o.pages_);
    std::swap(size_, o.size_);
    std::swap(shift_, o.shift_);
    std::swap(mask_, o.mask_);
  }
  int page_shift() const { return shift_; }
  size_t page_table_bytes() const { return pages_.capacity() * sizeof(void*); }

 private:
  std::vector<std::unique_ptr<Node[]>> pages_;
  size_t size_ = 0;
  int shift_;
  size_t mask_;
};

// ------------------------------------------------------------------ query states
// A position in the trie: a node, plus `extra` tokens past a closed node along its occurrence.
struct State {
  int32_t node = -1;  // -1: None
  int32_t extra = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const State& o) const { return node == o.node && extra == o.extra; }
};

// One continuation of a state: the next token, its count, and the state after it.
struct Cont {
  int32_t tok;
  int32_t cnt;
  State next;
};

// ascending order == continuations() order: count desc, token asc
inline bool cont_before(const Cont& a, const Cont& b) { return a.cnt != b.cnt ? a.cnt > b.cnt : a.tok < b.tok; }

}  // namespace specdraft
