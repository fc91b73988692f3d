// Depth-bounded suffix trie with occurrence counts and lazy leaves: the native twin of
// proposers/suffix_index.py. Every count, tie-break and query answer follows the Python file
// (tests/test_native_twin.py compares the two on what callers see: walks, continuations and
// their counts, match lengths, drafts). Node ids are private: they are allocated, freed and
// renumbered (compact()) independently of the twin's.
//
// Layout (chosen for random-access speed and bytes per cached token); each part is documented in
// its own header:
//  * node_store.h: 32-byte node records in fixed-size pages, and the accessors for the two
//    fields whose meaning depends on the node's state (occurrence / suffix link / heavy entry /
//    child count).
//  * child_table.h: one open-addressing (parent, token) -> child hash table for the whole trie.
//  * heavy_topk.h: high-fanout nodes' entries (exact child-count sums and a top-k buffer with a
//    bound), so drafting from them reads one entry instead of walking their children.
//  * index_errors.h: error types, profiling counters, test switches; index_checks.h: check().
// In this file:
//  * suffix links let the drafter re-anchor at the depth cap, and the global matcher drop a
//    context's first token, without walking from the root.
//  * free list of node ids (LIFO). Removal visits positions window-wise with prefetching; dead
//    children of heavy parents stay linked as zombies (count 0, out of the hash table) until a
//    quarter of the list is dead; an empty index gives all its memory back; compact() renumbers.
//  * sequences: std::vector<int32_t> per slot; a live (appendable) sequence also holds its
//    window of max_depth node ids.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "child_table.h"
#include "heavy_topk.h"
#include "index_errors.h"
#include "node_store.h"

namespace specdraft {

class SuffixIndex {
 public:
  explicit SuffixIndex(int max_depth = 24, uint32_t initial_slots = 64, int page_shift = 12)
      : D_(max_depth), nodes_(page_shift) {
    if (max_depth < 1) throw ValueErr{"max_depth must be >= 1, got " + std::to_string(max_depth)};
    if (max_depth > kMaxDepthLimit)
      throw ValueErr{"max_depth must be <= " + std::to_string(kMaxDepthLimit) + " in the native index, got " +
                     std::to_string(max_depth)};
    uint32_t s = 16;
    while (s < initial_slots && s < (1u << 30)) s <<= 1;
    init_slots_ = s;
    reset();
  }

  int max_depth() const { return D_; }
  // changes when nodes may have been freed or renumbered (remove, compact), not on appends: a
  // state taken before appends still names the same gram, except (node, extra > 0) once node opened
  uint64_t shape_version() const { return shape_version_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_nodes() const { return (int64_t)nodes_.size() - (int64_t)free_.size() - zombies_; }

  // ----------------------------------------------------------------- sequences (by caller id)
  int32_t slot_of(int64_t seq) const {
    auto it = ids_.find(seq);
    if (it == ids_.end()) throw KeyErr{seq, ""};
    return it->second;
  }

  int32_t add_sequence(int64_t seq) {
    if (ids_.count(seq)) throw KeyErr{seq, "sequence " + std::to_string(seq) + " already in the index"};
    int32_t si;
    if (!free_seqs_.empty()) {
      si = free_seqs_.back();
      free_seqs_.pop_back();
    } else {
      si = (int32_t)seqs_.size();
      seqs_.emplace_back();
    }
    Seq& S = seqs_[si];
    S.id = seq;
    S.used = true;
    S.toks.clear();
    S.window.assign(D_, -1);
    S.window[0] = kRoot;
    S.live = true;
    ids_.emplace(seq, si);
    return si;
  }

  void append(int64_t seq, int32_t token) { append_slot(slot_of(seq), token); }

  void extend(int64_t seq, const int32_t* toks, size_t n) { extend_slot(slot_of(seq), toks, n); }

  void extend_slot(int32_t si, const int32_t* toks, size_t n) {
    Seq& S = seqs_[si];
    if (!S.live) throw KeyErr{S.id, ""};
    if (S.toks.size() + n > S.toks.capacity()) S.toks.reserve(std::max(S.toks.size() + n, 2 * S.toks.size()));
    for (size_t i = 0; i + 1 < n; ++i) append_slot(si, toks[i], toks[i + 1]);
    if (n) append_slot(si, toks[n - 1]);
  }

  void close(int64_t seq) {
    auto it = ids_.find(seq);
    if (it == ids_.end()) return;  // Python: windows.pop(seq, None)
    Seq& S = seqs_[it->second];
    S.live = false;
    std::vector<int32_t>().swap(S.window);
    S.toks.shrink_to_fit();
  }

  const std::vector<int32_t>& tokens_of_slot(int32_t si) const { return seqs_[si].toks; }
  const std::vector<int32_t>& tokens(int64_t seq) const { return seqs_[slot_of(seq)].toks; }

  // Python SuffixIndex.append. `next`: the token the caller appends after this one, when known
  // (-1: not known); each level's hash slot for it is prefetched as soon as the level's node is
  // found, so the next append's lookups find their slots on the way.
  void append_slot(int32_t si, int32_t token, int32_t next = -1) {
    Seq& S = seqs_[si];
    if (!S.live) throw KeyErr{S.id, ""};
    const int32_t pos = (int32_t)S.toks.size();
    S.toks.push_back(token);
    num_tokens_ += 1;
    SD_COUNT(C_APPEND, 1);
    const int D = D_;
    int32_t* w = S.window.data();  // windows of *other* sequences may change below, never this one
    prefetch_levels(w, token);
    int32_t a_next = w[0];
    int32_t prev = kRoot;  // node of the k-gram ending at pos (level k-1's result): c's suffix
    for (int k = 0; k < D; ++k) {
      const int32_t a = a_next;
      if (k + 1 < D) a_next = w[k + 1];
      int32_t c = -1;
      if (a >= 0 && nodes_[a].open) {
        SD_COUNT(C_APPEND_LEVELS, 1);
        c = find_child(a, token);
        if (c < 0) {
          c = new_node(token, a, si, pos);
          if (is_heavy(nodes_[a]))
            heavy_child_up(a, c, true);
          else if (child_count(nodes_[a]) > heavy_threshold())
            heavy_promote(a);
        } else {
          // The twin also moves c's ref to this occurrence; c is open from here on, and an
          // open node's ref is never read, so that write is left out (the field holds the link).
          if (!nodes_[c].open) open_node(c, si, pos, prev);
          nodes_[c].cnt += 1;
          if (is_heavy(nodes_[a])) heavy_child_up(a, c, false);
        }
      }
      if (k + 1 < D) w[k + 1] = c;
      if (next >= 0 && c > 0 && nodes_[c].open) __builtin_prefetch(&table_.slots()[table_.home(c, next)]);
      prev = c;
    }
    w[0] = kRoot;
    nodes_[kRoot].cnt += 1;
  }

  // Python SuffixIndex.remove
  void remove(int64_t seq) {
    int32_t si = slot_of(seq);
    Seq& S = seqs_[si];
    S.live = false;
    const std::vector<int32_t>& s = S.toks;
    const int D = D_;
    const int64_t n = (int64_t)s.size();
    std::vector<int32_t> dead;
    // The twin's walks (one per start position), 16 at a time in lockstep so their cache misses
    // overlap: each round prefetches every walk's hash slot, then its candidate child, then takes
    // one step in each. The decrements are the twin's; only the order in which dead nodes are
    // found differs, and nothing outside depends on it (node ids are private).
    constexpr int kWalks = 16;
    struct Walk {
      int64_t j, end;
      int32_t cur;
    } ws[kWalks];
    int64_t next_i = 0;
    int live = 0;
    while (live < kWalks && next_i < n) {
      ws[live++] = Walk{next_i, std::min<int64_t>(next_i + D, n), kRoot};
      ++next_i;
    }
    const uint32_t* sl = table_.slots();
    size_t hs[kWalks];
    while (live > 0) {
      for (int k = 0; k < live; ++k) {
        hs[k] = table_.home(ws[k].cur, s[ws[k].j]);
        __builtin_prefetch(&sl[hs[k]]);
      }
      for (int k = 0; k < live; ++k) {
        const uint32_t v = table_.id_of(sl[hs[k]]);
        if (v) __builtin_prefetch(&nodes_[v]);
        const Node& P = nodes_[ws[k].cur];
        if (is_heavy(P)) __builtin_prefetch(&heavy_[heavy_entry(P)]);
      }
      for (int k = 0; k < live;) {
        Walk& w = ws[k];
        const int32_t c = find_child(w.cur, s[w.j]);
        if (c < 0) throw AssertErr{"remove: missing child (index corrupted)"};
        Node& C = nodes_[c];
        C.cnt -= 1;
        if (C.cnt == 0) dead.push_back(c);
        if (is_heavy(nodes_[w.cur])) heavy_child_down(w.cur, c);
        if (C.open && ++w.j < w.end) {
          w.cur = c;
          ++k;
        } else if (next_i < n) {
          w = Walk{next_i, std::min<int64_t>(next_i + D, n), kRoot};
          ++next_i;
          ++k;
        } else {
          w = ws[--live];
        }
      }
    }
    nodes_[kRoot].cnt -= (int32_t)n;
    num_tokens_ -= n;
    shape_version_ += 1;
    free_dead(dead);
    // drop the sequence
    ids_.erase(seq);
    std::vector<int32_t>().swap(S.toks);
    std::vector<int32_t>().swap(S.window);
    S.used = false;
    free_seqs_.push_back(si);
    if (ids_.empty()) shrink_when_empty();
  }

  // ------------------------------------------------------------------------------- queries
  // Python SuffixIndex.walk; tokens[0..n)
  State walk(const int32_t* tokens, int64_t n) const {
    SD_COUNT(C_WALK, 1);
    int32_t cur = kRoot;
    for (int64_t i = 0; i < n; ++i) {
      const Node& N = nodes_[cur];
      if (!N.open) {
        const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
        const int64_t p = occ_pos(N);
        const int64_t extra = n - i;
        if (p + extra >= (int64_t)s.size()) return State{};
        const int32_t* sp = s.data() + p + 1;
        for (int64_t j = 0; j < extra; ++j)
          if (sp[j] != tokens[i + j]) return State{};
        return State{cur, (int32_t)extra};
      }
      int32_t c = find_child(cur, tokens[i]);
      if (c < 0) return State{};
      cur = c;
    }
    return State{cur, 0};
  }

  // walk(G + tokens) given st = walk(G) (valid), without re-walking G.
  State walk_from(State st, const int32_t* tokens, int64_t n) const {
    int32_t cur = st.node;
    int64_t base = st.extra;
    int64_t i = 0;
    if (base == 0) {
      for (; i < n; ++i) {
        if (!nodes_[cur].open) break;
        int32_t c = find_child(cur, tokens[i]);
        if (c < 0) return State{};
        cur = c;
      }
      if (i == n) return State{cur, 0};
    }
    const Node& N = nodes_[cur];
    const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
    const int64_t rest = n - i;
    const int64_t p = (int64_t)occ_pos(N) + base;
    if (p + rest >= (int64_t)s.size()) return State{};
    const int32_t* sp = s.data() + p + 1;
    for (int64_t j = 0; j < rest; ++j)
      if (sp[j] != tokens[i + j]) return State{};
    return State{cur, (int32_t)(base + rest)};
  }

  void prefetch_state(State st) const {
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) {
      if (is_heavy(N))
        __builtin_prefetch(&heavy_[heavy_entry(N)]);
      else if (N.first_child >= 0)
        __builtin_prefetch(&nodes_[N.first_child]);
    } else {
      const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
      const int64_t p = (int64_t)occ_pos(N) + st.extra + 1;
      if (p < (int64_t)s.size()) __builtin_prefetch(s.data() + p);
    }
  }

  // State of gram[1:] given st, the (valid, non-root) state of a gram that ends just before
  // tokens[end]. An open node's suffix is its link; a closed node X (or a state past it) is
  // re-derived from its parent's link: gram(X)[1:] is the child tok(X) of link(par(X)), then the
  // state's extra tokens, tokens[end - extra, end), are walked from there. Invalid on failure.
  State suffix_state(State st, const int32_t* tokens, int64_t end) const {
    const Node& X = nodes_[st.node];
    if (X.open && st.extra == 0) {
      const int32_t y = suffix_link(X);
      return y >= 0 ? State{y, 0} : State{};
    }
    State base{kRoot, 0};
    if (X.par != kRoot) {
      const Node& P = nodes_[X.par];
      if (!P.open || suffix_link(P) < 0) return State{};
      const int32_t y = find_child(suffix_link(P), X.tok);
      if (y < 0) return State{};
      base = State{y, 0};
    }
    if (st.extra == 0) return base;
    return walk_from(base, tokens + (end - st.extra), st.extra);
  }

  bool has_live_child(int32_t node) const {
    const Node& N = nodes_[node];
    if (is_heavy(N)) return heavy_of(node).sum > 0;  // zombies may still be linked
    return N.first_child >= 0;
  }

  // Does the state have at least one continuation?  (bool(continuations(state)))
  bool has_cont(State st) const {
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) return has_live_child(st.node);
    const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
    return (int64_t)occ_pos(N) + st.extra + 1 < (int64_t)s.size();
  }

  int64_t state_depth(State st) const { return (int64_t)nodes_[st.node].dep + st.extra; }
  bool is_open(int32_t node) const { return nodes_[node].open != 0; }

  // longest_match(gram(x), dep(x) - 1) for an open node x, following suffix links: the suffixes
  // of an open node's gram are open nodes, so walk(gram[-L:]) is (link^(dep-L)(x), 0).
  // Returns false when a link is missing (then the caller walks).
  bool suffix_match(int32_t x, State& out, int64_t& len) const {
    int32_t y = suffix_link(nodes_[x]);
    for (int64_t L = (int64_t)nodes_[x].dep - 1; L > 0; --L) {
      if (y <= 0 || !nodes_[y].open || nodes_[y].dep != L) return false;
      if (has_live_child(y)) {
        out = State{y, 0};
        len = L;
        return true;
      }
      y = suffix_link(nodes_[y]);
    }
    out = State{};
    len = 0;
    return true;
  }
  int depth_of(int32_t node) const { return nodes_[node].dep; }

  // All continuations, most frequent first, ties by smaller token (Python continuations()).
  void continuations(State st, std::vector<Cont>& out) const {
    out.clear();
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) {
      for (int32_t c = N.first_child; c >= 0; c = nodes_[c].next_sib)
        if (nodes_[c].cnt > 0) out.push_back(Cont{nodes_[c].tok, nodes_[c].cnt, State{c, 0}});
      std::sort(out.begin(), out.end(), cont_before);
      return;
    }
    const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
    const int64_t p = (int64_t)occ_pos(N) + st.extra + 1;
    if (p >= (int64_t)s.size()) return;
    out.push_back(Cont{s[p], 1, State{st.node, st.extra + 1}});
  }

  // The first `k` (>= 0) continuations in continuations() order (Python slice [:k]) and the sum
  // of all continuation counts. Returns the number of continuations.
  int64_t top_continuations(State st, int64_t k, std::vector<Cont>& out, int64_t& total) {
    out.clear();
    total = 0;
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) {
      const int32_t node = st.node;
      if (is_heavy(N) && k <= TOPN) {
        Heavy& H = heavy_of(node);
        SD_COUNT(C_HEAVY_Q, 1);
        if (!heavy_exact(H, (int)k)) heavy_rescan(node, H);
        total = H.sum;
        const int m = (int)std::min<int64_t>(k, H.ntop);
        for (int i = 0; i < m; ++i) out.push_back(Cont{H.top[i].tok, H.top[i].cnt, State{H.top[i].node, 0}});
        return H.nlive;
      }
      int64_t n = 0;
      SD_COUNT(C_ENUM, 1);
      for (int32_t c = N.first_child; c >= 0;) {
        SD_COUNT(C_ENUM_CHILDREN, 1);
        const Node& C = nodes_[c];
        if (C.cnt > 0) {
          total += C.cnt;
          out.push_back(Cont{C.tok, C.cnt, State{c, 0}});
          ++n;
        }
        c = C.next_sib;
      }
      if (n > heavy_threshold() && !is_heavy(N)) heavy_promote(node);
      if (n > k) {
        std::nth_element(out.begin(), out.begin() + k, out.end(), cont_before);
        out.resize((size_t)k);
      }
      std::sort(out.begin(), out.end(), cont_before);
      return n;
    }
    const std::vector<int32_t>& s = seqs_[occ_seq(N)].toks;
    const int64_t p = (int64_t)occ_pos(N) + st.extra + 1;
    if (p >= (int64_t)s.size()) return 0;
    total = 1;
    if (k > 0) out.push_back(Cont{s[p], 1, State{st.node, st.extra + 1}});
    return 1;
  }

  // Python longest_match: longest suffix of ctx[0..n) (at most hi tokens) that occurred with a
  // continuation. Returns the state (invalid if none) and sets len.
  State longest_match(const int32_t* ctx, int64_t n, int64_t hi, int64_t& len) const {
    int64_t L = std::min<int64_t>(std::min<int64_t>(hi, D_), n);
    while (L > 0) {
      State st = walk(ctx + (n - L), L);
      if (st.valid() && has_cont(st)) {
        len = L;
        return st;
      }
      --L;
    }
    len = 0;
    return State{};
  }

  // Same answer as longest_match(seq, hi) where ctx is the whole sequence of live slot `si`, read
  // from the sequence's window. Valid for an index where `si` is the only sequence ever appended
  // and nothing is removed (a request's local index): then window[L] is the node of the L-gram
  // ending at the last position whenever that node is materialised, and an L-gram whose node is
  // not materialised (or is closed) has its only occurrence here, at the end, so no continuation.
  // L = max_depth never has one either: its node is not materialised or closed (only occurrence
  // here), or open at the depth cap, where nodes have no children.
  State longest_match_tail(int32_t si, int64_t hi, int64_t& len) const {
    const Seq& S = seqs_[si];
    const int64_t n = (int64_t)S.toks.size();
    int64_t L = std::min<int64_t>(std::min<int64_t>(hi, D_ - 1), n);
    const int32_t* w = S.window.data();
    for (; L > 0; --L) {
      const int32_t c = w[L];
      if (c >= 0 && nodes_[c].open && has_live_child(c)) {
        len = L;
        return State{c, 0};
      }
    }
    len = 0;
    return State{};
  }

  // ---------------------------------------------------------------------------- accounting
  size_t memory_bytes() const {
    size_t b = sizeof(*this);
    b += nodes_.capacity() * sizeof(Node) + nodes_.page_table_bytes();
    b += table_.memory_bytes();
    b += free_.capacity() * sizeof(int32_t);
    b += free_seqs_.capacity() * sizeof(int32_t);
    b += seqs_.capacity() * sizeof(Seq);
    for (const Seq& S : seqs_) b += S.toks.capacity() * sizeof(int32_t) + S.window.capacity() * sizeof(int32_t);
    // unordered_maps: one heap node per entry plus the bucket array
    b += ids_.size() * (sizeof(std::pair<const int64_t, int32_t>) + 2 * sizeof(void*)) +
         ids_.bucket_count() * sizeof(void*);
    b += heavy_.memory_bytes();
    return b;
  }
  size_t node_capacity() const { return nodes_.size(); }
  size_t node_reserved() const { return nodes_.capacity(); }
  size_t slot_count() const { return table_.slot_count(); }
  int64_t zombies() const { return zombies_; }
  size_t free_nodes() const { return free_.size(); }
  size_t heavy_nodes() const { return heavy_.in_use(); }

  // Renumber live nodes breadth-first (siblings contiguous), drop zombies and the free list,
  // shrink the node array and the hash table. Node ids change.
  void compact() {
    const size_t live = (size_t)num_nodes();
    std::vector<int32_t> order;
    order.reserve(live);
    std::vector<int32_t> newid(nodes_.size(), -1);
    order.push_back(kRoot);
    newid[kRoot] = 0;
    for (size_t h = 0; h < order.size(); ++h) {
      for (int32_t c = nodes_[order[h]].first_child; c >= 0; c = nodes_[c].next_sib) {
        if (nodes_[c].cnt <= 0) continue;  // zombie
        newid[c] = (int32_t)order.size();
        order.push_back(c);
      }
    }
    if (order.size() != live) throw AssertErr{"compact: unreachable live nodes"};
    NodeStore nn(nodes_.page_shift());
    for (int32_t o : order) {
      Node x = nodes_[o];
      x.par = x.par >= 0 ? newid[x.par] : -1;
      x.first_child = -1;
      x.next_sib = -1;
      x.flags = 0;  // heavy entries are rebuilt below
      if (x.open) {
        const int32_t link = suffix_link(x);
        set_suffix_link(x, link >= 0 ? newid[link] : -1);
        set_child_count(x, 0);  // counted below
      }
      nn.push_back(x);
    }
    // relink children in BFS order (each parent's children are contiguous)
    for (size_t i = order.size(); i-- > 1;) {
      Node& X = nn[i];
      Node& P = nn[X.par];
      X.next_sib = P.first_child;
      P.first_child = (int32_t)i;
      set_child_count(P, child_count(P) + 1);
    }
    nodes_.swap(nn);
    std::vector<int32_t>().swap(free_);
    zombies_ = 0;
    heavy_.clear();
    for (Seq& S : seqs_)
      if (S.used && S.live)
        for (int32_t& v : S.window)
          if (v >= 0) v = newid[v];
    table_.rebuild(nodes_, ChildTable::capacity_for(live));
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].open && child_count(nodes_[i]) > heavy_threshold()) heavy_promote((int32_t)i);
    shape_version_ += 1;
  }

  // Python check(): verify invariants (and the native structures); throws AssertErr.
  // Defined in index_checks.h.
  void check() const;

  // Warm the cache for one append: the window's nodes and their hash slots for `token`.
  void prefetch_levels(const int32_t* w, int32_t token) const {
    const uint32_t* sl = table_.slots();
    size_t h[64];
    int m = 0;
    for (int k = 0; k < D_; ++k) {
      const int32_t a = w[k];
      if (a < 0) continue;
      __builtin_prefetch(&nodes_[a]);
      const size_t i = table_.home(a, token);
      __builtin_prefetch(&sl[i]);
      if (m < 64) h[m++] = i;
    }
    // second stage: the first candidate child of each level
    for (int j = 0; j < m; ++j) {
      const uint32_t v = table_.id_of(sl[h[j]]);
      if (v) __builtin_prefetch(&nodes_[v]);
    }
  }

  inline int32_t find_child(int32_t parent, int32_t token) const { return table_.find(nodes_, parent, token); }

 private:
  struct Seq {
    std::vector<int32_t> toks;
    std::vector<int32_t> window;  // max_depth entries while live
    int64_t id = 0;
    bool live = false;
    bool used = false;
  };

  Heavy& heavy_of(int32_t node) { return heavy_[heavy_entry(nodes_[node])]; }
  const Heavy& heavy_of(int32_t node) const { return heavy_[heavy_entry(nodes_[node])]; }

  void reset() {
    nodes_.clear();
    Node r{};
    r.tok = -1;
    r.cnt = 0;
    r.par = -1;
    r.first_child = -1;
    r.next_sib = -1;
    r.dep = 0;
    r.open = 1;
    r.flags = 0;
    set_suffix_link(r, -1);
    set_child_count(r, 0);
    nodes_.push_back(r);
    std::vector<int32_t>().swap(free_);
    zombies_ = 0;
    heavy_.clear();
    table_.reset(init_slots_);
  }

  // Every sequence removed: only the root is left; give the memory back (ids restart).
  void shrink_when_empty() {
    int32_t rc = nodes_[kRoot].cnt;
    reset();
    nodes_[kRoot].cnt = rc;
    std::vector<Seq>().swap(seqs_);
    std::vector<int32_t>().swap(free_seqs_);
    std::unordered_map<int64_t, int32_t>().swap(ids_);
    shape_version_ += 1;
  }

  // ---------------------------------------------------------------------------- heavy nodes
  // Give a node with many children its heavy entry (scans its children once).
  void heavy_promote(int32_t node) {
    int64_t total = 0;
    scratch_.clear();
    for (int32_t c = nodes_[node].first_child; c >= 0; c = nodes_[c].next_sib) {
      const Node& C = nodes_[c];
      if (C.cnt <= 0) continue;
      total += C.cnt;
      scratch_.push_back(Cont{C.tok, C.cnt, State{c, 0}});
    }
    const int32_t e = heavy_.acquire();
    heavy_fill(heavy_[e], scratch_, total);
    set_heavy_entry(nodes_[node], e);
  }

  // Recompute the buffer from the children; also unlink and free zombies.
  void heavy_rescan(int32_t node, Heavy& H) {
    scratch_.clear();
    int64_t sum = 0;
    int32_t* link = &nodes_[node].first_child;
    while (*link >= 0) {
      const int32_t c = *link;
      Node& C = nodes_[c];
      if (C.flags & F_ZOMBIE) {
        *link = C.next_sib;
        release_node(c);
        zombies_ -= 1;
        continue;
      }
      sum += C.cnt;
      scratch_.push_back(Cont{C.tok, C.cnt, State{c, 0}});
      link = &C.next_sib;
    }
    H.zombies = 0;
    heavy_fill(H, scratch_, sum);
  }

  // child c of heavy node a gained one occurrence (is_new: c was just created with count 1)
  void heavy_child_up(int32_t a, int32_t c, bool is_new) {
    const Node& C = nodes_[c];
    specdraft::heavy_child_up(heavy_of(a), c, C.tok, C.cnt, is_new);
  }

  // child c of heavy node a lost one occurrence (its count is already decremented)
  void heavy_child_down(int32_t a, int32_t c) { specdraft::heavy_child_down(heavy_of(a), c, nodes_[c].cnt); }

  void heavy_release(int32_t node) { heavy_.release(take_heavy_entry(nodes_[node])); }

  // --------------------------------------------------------------------------------- nodes
  int32_t new_node(int32_t token, int32_t parent, int32_t si, int32_t pos) {
    SD_COUNT(C_NEW_NODE, 1);
    const uint16_t d = (uint16_t)(nodes_[parent].dep + 1);
    int32_t n;
    if (!free_.empty()) {
      n = free_.back();
      free_.pop_back();
    } else {
      n = (int32_t)nodes_.size();
      nodes_.emplace_back();
    }
    Node& X = nodes_[n];
    X.tok = token;
    X.cnt = 1;
    X.par = parent;
    X.first_child = -1;
    X.dep = d;
    X.open = 0;
    X.flags = 0;
    set_occurrence(X, si, pos);
    Node& P = nodes_[parent];
    X.next_sib = P.first_child;
    P.first_child = n;
    if (!is_heavy(P)) set_child_count(P, child_count(P) + 1);
    table_.insert(nodes_, n);
    return n;
  }

  // Python _open: second occurrence of a closed node; `link` is its suffix node
  void open_node(int32_t node, int32_t cur_seq, int32_t cur_pos, int32_t link) {
    Node& X = nodes_[node];
    const int32_t rs = occ_seq(X);
    const int64_t rp = (int64_t)occ_pos(X) + 1;
    X.open = 1;
    set_suffix_link(X, link);
    set_child_count(X, 0);  // no children yet
    if (X.dep >= D_) return;
    const std::vector<int32_t>& s = seqs_[rs].toks;
    if (rp >= (int64_t)s.size() || (rs == cur_seq && rp >= cur_pos)) return;
    const int32_t child = new_node(s[rp], node, rs, (int32_t)rp);
    if (child_count(nodes_[node]) > heavy_threshold()) heavy_promote(node);  // threshold 0 (tests)
    if (rp == (int64_t)s.size() - 1) {
      Seq& R = seqs_[rs];
      const int cd = nodes_[child].dep;
      if (R.live && cd < D_) R.window[cd] = child;
    }
  }

  // Put a dead (unlinked, out of the hash table) node on the free list, Python's free state.
  void release_node(int32_t c) {
    Node& X = nodes_[c];
    if (is_heavy(X)) heavy_release(c);
    X.tok = -1;
    X.par = -1;
    clear_refs(X);
    X.first_child = -1;
    X.next_sib = -1;
    X.open = 0;
    X.cnt = 0;
    X.flags = 0;
    free_.push_back(c);
  }

  void free_dead(std::vector<int32_t>& dead) {
    if (dead.empty()) return;
    for (int32_t c : dead) table_.erase(nodes_, c);
    // Dead children of live parents must leave their parent's list. Light parents: one filtering
    // pass each. Heavy parents: the child stays linked as a zombie until zombies make up a
    // quarter of the list, then one pass unlinks them all.
    std::vector<int32_t> parents;
    heavy_touched_.clear();
    for (int32_t c : dead) {
      const int32_t p = nodes_[c].par;
      Node& P = nodes_[p];
      if (!(p == kRoot || P.cnt > 0)) continue;  // the parent dies too
      if (is_heavy(P)) {
        Node& C = nodes_[c];
        C.flags |= F_ZOMBIE;
        zombies_ += 1;
        Heavy& H = heavy_of(p);
        H.zombies += 1;
        if (!(P.flags & F_MARK)) {
          P.flags |= F_MARK;
          heavy_touched_.push_back(p);
        }
        continue;
      }
      if (!(P.flags & F_MARK)) {
        P.flags |= F_MARK;
        parents.push_back(p);
      }
    }
    for (int32_t p : parents) {  // light parents
      Node& P = nodes_[p];
      P.flags &= (uint8_t)~F_MARK;
      int32_t* link = &P.first_child;
      int32_t kept = 0;
      while (*link >= 0) {
        Node& C = nodes_[*link];
        if (C.cnt == 0) {
          *link = C.next_sib;
        } else {
          link = &C.next_sib;
          ++kept;
        }
      }
      set_child_count(P, kept);
    }
    // a dead heavy node may still hold zombies from earlier evictions: free them (its list is
    // intact until the loop below)
    for (int32_t c : dead) {
      const Node& X = nodes_[c];
      if (!is_heavy(X) || heavy_of(c).zombies == 0) continue;
      for (int32_t k = X.first_child; k >= 0;) {
        const int32_t next = nodes_[k].next_sib;
        if (nodes_[k].flags & F_ZOMBIE) {
          release_node(k);
          zombies_ -= 1;
        }
        k = next;
      }
      heavy_of(c).zombies = 0;
    }
    for (int32_t c : dead) {
      Node& X = nodes_[c];
      if (X.flags & F_ZOMBIE) {
        if (is_heavy(X)) heavy_release(c);
        X.first_child = -1;  // its own children are dead and freed with this batch
        X.open = 0;
        continue;
      }
      release_node(c);
    }
    for (int32_t p : heavy_touched_) {
      Node& P = nodes_[p];
      P.flags &= (uint8_t)~F_MARK;
      Heavy& H = heavy_of(p);
      if ((int64_t)H.zombies > std::min(16, heavy_threshold()) && (int64_t)H.zombies * 4 > (int64_t)H.nlive + H.zombies)
        heavy_rescan(p, H);
    }
  }

  int D_;
  uint32_t init_slots_;
  NodeStore nodes_;
  std::vector<int32_t> free_;
  int64_t zombies_ = 0;
  ChildTable table_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_seqs_;
  std::unordered_map<int64_t, int32_t> ids_;
  HeavyPool heavy_;
  std::vector<Cont> scratch_;
  std::vector<int32_t> heavy_touched_;
  int64_t num_tokens_ = 0;
  uint64_t shape_version_ = 0;
};

}  // namespace specdraft

#include "index_checks.h"  // SuffixIndex::check()
