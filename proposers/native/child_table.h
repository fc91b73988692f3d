// The trie's child lookup (part of the native suffix index, suffix_index.h).
//
//  * ONE open-addressing hash table for the whole trie, keyed by (parent, token), Fibonacci
//    hashing, linear probing, power-of-two capacity, load <= 1/2, backward-shift deletion (no
//    tombstones). A slot is 4 bytes (0: empty; the root is never a child): the child id in its
//    low id_bits; above them the entry's distance from its home slot (disp_bits, saturating:
//    the top value means "that far or farther"); in the bits above those a tag, bits of a
//    second hash of the key. The key is read back from the child's record, which a successful
//    lookup reads anyway; a probe whose tag differs is passed over without loading that record,
//    and a deletion's backward shift reads each following entry's home from its distance, not
//    from its record (the record only past the saturated distance). id_bits leaves room for
//    twice the node array (at least 16 bits); a child id past it rebuilds the table with more.
//  * Children of a node are also chained through first_child / next_sib (node_store.h) so
//    continuations can be enumerated; this table only answers "which child has this token".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "index_errors.h"
#include "node_store.h"

namespace specdraft {

class ChildTable {
 public:
  // Empty table of `cap` slots (a power of two), for child ids up to `max_id`.
  void reset(size_t cap, size_t max_id = 0) {
    std::vector<uint32_t>(cap, 0u).swap(slots_);
    set_mask(cap);
    set_id_bits(max_id);
    count_ = 0;
  }

  static size_t capacity_for(size_t live) {
    size_t need = live * 2 + 2;
    size_t cap = 16;
    while (cap < need) cap <<= 1;
    return cap;
  }

  inline size_t home(int32_t parent, int32_t token) const {
    uint64_t key = ((uint64_t)(uint32_t)parent << 32) | (uint32_t)token;
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  // the tag bits a slot holding child (parent, token) carries
  inline uint32_t tag(int32_t parent, int32_t token) const {
    uint64_t key = ((uint64_t)(uint32_t)token << 32) | (uint32_t)parent;
    return (uint32_t)((key * 0xC2B2AE3D27D4EB4Full) >> 32) & tag_mask_;
  }
  // for prefetching: id_of(slots()[home(p, t)]) is the first candidate child (0: none)
  const uint32_t* slots() const { return slots_.data(); }
  inline uint32_t id_of(uint32_t slot) const { return slot & id_mask_; }

  // The child of `parent` with token `token`, or -1.
  inline int32_t find(const NodeStore& nodes, int32_t parent, int32_t token) const {
    SD_COUNT(C_FIND, 1);
    size_t i = home(parent, token);
    const uint32_t* sl = slots_.data();
    const uint32_t tg = tag(parent, token);
    for (;;) {
      const uint32_t e = sl[i];
      if (e == 0) return -1;
      if ((e & tag_mask_) == tg) {
        const uint32_t v = id_of(e);
        const Node& C = nodes[v];
        if (C.tok == token && C.par == parent) return (int32_t)v;
      }
      SD_COUNT(C_PROBES, 1);
      i = (i + 1) & mask_;
    }
  }

  // Add node v (its par and tok are set) under its key.
  void insert(const NodeStore& nodes, int32_t v) {
    if ((count_ + 1) * 2 > slots_.size()) {
      rebuild(nodes, slots_.size() * 2);  // scans the node array, which already holds v
      return;
    }
    if ((uint32_t)v > id_mask_) {  // the node array outgrew the ids' bits
      rebuild(nodes, slots_.size());
      return;
    }
    place(nodes[v], (uint32_t)v);
    ++count_;
  }

  void erase(const NodeStore& nodes, int32_t v) {
    size_t i = home(nodes[v].par, nodes[v].tok);
    uint32_t* sl = slots_.data();
    while (id_of(sl[i]) != (uint32_t)v) {
      if (sl[i] == 0) throw AssertErr{"hash table: erasing a missing child"};
      i = (i + 1) & mask_;
    }
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      const uint32_t w = sl[j];
      if (w == 0) break;
      size_t d = (w >> id_bits_) & disp_max_;  // w's distance from its home slot
      if (d == disp_max_) {  // saturated: the home from the record
        const Node& W = nodes[id_of(w)];
        d = (j - home(W.par, W.tok)) & mask_;
      }
      // w may move to the hole at i unless its home lies cyclically in (i, j], that is unless
      // it sits closer to its home than to the hole
      const size_t gap = (j - i) & mask_;
      if (d >= gap) {
        sl[i] = with_disp(w, d - gap);
        i = j;
      }
    }
    sl[i] = 0;
    --count_;
  }

  // `cap` slots holding every linked node of `nodes` (free nodes and zombies left out).
  void rebuild(const NodeStore& nodes, size_t cap) {
    const size_t N = nodes.size();
    reset(cap, N);
    for (size_t v = 1; v < N; ++v) {
      const Node& X = nodes[v];
      if (X.par < 0 || (X.flags & F_ZOMBIE)) continue;  // free or zombie
      place(X, (uint32_t)v);
      ++count_;
    }
  }

  // Every entry's tag and distance field agree with its record (index_checks.h).
  void check(const NodeStore& nodes) const {
    for (size_t j = 0; j < slots_.size(); ++j) {
      const uint32_t w = slots_[j];
      if (w == 0) continue;
      const Node& X = nodes[id_of(w)];
      if ((w & tag_mask_) != tag(X.par, X.tok)) throw AssertErr{"hash table: a slot's tag disagrees with its child"};
      if (w != with_disp(w, (j - home(X.par, X.tok)) & mask_))
        throw AssertErr{"hash table: a slot's distance from its home is wrong"};
    }
  }

  size_t slot_count() const { return slots_.size(); }
  size_t count() const { return count_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(uint32_t); }

 private:
  void set_mask(size_t cap) {
    mask_ = cap - 1;
    int bits = 0;
    while (((size_t)1 << bits) < cap) ++bits;
    shift_ = 64 - bits;
  }

  // ids up to twice max_id, at least 16 bits, at most 31 (node ids are int32_t); then the
  // distance (kDispBits, fewer when the ids leave fewer) and the tag (what is left, maybe none)
  void set_id_bits(size_t max_id) {
    int bits = 16;
    while (bits < 31 && ((size_t)1 << bits) <= 2 * max_id) ++bits;
    id_bits_ = bits;
    id_mask_ = (uint32_t)(((uint64_t)1 << bits) - 1);
    const int disp_bits = std::min(kDispBits, 32 - bits);
    disp_max_ = ((uint32_t)1 << disp_bits) - 1;
    tag_mask_ = (uint32_t)~(((uint64_t)1 << (bits + disp_bits)) - 1);
  }

  // w with its distance field set to d (saturated)
  inline uint32_t with_disp(uint32_t w, size_t d) const {
    const uint32_t f = d < disp_max_ ? (uint32_t)d : disp_max_;
    return (w & ~(disp_max_ << id_bits_)) | (f << id_bits_);
  }

  // v (its record X) into the first free slot from its home, with its tag and distance
  inline void place(const Node& X, uint32_t v) {
    const size_t h = home(X.par, X.tok);
    uint32_t* sl = slots_.data();
    size_t i = h;
    while (sl[i] != 0) i = (i + 1) & mask_;
    sl[i] = with_disp(tag(X.par, X.tok) | v, (i - h) & mask_);
  }

  static constexpr int kDispBits = 3;

  std::vector<uint32_t> slots_;
  int id_bits_ = 16;
  uint32_t id_mask_ = 0xFFFF;
  uint32_t disp_max_ = 7;
  uint32_t tag_mask_ = 0xFFF80000u;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

}  // namespace specdraft
