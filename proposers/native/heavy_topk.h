// High-fanout ("heavy") nodes' top-k cache (part of the native suffix index, suffix_index.h).
//
//  * a node with more than heavy_threshold() children gets a 128-byte entry in the heavy pool
//    (its heavy_entry(), node_store.h) keeping the exact sum and number of its children's counts
//    and a buffer of its best TOPN candidates (count desc, token asc) with an upper bound on the
//    count of every child outside the buffer, all updated on every count change. The first k
//    buffered children are provably the top k while the k-th beats the bound, so drafting from
//    such a node reads its entry (two cache lines) instead of walking its children; only when
//    evictions erode that margin does the next query rescan them (SuffixIndex::heavy_rescan).
//  * dead children of a heavy node may stay linked as zombies (count 0, out of the hash table)
//    until a quarter of its list is dead; the entry counts them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "node_store.h"

namespace specdraft {

constexpr int TOPN = 8;  // candidates buffered per heavy node (max_children <= TOPN uses them)

// Nodes with more children than this get a heavy entry (tests lower it to exercise the paths).
inline int& heavy_threshold() {
  static int t = 4;
  return t;
}

struct TopEnt {
  int32_t node, tok, cnt;
};

// One entry per heavy node. Two cache lines (128 bytes): the header and the first four
// candidates share the first.
struct alignas(64) Heavy {
  int32_t sum = 0;        // sum of live children's counts (exact)
  int32_t nlive = 0;      // live children (exact)
  int32_t bound = 0;      // every live child outside top[] has count <= bound
  uint32_t zombies : 24;  // dead children still linked
  uint32_t ntop : 8;
  Heavy() : zombies(0), ntop(0) {}
  TopEnt top[TOPN];  // sorted candidates: live children, exact counts
};
static_assert(sizeof(Heavy) == 128 && offsetof(Heavy, top) == 16, "layout");

inline bool ent_before(const TopEnt& a, const TopEnt& b) { return a.cnt != b.cnt ? a.cnt > b.cnt : a.tok < b.tok; }

// top[0..k) are the first k children in continuations() order
inline bool heavy_exact(const Heavy& H, int k) {
  if (H.ntop == H.nlive) return true;  // every live child is buffered
  return k <= H.ntop && H.top[k - 1].cnt > H.bound;
}

// H from a node's live children `kids` (sum `total`); reorders kids.
inline void heavy_fill(Heavy& H, std::vector<Cont>& kids, int64_t total) {
  H.sum = (int32_t)total;
  H.nlive = (int32_t)kids.size();
  const size_t m = std::min<size_t>(TOPN, kids.size());
  if (kids.size() > m) {
    std::nth_element(kids.begin(), kids.begin() + m, kids.end(), cont_before);
    H.bound = kids[m].cnt;  // the best child left out
    for (size_t i = m + 1; i < kids.size(); ++i) H.bound = std::max(H.bound, kids[i].cnt);
  } else {
    H.bound = 0;
  }
  std::sort(kids.begin(), kids.begin() + m, cont_before);
  H.ntop = (uint32_t)m;
  for (size_t i = 0; i < m; ++i) H.top[i] = TopEnt{kids[i].next.node, kids[i].tok, kids[i].cnt};
}

// Child c (token tok, count now cnt) of the entry's node gained one occurrence (is_new: c was
// just created with count 1).
inline void heavy_child_up(Heavy& H, int32_t c, int32_t tok, int32_t cnt, bool is_new) {
  H.sum += 1;
  int i = -1;
  if (is_new) {
    H.nlive += 1;
  } else {
    for (int j = 0; j < H.ntop; ++j)
      if (H.top[j].node == c) {
        i = j;
        break;
      }
  }
  if (i >= 0) {
    H.top[i].cnt = cnt;
  } else {
    TopEnt e{c, tok, cnt};
    if (H.ntop < TOPN) {
      i = H.ntop++;
      H.top[i] = e;
    } else if (ent_before(e, H.top[TOPN - 1])) {
      H.bound = std::max(H.bound, H.top[TOPN - 1].cnt);  // pushed out
      i = TOPN - 1;
      H.top[i] = e;
    } else {
      H.bound = std::max(H.bound, cnt);  // an outsider grew
      return;
    }
  }
  while (i > 0 && ent_before(H.top[i], H.top[i - 1])) {
    std::swap(H.top[i], H.top[i - 1]);
    --i;
  }
}

// Child c of the entry's node lost one occurrence (cnt: its count after the decrement).
inline void heavy_child_down(Heavy& H, int32_t c, int32_t cnt) {
  H.sum -= 1;
  if (cnt == 0) H.nlive -= 1;
  for (int j = 0; j < H.ntop; ++j)
    if (H.top[j].node == c) {
      if (cnt == 0) {  // dead: leaves the buffer
        for (int t = j + 1; t < H.ntop; ++t) H.top[t - 1] = H.top[t];
        H.ntop -= 1;
        return;
      }
      H.top[j].cnt = cnt;
      while (j + 1 < H.ntop && ent_before(H.top[j + 1], H.top[j])) {
        std::swap(H.top[j], H.top[j + 1]);
        ++j;
      }
      return;
    }
}

// The entries, with a LIFO free list of released ones.
class HeavyPool {
 public:
  // A fresh (empty) entry's index.
  int32_t acquire() {
    int32_t e;
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    } else {
      e = (int32_t)pool_.size();
      pool_.emplace_back();
    }
    pool_[e] = Heavy{};
    return e;
  }
  void release(int32_t e) { free_.push_back(e); }
  void clear() {
    std::vector<Heavy>().swap(pool_);
    std::vector<int32_t>().swap(free_);
  }
  Heavy& operator[](size_t e) { return pool_[e]; }
  const Heavy& operator[](size_t e) const { return pool_[e]; }
  size_t size() const { return pool_.size(); }  // entries ever allocated (in use + free)
  size_t in_use() const { return pool_.size() - free_.size(); }
  const std::vector<int32_t>& free_list() const { return free_; }
  size_t memory_bytes() const { return pool_.capacity() * sizeof(Heavy) + free_.capacity() * sizeof(int32_t); }

 private:
  std::vector<Heavy> pool_;
  std::vector<int32_t> free_;
};

}  // namespace specdraft
