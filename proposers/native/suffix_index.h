// Depth-bounded suffix trie with occurrence counts and lazy leaves: the native twin of
// proposers/suffix_index.py. Every count, tie-break and query answer follows the Python file, and
// in exact-id mode (the SuffixIndex binding) so does node allocation, so node ids match too
// (tests/test_native_twin.py).
//
// Layout (chosen for random-access speed and bytes per cached token):
//  * nodes: 32-byte records in fixed-size pages (growth never copies), so every field a visit
//    touches shares one cache line: tok, cnt, par, ref_seq, ref_pos, first_child, next_sib,
//    dep (uint16), open, flags. A closed node's (ref_seq, ref_pos) is its single occurrence
//    (ref_seq: an internal sequence *slot*, dense and reused, not the caller's id). An open
//    node's ref is never read by the twin's algorithms (the twin keeps writing it; those writes
//    are left out here), so there ref_seq holds the node's suffix link (the node of its gram
//    without the first token) and ref_pos its heavy entry, or (light node) its child count.
//  * children: ONE open-addressing hash table for the whole trie, keyed by (parent, token),
//    Fibonacci hashing, linear probing, power-of-two capacity, load <= 1/2, backward-shift
//    deletion (no tombstones). A slot holds only the child id (4 bytes); the key is read back
//    from the child's record, which a successful lookup reads anyway. Children of a node are
//    also chained through first_child / next_sib so continuations can be enumerated.
//  * high-fanout ("heavy") nodes, more than heavy_threshold() children: a 128-byte entry keeps
//    the exact sum and number of their children's counts and a buffer of their best TOPN
//    candidates (count desc, token asc) with an upper bound on the count of every child outside
//    the buffer, all updated on every count change. The first k buffered children are provably
//    the top k while the k-th beats the bound, so drafting from such a node reads its entry (two
//    cache lines) instead of walking its children; only when evictions erode that margin does
//    the next query rescan them.
//  * suffix links let the drafter re-anchor at the depth cap, and the global matcher drop a
//    context's first token, without walking from the root.
//  * free list of node ids, LIFO like the Python twin. In exact-id mode dead nodes are unlinked
//    and freed immediately in the twin's order. In private-id mode (SuffixCore's global index,
//    whose ids are never exposed) removal visits positions window-wise with prefetching, dead
//    children of heavy parents stay linked as zombies (count 0, out of the hash table) until a
//    quarter of the list is dead, an empty index gives all its memory back, and compact() may
//    renumber.
//  * sequences: std::vector<int32_t> per slot; a live (appendable) sequence also holds its
//    window of max_depth node ids.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace specdraft {

// Profiling counters, compiled in only with -DSPECDRAFT_COUNTERS (read by _suffix_native._counters()).
#ifdef SPECDRAFT_COUNTERS
inline uint64_t g_counters[16];
#define SD_COUNT(i, v) (::specdraft::g_counters[i] += (v))
#else
#define SD_COUNT(i, v) ((void)0)
#endif
enum { C_FIND, C_WALK, C_WALK_LEVELS, C_ENUM, C_ENUM_CHILDREN, C_HEAVY_Q, C_GLOBAL_FINDS, C_DRAFTS, C_LEN_G,
       C_LEN_L, C_REANCHOR, C_APPEND, C_APPEND_LEVELS, C_NEW_NODE, C_PROBES };

constexpr int32_t kRoot = 0;
constexpr int kMaxDepthLimit = 65535;
constexpr int TOPN = 8;  // candidates buffered per heavy node (max_children <= TOPN uses them)

// Tests only: cross-check fast paths against the plain algorithms (throws AssertErr on mismatch).
inline bool& debug_checks() {
  static bool on = false;
  return on;
}

// Nodes with more children than this get a heavy entry (tests lower it to exercise the paths).
inline int& heavy_threshold() {
  static int t = 4;
  return t;
}

// Python-visible errors, translated by the bindings.
struct KeyErr {
  int64_t key;
  std::string msg;  // empty: KeyError(key) like a dict lookup; else KeyError(msg)
};
struct ValueErr {
  std::string msg;
};
struct AssertErr {
  std::string msg;
};

enum : uint8_t { F_MARK = 1, F_HEAVY = 2, F_ZOMBIE = 4 };

struct Node {
  int32_t tok;
  int32_t cnt;
  int32_t par;
  int32_t ref_seq;  // closed: internal sequence slot; open: suffix link
  int32_t ref_pos;  // closed: position; open: heavy entry, or the number of children (light)
  int32_t first_child;
  int32_t next_sib;
  uint16_t dep;
  uint8_t open;
  uint8_t flags;  // F_MARK (scratch, 0 between calls), F_HEAVY, F_ZOMBIE
};
static_assert(sizeof(Node) == 32, "Node must stay 32 bytes");

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

struct State {
  int32_t node = -1;  // -1: None
  int32_t extra = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const State& o) const { return node == o.node && extra == o.extra; }
};

struct Cont {
  int32_t tok;
  int32_t cnt;
  State next;
};

// ascending order == continuations() order: count desc, token asc
inline bool cont_before(const Cont& a, const Cont& b) { return a.cnt != b.cnt ? a.cnt > b.cnt : a.tok < b.tok; }

class SuffixIndex {
 public:
  explicit SuffixIndex(int max_depth = 24, uint32_t initial_slots = 64, bool private_ids = false,
                       int page_shift = 12)
      : D_(max_depth), private_ids_(private_ids), nodes_(page_shift) {
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
  uint64_t version() const { return version_; }  // changes with every update
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
    for (size_t i = 0; i < n; ++i) append_slot(si, toks[i]);
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
  void reserve_tokens(int32_t si, size_t n) { seqs_[si].toks.reserve(seqs_[si].toks.size() + n); }

  // Python SuffixIndex.append
  void append_slot(int32_t si, int32_t token) {
    Seq& S = seqs_[si];
    if (!S.live) throw KeyErr{S.id, ""};
    const int32_t pos = (int32_t)S.toks.size();
    S.toks.push_back(token);
    num_tokens_ += 1;
    version_ += 1;
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
          if (nodes_[a].flags & F_HEAVY)
            heavy_child_up(a, c, true);
          else if (nodes_[a].ref_pos > heavy_threshold())
            heavy_promote(a);
        } else {
          // The twin also moves c's ref to this occurrence; c is open from here on, and an
          // open node's ref is never read, so that write is left out (the field holds the link).
          if (!nodes_[c].open) open_node(c, si, pos, prev);
          nodes_[c].cnt += 1;
          if (nodes_[a].flags & F_HEAVY) heavy_child_up(a, c, false);
        }
      }
      if (k + 1 < D) w[k + 1] = c;
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
    if (private_ids_) {
      // The twin's walks (one per start position), 16 at a time in lockstep so their cache
      // misses overlap: each round prefetches every walk's hash slot, then its candidate child,
      // then takes one step in each. The decrements are the same; only the order in which dead
      // nodes are found differs, and with private ids nothing depends on it.
      constexpr int G = 16;
      struct Walk {
        int64_t j, end;
        int32_t cur;
      } ws[G];
      int64_t next_i = 0;
      int live = 0;
      while (live < G && next_i < n) {
        ws[live++] = Walk{next_i, std::min<int64_t>(next_i + D, n), kRoot};
        ++next_i;
      }
      const uint32_t* sl = slots_.data();
      size_t hs[G];
      while (live > 0) {
        for (int k = 0; k < live; ++k) {
          hs[k] = home(ws[k].cur, s[ws[k].j]);
          __builtin_prefetch(&sl[hs[k]]);
        }
        for (int k = 0; k < live; ++k) {
          const uint32_t v = sl[hs[k]];
          if (v) __builtin_prefetch(&nodes_[v]);
          const Node& P = nodes_[ws[k].cur];
          if (P.flags & F_HEAVY) __builtin_prefetch(&heavy_pool_[P.ref_pos]);
        }
        for (int k = 0; k < live;) {
          Walk& w = ws[k];
          const int32_t c = find_child(w.cur, s[w.j]);
          if (c < 0) throw AssertErr{"remove: missing child (index corrupted)"};
          Node& C = nodes_[c];
          C.cnt -= 1;
          if (C.cnt == 0) dead.push_back(c);
          if (nodes_[w.cur].flags & F_HEAVY) heavy_child_down(w.cur, c);
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
    } else {
    for (int64_t i = 0; i < n; ++i) {
      int32_t cur = kRoot;
      const int64_t end = std::min<int64_t>(i + D, n);
      for (int64_t j = i; j < end; ++j) {
        int32_t c = find_child(cur, s[j]);
        if (c < 0) throw AssertErr{"remove: missing child (index corrupted)"};
        Node& C = nodes_[c];
        C.cnt -= 1;
        if (C.cnt == 0) dead.push_back(c);
        if (nodes_[cur].flags & F_HEAVY) heavy_child_down(cur, c);
        if (!C.open) break;
        cur = c;
      }
    }
    }
    nodes_[kRoot].cnt -= (int32_t)n;
    num_tokens_ -= n;
    version_ += 1;
    free_dead(dead);
    // drop the sequence
    ids_.erase(seq);
    std::vector<int32_t>().swap(S.toks);
    std::vector<int32_t>().swap(S.window);
    S.used = false;
    free_seqs_.push_back(si);
    if (ids_.empty() && private_ids_) shrink_when_empty();
  }

  // ------------------------------------------------------------------------------- queries
  // Python SuffixIndex.walk; tokens[0..n)
  State walk(const int32_t* tokens, int64_t n) const {
    SD_COUNT(C_WALK, 1);
    int32_t cur = kRoot;
    for (int64_t i = 0; i < n; ++i) {
      const Node& N = nodes_[cur];
      if (!N.open) {
        const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
        const int64_t p = N.ref_pos;
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
    const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
    const int64_t rest = n - i;
    const int64_t p = (int64_t)N.ref_pos + base;
    if (p + rest >= (int64_t)s.size()) return State{};
    const int32_t* sp = s.data() + p + 1;
    for (int64_t j = 0; j < rest; ++j)
      if (sp[j] != tokens[i + j]) return State{};
    return State{cur, (int32_t)(base + rest)};
  }

  void prefetch_state(State st) const {
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) {
      if (N.flags & F_HEAVY)
        __builtin_prefetch(&heavy_pool_[N.ref_pos]);
      else if (N.first_child >= 0)
        __builtin_prefetch(&nodes_[N.first_child]);
    } else {
      const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
      const int64_t p = (int64_t)N.ref_pos + st.extra + 1;
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
      const int32_t y = X.ref_seq;
      return y >= 0 ? State{y, 0} : State{};
    }
    State base{kRoot, 0};
    if (X.par != kRoot) {
      const Node& P = nodes_[X.par];
      if (!P.open || P.ref_seq < 0) return State{};
      const int32_t y = find_child(P.ref_seq, X.tok);
      if (y < 0) return State{};
      base = State{y, 0};
    }
    if (st.extra == 0) return base;
    return walk_from(base, tokens + (end - st.extra), st.extra);
  }

  bool has_live_child(int32_t node) const {
    const Node& N = nodes_[node];
    if (N.flags & F_HEAVY) return heavy_of(node).sum > 0;  // zombies may still be linked
    return N.first_child >= 0;
  }

  // Does the state have at least one continuation?  (bool(continuations(state)))
  bool has_cont(State st) const {
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) return has_live_child(st.node);
    const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
    return (int64_t)N.ref_pos + st.extra + 1 < (int64_t)s.size();
  }

  int64_t state_depth(State st) const { return (int64_t)nodes_[st.node].dep + st.extra; }
  bool is_open(int32_t node) const { return nodes_[node].open != 0; }

  // longest_match(gram(x), dep(x) - 1) for an open node x, following suffix links: the suffixes
  // of an open node's gram are open nodes, so walk(gram[-L:]) is (link^(dep-L)(x), 0).
  // Returns false when a link is missing (then the caller walks).
  bool suffix_match(int32_t x, State& out, int64_t& len) const {
    int32_t y = nodes_[x].ref_seq;
    for (int64_t L = (int64_t)nodes_[x].dep - 1; L > 0; --L) {
      if (y <= 0 || !nodes_[y].open || nodes_[y].dep != L) return false;
      if (has_live_child(y)) {
        out = State{y, 0};
        len = L;
        return true;
      }
      y = nodes_[y].ref_seq;
    }
    out = State{};
    len = 0;
    return true;
  }
  int depth_of(int32_t node) const { return nodes_[node].dep; }
  const Node& node_ref(int32_t node) const { return nodes_[node]; }

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
    const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
    const int64_t p = (int64_t)N.ref_pos + st.extra + 1;
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
      if ((N.flags & F_HEAVY) && k <= TOPN) {
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
      if (n > heavy_threshold() && !(N.flags & F_HEAVY)) heavy_promote(node);
      if (n > k) {
        std::nth_element(out.begin(), out.begin() + k, out.end(), cont_before);
        out.resize((size_t)k);
      }
      std::sort(out.begin(), out.end(), cont_before);
      return n;
    }
    const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
    const int64_t p = (int64_t)N.ref_pos + st.extra + 1;
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
    b += slots_.capacity() * sizeof(uint32_t);
    b += free_.capacity() * sizeof(int32_t);
    b += free_seqs_.capacity() * sizeof(int32_t);
    b += seqs_.capacity() * sizeof(Seq);
    for (const Seq& S : seqs_) b += S.toks.capacity() * sizeof(int32_t) + S.window.capacity() * sizeof(int32_t);
    // unordered_maps: one heap node per entry plus the bucket array
    b += ids_.size() * (sizeof(std::pair<const int64_t, int32_t>) + 2 * sizeof(void*)) +
         ids_.bucket_count() * sizeof(void*);
    b += heavy_pool_.capacity() * sizeof(Heavy) + heavy_free_.capacity() * sizeof(int32_t);
    return b;
  }
  size_t node_capacity() const { return nodes_.size(); }
  size_t node_reserved() const { return nodes_.capacity(); }
  size_t slot_count() const { return slots_.size(); }
  int64_t zombies() const { return zombies_; }
  size_t free_nodes() const { return free_.size(); }
  size_t heavy_nodes() const { return heavy_pool_.size() - heavy_free_.size(); }

  // Renumber live nodes breadth-first (siblings contiguous), drop zombies and the free list,
  // shrink the node array and the hash table. Node ids change: private-id owners only.
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
      if (x.open) {
        x.ref_seq = x.ref_seq >= 0 ? newid[x.ref_seq] : -1;  // suffix link
        x.ref_pos = 0;                                      // child count, below
      }
      x.first_child = -1;
      x.next_sib = -1;
      x.flags = 0;
      nn.push_back(x);
    }
    // relink children in BFS order (each parent's children are contiguous)
    for (size_t i = order.size(); i-- > 1;) {
      Node& X = nn[i];
      Node& P = nn[X.par];
      X.next_sib = P.first_child;
      P.first_child = (int32_t)i;
      P.ref_pos += 1;
    }
    nodes_.swap(nn);
    std::vector<int32_t>().swap(free_);
    zombies_ = 0;
    std::vector<Heavy>().swap(heavy_pool_);
    std::vector<int32_t>().swap(heavy_free_);
    for (Seq& S : seqs_)
      if (S.used && S.live)
        for (int32_t& v : S.window)
          if (v >= 0) v = newid[v];
    rebuild_table(table_capacity_for(live));
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].open && nodes_[i].ref_pos > heavy_threshold()) heavy_promote((int32_t)i);
    version_ += 1;
  }

  // Python check(): verify invariants (and the native structures); throws AssertErr.
  void check() const {
    const size_t N = nodes_.size();
    std::vector<uint8_t> is_free(N, 0);
    for (int32_t f : free_) {
      if (f <= 0 || (size_t)f >= N || is_free[f]) throw AssertErr{"bad free list"};
      is_free[f] = 1;
    }
    size_t children_total = 0, zombies = 0, heavy_seen = 0;
    std::vector<uint8_t> entry_used(heavy_pool_.size(), 0);
    for (int32_t e : heavy_free_) entry_used[e] = 1;
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
        throw AssertErr{"closed node " + std::to_string(n) + " has count " + std::to_string(X.cnt) +
                        " or children"};
      if (X.flags & F_MARK) throw AssertErr{"stale mark"};
      if (X.open && n != (size_t)kRoot) {  // suffix link: the node of the gram minus its first token
        std::vector<int32_t> g;
        for (int32_t y = (int32_t)n; y != kRoot; y = nodes_[y].par) g.push_back(nodes_[y].tok);
        std::reverse(g.begin(), g.end());
        State sw = walk(g.data() + 1, (int64_t)g.size() - 1);
        if (!(sw == State{X.ref_seq, 0})) throw AssertErr{"bad suffix link at node " + std::to_string(n)};
      }
      int64_t sum = 0, nlive = 0, nz = 0;
      std::vector<Cont> kids;
      for (int32_t c = X.first_child; c >= 0; c = nodes_[c].next_sib) {
        const Node& C = nodes_[c];
        if (is_free[c]) throw AssertErr{"free node linked as a child"};
        if (++children_total > N) throw AssertErr{"cycle in sibling lists"};
        if (C.flags & F_ZOMBIE) {
          if (!(X.flags & F_HEAVY)) throw AssertErr{"zombie under a light parent"};
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
      if (X.open && !(X.flags & F_HEAVY) && X.ref_pos != nlive + nz)
        throw AssertErr{"light node child count " + std::to_string(X.ref_pos) + " != " + std::to_string(nlive)};
      if (X.flags & F_HEAVY) {
        ++heavy_seen;
        if (X.ref_pos < 0 || (size_t)X.ref_pos >= heavy_pool_.size()) throw AssertErr{"heavy node without an entry"};
        const Heavy& H = heavy_pool_[X.ref_pos];
        if (entry_used[X.ref_pos]++) throw AssertErr{"heavy entry shared by two nodes"};
        if (H.sum != sum) throw AssertErr{"heavy sum mismatch"};
        if ((int64_t)H.zombies != nz) throw AssertErr{"heavy zombie count mismatch"};
        if (H.nlive != nlive) throw AssertErr{"heavy live-children count mismatch"};
        std::vector<uint8_t> inbuf(kids.size(), 0);
        for (int i = 0; i < H.ntop; ++i) {
          const TopEnt& e = H.top[i];
          if (i && !ent_before(H.top[i - 1], e)) throw AssertErr{"heavy buffer out of order"};
          size_t j = 0;
          while (j < kids.size() && kids[j].next.node != e.node) ++j;
          if (j == kids.size() || kids[j].cnt != e.cnt || kids[j].tok != e.tok || inbuf[j]++)
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
    if (table_count_ != children_total - zombies) throw AssertErr{"hash table count != live nodes - 1"};
    if (heavy_seen != heavy_nodes()) throw AssertErr{"heavy entries in use != heavy nodes"};
    for (uint8_t u : entry_used)
      if (u != 1) throw AssertErr{"heavy entry leaked or shared"};
  }

 private:
  struct Seq {
    std::vector<int32_t> toks;
    std::vector<int32_t> window;  // max_depth entries while live
    int64_t id = 0;
    bool live = false;
    bool used = false;
  };
  struct TopEnt {
    int32_t node, tok, cnt;
  };
  // One entry per heavy node; the node's ref_pos holds the entry's index (an open node's ref is
  // never read by any query, so it is free for this). Two cache lines (128 bytes): the header
  // and the first four candidates share the first.
  struct alignas(64) Heavy {
    int32_t sum = 0;       // sum of live children's counts (exact)
    int32_t nlive = 0;     // live children (exact)
    int32_t bound = 0;     // every live child outside top[] has count <= bound
    uint32_t zombies : 24;  // dead children still linked (private-id mode)
    uint32_t ntop : 8;
    Heavy() : zombies(0), ntop(0) {}
    TopEnt top[TOPN];      // sorted candidates: live children, exact counts
  };
  static_assert(sizeof(Heavy) == 128 && offsetof(Heavy, top) == 16, "layout");
  // top[0..k) are the first k children in continuations() order
  static bool heavy_exact(const Heavy& H, int k) {
    if (H.ntop == H.nlive) return true;  // every live child is buffered
    return k <= H.ntop && H.top[k - 1].cnt > H.bound;
  }
  Heavy& heavy_of(int32_t node) { return heavy_pool_[nodes_[node].ref_pos]; }
  const Heavy& heavy_of(int32_t node) const { return heavy_pool_[nodes_[node].ref_pos]; }
  static bool ent_before(const TopEnt& a, const TopEnt& b) {
    return a.cnt != b.cnt ? a.cnt > b.cnt : a.tok < b.tok;
  }

  void reset() {
    nodes_.clear();
    Node r{};
    r.tok = -1;
    r.cnt = 0;
    r.par = -1;
    r.ref_seq = -1;
    r.ref_pos = 0;  // open: child count
    r.first_child = -1;
    r.next_sib = -1;
    r.dep = 0;
    r.open = 1;
    r.flags = 0;
    nodes_.push_back(r);
    std::vector<int32_t>().swap(free_);
    zombies_ = 0;
    std::vector<Heavy>().swap(heavy_pool_);
    std::vector<int32_t>().swap(heavy_free_);
    table_count_ = 0;
    std::vector<uint32_t>(init_slots_, 0u).swap(slots_);
    set_mask(init_slots_);
  }

  // Every sequence removed: only the root is left; give the memory back (ids restart).
  void shrink_when_empty() {
    int32_t rc = nodes_[kRoot].cnt;
    reset();
    nodes_[kRoot].cnt = rc;
    std::vector<Seq>().swap(seqs_);
    std::vector<int32_t>().swap(free_seqs_);
    std::unordered_map<int64_t, int32_t>().swap(ids_);
    version_ += 1;
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
    int32_t e;
    if (!heavy_free_.empty()) {
      e = heavy_free_.back();
      heavy_free_.pop_back();
    } else {
      e = (int32_t)heavy_pool_.size();
      heavy_pool_.emplace_back();
    }
    Heavy& H = heavy_pool_[e];
    H = Heavy{};
    heavy_fill(H, total);
    nodes_[node].flags |= F_HEAVY;
    nodes_[node].ref_pos = e;
  }

  // H from the live children in scratch_ (sum `total`)
  void heavy_fill(Heavy& H, int64_t total) {
    H.sum = (int32_t)total;
    H.nlive = (int32_t)scratch_.size();
    const size_t m = std::min<size_t>(TOPN, scratch_.size());
    if (scratch_.size() > m) {
      std::nth_element(scratch_.begin(), scratch_.begin() + m, scratch_.end(), cont_before);
      H.bound = scratch_[m].cnt;  // the best child left out
      for (size_t i = m + 1; i < scratch_.size(); ++i) H.bound = std::max(H.bound, scratch_[i].cnt);
    } else {
      H.bound = 0;
    }
    std::sort(scratch_.begin(), scratch_.begin() + m, cont_before);
    H.ntop = (uint32_t)m;
    for (size_t i = 0; i < m; ++i) H.top[i] = TopEnt{scratch_[i].next.node, scratch_[i].tok, scratch_[i].cnt};
  }

  // Recompute the buffer from the children; in private-id mode also unlink and free zombies.
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
    heavy_fill(H, sum);
  }

  // child c of heavy node a gained one occurrence (is_new: c was just created with count 1)
  void heavy_child_up(int32_t a, int32_t c, bool is_new) {
    Heavy& H = heavy_of(a);
    H.sum += 1;
    const Node& C = nodes_[c];
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
      H.top[i].cnt = C.cnt;
    } else {
      TopEnt e{c, C.tok, C.cnt};
      if (H.ntop < TOPN) {
        i = H.ntop++;
        H.top[i] = e;
      } else if (ent_before(e, H.top[TOPN - 1])) {
        H.bound = std::max(H.bound, H.top[TOPN - 1].cnt);  // pushed out
        i = TOPN - 1;
        H.top[i] = e;
      } else {
        H.bound = std::max(H.bound, C.cnt);  // an outsider grew
        return;
      }
    }
    while (i > 0 && ent_before(H.top[i], H.top[i - 1])) {
      std::swap(H.top[i], H.top[i - 1]);
      --i;
    }
  }

  // child c of heavy node a lost one occurrence (its count is already decremented)
  void heavy_child_down(int32_t a, int32_t c) {
    Heavy& H = heavy_of(a);
    H.sum -= 1;
    const int32_t cnt = nodes_[c].cnt;
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

  void heavy_release(int32_t node) {
    Node& X = nodes_[node];
    const int32_t e = X.ref_pos;
    heavy_free_.push_back(e);
    X.flags &= (uint8_t)~F_HEAVY;
    X.ref_pos = -1;
  }

 public:
  // Warm the cache for the next append of `token` to live slot `si` (its window's nodes and
  // their hash slots), e.g. while another request is being served.
  void prefetch_append(int32_t si, int32_t token) const {
    const Seq& S = seqs_[si];
    if (S.live) prefetch_levels(S.window.data(), token);
  }
  void prefetch_child_slot(int32_t node, int32_t token) const { __builtin_prefetch(&slots_[home(node, token)]); }
  // Warm the cache for extending state st by `token`.
  void prefetch_extend(State st, int32_t token) const {
    if (!st.valid()) return;
    const Node& N = nodes_[st.node];
    if (N.open && st.extra == 0) {
      __builtin_prefetch(&slots_[home(st.node, token)]);
    } else {
      const std::vector<int32_t>& s = seqs_[N.ref_seq].toks;
      const int64_t p = (int64_t)N.ref_pos + st.extra + 1;
      if (p < (int64_t)s.size()) __builtin_prefetch(s.data() + p);
    }
  }

  // Warm the cache for one append: the window's nodes and their hash slots for `token`.
  void prefetch_levels(const int32_t* w, int32_t token) const {
    const uint32_t* sl = slots_.data();
    size_t h[64];
    int m = 0;
    for (int k = 0; k < D_; ++k) {
      const int32_t a = w[k];
      if (a < 0) continue;
      __builtin_prefetch(&nodes_[a]);
      const size_t i = home(a, token);
      __builtin_prefetch(&sl[i]);
      if (m < 64) h[m++] = i;
    }
    // second stage: the first candidate child of each level
    for (int j = 0; j < m; ++j) {
      const uint32_t v = sl[h[j]];
      if (v) __builtin_prefetch(&nodes_[v]);
    }
  }


 private:
  // --------------------------------------------------------------------------- hash table
  void set_mask(size_t cap) {
    mask_ = cap - 1;
    int bits = 0;
    while (((size_t)1 << bits) < cap) ++bits;
    shift_ = 64 - bits;
  }
  static size_t table_capacity_for(size_t live) {
    size_t need = live * 2 + 2;
    size_t cap = 16;
    while (cap < need) cap <<= 1;
    return cap;
  }
  inline size_t home(int32_t parent, int32_t token) const {
    uint64_t key = ((uint64_t)(uint32_t)parent << 32) | (uint32_t)token;
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

 public:
  inline int32_t find_child(int32_t parent, int32_t token) const {
    SD_COUNT(C_FIND, 1);
    size_t i = home(parent, token);
    const uint32_t* sl = slots_.data();
    for (;;) {
      const uint32_t v = sl[i];
      if (v == 0) return -1;
      const Node& C = nodes_[v];
      if (C.tok == token && C.par == parent) return (int32_t)v;
      SD_COUNT(C_PROBES, 1);
      i = (i + 1) & mask_;
    }
  }

 private:
  void table_insert(int32_t v) {
    if ((table_count_ + 1) * 2 > slots_.size()) {
      rebuild_table(slots_.size() * 2);  // scans the node array, which already holds v
      return;
    }
    size_t i = home(nodes_[v].par, nodes_[v].tok);
    uint32_t* sl = slots_.data();
    while (sl[i] != 0) i = (i + 1) & mask_;
    sl[i] = (uint32_t)v;
    ++table_count_;
  }

  void table_erase(int32_t v) {
    size_t i = home(nodes_[v].par, nodes_[v].tok);
    uint32_t* sl = slots_.data();
    while (sl[i] != (uint32_t)v) {
      if (sl[i] == 0) throw AssertErr{"hash table: erasing a missing child"};
      i = (i + 1) & mask_;
    }
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      const uint32_t w = sl[j];
      if (w == 0) break;
      const size_t k = home(nodes_[w].par, nodes_[w].tok);
      // w may move to the hole at i unless its home lies cyclically in (i, j]
      const bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) {
        sl[i] = w;
        i = j;
      }
    }
    sl[i] = 0;
    --table_count_;
  }

  void rebuild_table(size_t cap) {
    std::vector<uint32_t>(cap, 0u).swap(slots_);
    set_mask(cap);
    table_count_ = 0;
    uint32_t* sl = slots_.data();
    const size_t N = nodes_.size();
    for (size_t v = 1; v < N; ++v) {
      const Node& X = nodes_[v];
      if (X.par < 0 || (X.flags & F_ZOMBIE)) continue;  // free or zombie
      size_t i = home(X.par, X.tok);
      while (sl[i] != 0) i = (i + 1) & mask_;
      sl[i] = (uint32_t)v;
      ++table_count_;
    }
  }

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
    X.ref_seq = si;
    X.ref_pos = pos;
    X.first_child = -1;
    X.dep = d;
    X.open = 0;
    X.flags = 0;
    Node& P = nodes_[parent];
    X.next_sib = P.first_child;
    P.first_child = n;
    if (!(P.flags & F_HEAVY)) P.ref_pos += 1;  // light node: child count
    table_insert(n);
    return n;
  }

  // Python _open: second occurrence of a closed node; `link` is its suffix node
  void open_node(int32_t node, int32_t cur_seq, int32_t cur_pos, int32_t link) {
    Node& X = nodes_[node];
    const int32_t rs = X.ref_seq;
    const int64_t rp = (int64_t)X.ref_pos + 1;
    X.open = 1;
    X.ref_seq = link;
    X.ref_pos = 0;  // no children yet
    if (X.dep >= D_) return;
    const std::vector<int32_t>& s = seqs_[rs].toks;
    if (rp >= (int64_t)s.size() || (rs == cur_seq && rp >= cur_pos)) return;
    const int32_t child = new_node(s[rp], node, rs, (int32_t)rp);
    if (nodes_[node].ref_pos > heavy_threshold()) heavy_promote(node);  // threshold 0 (tests)
    if (rp == (int64_t)s.size() - 1) {
      Seq& R = seqs_[rs];
      const int cd = nodes_[child].dep;
      if (R.live && cd < D_) R.window[cd] = child;
    }
  }

  // Put a dead (unlinked, out of the hash table) node on the free list, Python's free state.
  void release_node(int32_t c) {
    Node& X = nodes_[c];
    if (X.flags & F_HEAVY) heavy_release(c);
    X.tok = -1;
    X.par = -1;
    X.ref_seq = -1;
    X.ref_pos = -1;
    X.first_child = -1;
    X.next_sib = -1;
    X.open = 0;
    X.cnt = 0;
    X.flags = 0;
    free_.push_back(c);
  }

  void free_dead(std::vector<int32_t>& dead) {
    if (dead.empty()) return;
    for (int32_t c : dead) table_erase(c);
    // Dead children of live parents must leave their parent's list. Light parents: one filtering
    // pass each. Heavy parents in private-id mode: the child stays linked as a zombie until
    // zombies make up a quarter of the list, then one pass unlinks them all.
    std::vector<int32_t> parents;
    heavy_touched_.clear();
    for (int32_t c : dead) {
      const int32_t p = nodes_[c].par;
      Node& P = nodes_[p];
      if (!(p == kRoot || P.cnt > 0)) continue;  // the parent dies too
      if (private_ids_ && (P.flags & F_HEAVY)) {
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
    for (int32_t p : parents) {
      Node& P = nodes_[p];
      P.flags &= (uint8_t)~F_MARK;
      int32_t* link = &P.first_child;
      int64_t kept = 0;
      while (*link >= 0) {
        Node& C = nodes_[*link];
        if (C.cnt == 0) {
          *link = C.next_sib;
        } else {
          link = &C.next_sib;
          ++kept;
        }
      }
      if (P.flags & F_HEAVY)
        heavy_of(p).nlive = (int32_t)kept;  // exact-id mode, heavy parent
      else
        P.ref_pos = (int32_t)kept;
    }
    // a dead heavy node may still hold zombies from earlier evictions: free them (its list is
    // intact until the loop below)
    for (int32_t c : dead) {
      const Node& X = nodes_[c];
      if (!(X.flags & F_HEAVY) || heavy_of(c).zombies == 0) continue;
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
    // free deepest first, stable (the Python twin's order), so the LIFO free list matches
    if (!private_ids_)
      std::stable_sort(dead.begin(), dead.end(),
                       [this](int32_t a, int32_t b) { return nodes_[a].dep > nodes_[b].dep; });
    for (int32_t c : dead) {
      Node& X = nodes_[c];
      if (X.flags & F_ZOMBIE) {
        if (X.flags & F_HEAVY) heavy_release(c);
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
  bool private_ids_;
  uint32_t init_slots_;
  NodeStore nodes_;
  std::vector<int32_t> free_;
  int64_t zombies_ = 0;
  std::vector<uint32_t> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t table_count_ = 0;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_seqs_;
  std::unordered_map<int64_t, int32_t> ids_;
  std::vector<Heavy> heavy_pool_;
  std::vector<int32_t> heavy_free_;
  std::vector<Cont> scratch_;
  std::vector<int32_t> heavy_touched_;
  int64_t num_tokens_ = 0;
  uint64_t version_ = 0;
};

}  // namespace specdraft
