// SuffixIndex::check(): the whole-index consistency check behind the Python twin's check() (the
// tests call it after random operation sequences). Included at the end of suffix_index.h.
//
// What it verifies: the free list; each live node's parent, depth, count and (closed) absence of
// children; each open node's suffix link (by walking its gram minus the first token); that every
// linked child is in the hash table; a light node's child count; a heavy node's entry (exact sum,
// live and zombie counts, buffer sorted, buffered children live with their counts, no child outside
// the buffer above the bound, and the exact top-k wherever heavy_exact claims it); and the totals
// (zombies, linked children, hash table size, heavy entries in use, no entry leaked or shared).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "suffix_index.h"

namespace specdraft {

inline void SuffixIndex::check() const {
  const size_t N = nodes_.size();
  std::vector<uint8_t> is_free(N, 0);
  for (int32_t f : free_) {
    if (f <= 0 || (size_t)f >= N || is_free[f]) throw AssertErr{"bad free list"};
    is_free[f] = 1;
  }
  size_t children_total = 0, zombies = 0, heavy_seen = 0;
  std::vector<uint8_t> entry_used(heavy_.size(), 0);
  for (int32_t e : heavy_.free_list()) entry_used[e] = 1;
  for (size_t n = 0; n < N; ++n) {
    if (is_free[n]) {
      if (nodes_[n].par != -1) throw AssertErr{"free node with a parent"};
      continue;
    }
    const Node& X = nodes_[n];
    if (X.flags & F_ZOMBIE) {
      ++zombies;
      continue;
    }
    if (n != (size_t)kRoot && X.par < 0) throw AssertErr{"live node without parent"};
    if (!X.open && (X.cnt != 1 || X.first_child >= 0))
      throw AssertErr{"closed node " + std::to_string(n) + " has count " + std::to_string(X.cnt) + " or children"};
    if (X.flags & F_MARK) throw AssertErr{"stale mark"};
    if (X.open && n != (size_t)kRoot) {  // suffix link: the node of the gram minus its first token
      std::vector<int32_t> g;
      for (int32_t y = (int32_t)n; y != kRoot; y = nodes_[y].par) g.push_back(nodes_[y].tok);
      std::reverse(g.begin(), g.end());
      State sw = walk(g.data() + 1, (int64_t)g.size() - 1);
      if (!(sw == State{suffix_link(X), 0})) throw AssertErr{"bad suffix link at node " + std::to_string(n)};
    }
    int64_t sum = 0, nlive = 0, nz = 0;
    std::vector<Cont> kids;
    for (int32_t c = X.first_child; c >= 0; c = nodes_[c].next_sib) {
      const Node& C = nodes_[c];
      if (is_free[c]) throw AssertErr{"free node linked as a child"};
      if (++children_total > N) throw AssertErr{"cycle in sibling lists"};
      if (C.flags & F_ZOMBIE) {
        if (!is_heavy(X)) throw AssertErr{"zombie under a light parent"};
        ++nz;
        continue;
      }
      if (C.par != (int32_t)n || C.dep != X.dep + 1) throw AssertErr{"child parent/depth mismatch"};
      if (!(0 < C.cnt && C.cnt <= X.cnt)) throw AssertErr{"child count out of range"};
      if (find_child((int32_t)n, C.tok) != c) throw AssertErr{"child not found in the hash table"};
      sum += C.cnt;
      ++nlive;
      kids.push_back(Cont{C.tok, C.cnt, State{c, 0}});
    }
    if (X.open && !is_heavy(X) && child_count(X) != nlive + nz)
      throw AssertErr{"light node child count " + std::to_string(child_count(X)) + " != " + std::to_string(nlive)};
    if (is_heavy(X)) {
      ++heavy_seen;
      if (!X.open) throw AssertErr{"closed node marked heavy"};
      const int32_t e = heavy_entry(X);
      if (e < 0 || (size_t)e >= heavy_.size()) throw AssertErr{"heavy node without an entry"};
      const Heavy& H = heavy_[e];
      if (entry_used[e]++) throw AssertErr{"heavy entry shared by two nodes"};
      if (H.sum != sum) throw AssertErr{"heavy sum mismatch"};
      if ((int64_t)H.zombies != nz) throw AssertErr{"heavy zombie count mismatch"};
      if (H.nlive != nlive) throw AssertErr{"heavy live-children count mismatch"};
      std::vector<uint8_t> inbuf(kids.size(), 0);
      for (int i = 0; i < H.ntop; ++i) {
        const TopEnt& t = H.top[i];
        if (i && !ent_before(H.top[i - 1], t)) throw AssertErr{"heavy buffer out of order"};
        size_t j = 0;
        while (j < kids.size() && kids[j].next.node != t.node) ++j;
        if (j == kids.size() || kids[j].cnt != t.cnt || kids[j].tok != t.tok || inbuf[j]++)
          throw AssertErr{"heavy buffer entry is not a live child"};
      }
      for (size_t j = 0; j < kids.size(); ++j)
        if (!inbuf[j] && kids[j].cnt > H.bound) throw AssertErr{"child outside the buffer above the bound"};
      std::sort(kids.begin(), kids.end(), cont_before);
      for (int k = 1; k <= TOPN; ++k) {
        if (!heavy_exact(H, k)) continue;
        const int m = (int)std::min<size_t>(k, kids.size());
        for (int i = 0; i < m; ++i)
          if (H.top[i].node != kids[i].next.node) throw AssertErr{"heavy top mismatch"};
      }
    }
  }
  if (zombies != (size_t)zombies_) throw AssertErr{"zombie count mismatch"};
  if (children_total != (size_t)num_nodes() - 1 + zombies) throw AssertErr{"linked children != live nodes - 1"};
  if (table_.count() != children_total - zombies) throw AssertErr{"hash table count != live nodes - 1"};
  table_.check(nodes_);
  if (heavy_seen != heavy_nodes()) throw AssertErr{"heavy entries in use != heavy nodes"};
  for (uint8_t u : entry_used)
    if (u != 1) throw AssertErr{"heavy entry leaked or shared"};
}

}  // namespace specdraft
