// SuffixCore: per-request local index + global index with FIFO eviction + chain/tree drafting
// with mixed probabilities. Native twin of proposers/suffix_core.py: identical drafts (tokens,
// parents, probabilities to the bit, match_len); see the Python file for the semantics.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "suffix_index.h"

namespace specdraft {

struct Draft {
  std::vector<int32_t> toks;
  std::vector<int32_t> parents;
  std::vector<double> probs;
  int64_t match_len = 0;
  void clear() {
    toks.clear();
    parents.clear();
    probs.clear();
    match_len = 0;
  }
};

class SuffixCore {
 public:
  SuffixCore(int max_depth, int64_t global_cache_tokens, int64_t max_children, double min_path_prob,
             double kappa, bool cache_prompts, int64_t local_weight = 1, bool live_outputs = false)
      : D_(max_depth),
        global_cache_tokens_(global_cache_tokens),
        max_children_(max_children),
        min_path_prob_(min_path_prob),
        kappa_(kappa),
        local_weight_(local_weight),
        cache_prompts_(cache_prompts),
        live_outputs_(live_outputs && global_cache_tokens > 0),
        global_(max_depth, 1024, page_shift_for(global_cache_tokens)) {}

  // node pages of about a sixteenth of a full cache (~3.5 nodes per token), 32 KiB to 2 MiB
  static int page_shift_for(int64_t cache_tokens) {
    int sh = 10;
    while (sh < 16 && ((int64_t)1 << (sh + 1)) <= cache_tokens / 4) ++sh;
    return sh;
  }

  // ------------------------------------------------------------------------- accessors
  int max_depth() const { return D_; }
  int64_t global_cache_tokens() const { return global_cache_tokens_; }
  int64_t max_children() const { return max_children_; }
  double min_path_prob() const { return min_path_prob_; }
  double kappa() const { return kappa_; }
  int64_t local_weight() const { return local_weight_; }
  bool cache_prompts() const { return cache_prompts_; }
  bool live_outputs() const { return live_outputs_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t corpus_tokens() const { return corpus_tokens_; }
  int64_t num_requests() const { return (int64_t)requests_.size(); }
  int64_t global_tokens() const { return cached_tokens_ + corpus_tokens_; }
  int64_t global_nodes() const { return global_.num_nodes(); }
  size_t memory_bytes() const {
    return global_.memory_bytes() + fifo_.size() * sizeof(std::pair<int64_t, int64_t>);
  }
  size_t requests_memory_bytes() const {
    size_t b = 0;
    for (const auto& kv : requests_) b += sizeof(Request) + kv.second->index.memory_bytes();
    return b;
  }
  const SuffixIndex& global_index() const { return global_; }
  void check_requests() const {
    for (const auto& kv : requests_) kv.second->index.check();
  }

  // ------------------------------------------------------------------------ lifecycle
  bool has(int64_t h) const { return requests_.count(h) != 0; }

  void start(int64_t h, const int32_t* prompt, size_t n) {
    if (requests_.count(h))
      throw KeyErr{h, "request handle " + std::to_string(h) + " already started"};
    auto r = std::make_unique<Request>(D_, n);
    r->index.extend_slot(0, prompt, n);
    r->num_prompt = (int64_t)n;
    if (live_outputs_) {
      r->global_seq = next_seq_++;
      r->global_slot = global_.add_sequence(r->global_seq);
    }
    requests_.emplace(h, std::move(r));
  }

  void extend(int64_t h, const int32_t* toks, size_t n) { extend_req(get(h), toks, n); }

  int64_t num_tokens(int64_t h) const { return (int64_t)get(h).index.tokens_of_slot(0).size(); }

  void abort(int64_t h) {
    auto it = requests_.find(h);
    if (it == requests_.end()) throw KeyErr{h, ""};
    const int64_t gs = it->second->global_seq;
    requests_.erase(it);
    if (gs >= 0) global_.remove(gs);  // an aborted request's tokens are not cached
  }

  void finish(int64_t h) {
    auto it = requests_.find(h);
    if (it == requests_.end()) throw KeyErr{h, ""};
    std::unique_ptr<Request> r = std::move(it->second);
    requests_.erase(it);
    if (r->global_seq >= 0) {  // indexed while it ran: keep it (or not) as a finished one
      catch_up(*r);
      const int64_t sid = r->global_seq;
      r.reset();
      global_.close(sid);
      const int64_t n = (int64_t)global_.tokens(sid).size();
      if (0 < n && n <= global_cache_tokens_) {
        cache(sid, n);
      } else {
        global_.remove(sid);
      }
      return;
    }
    const std::vector<int32_t>& all = r->index.tokens_of_slot(0);
    const int64_t skip = cache_prompts_ ? 0 : std::min<int64_t>(r->num_prompt, (int64_t)all.size());
    const int64_t n = (int64_t)all.size() - skip;
    if (0 < n && n <= global_cache_tokens_) {
      const int64_t sid = add_global(all.data() + skip, (size_t)n);
      r.reset();  // free the local index before the global one grows
      cache(sid, n);
    }
  }

  // Python SuffixCore._cache: keep finished sequence sid (n tokens), evict oldest past the budget
  void cache(int64_t sid, int64_t n) {
    fifo_.emplace_back(sid, n);
    cached_tokens_ += n;
    bool evicted = false;
    while (cached_tokens_ > global_cache_tokens_) {
      auto old = fifo_.front();
      fifo_.pop_front();
      global_.remove(old.first);
      cached_tokens_ -= old.second;
      evicted = true;
    }
    if (evicted) maybe_compact();
  }

  void load_corpus(const int32_t* toks, size_t n) {
    if (n) {
      add_global(toks, n);
      corpus_tokens_ += (int64_t)n;
    }
  }

  // Native extension (not in the Python twin): evict cached requests, oldest first, until at
  // most keep_tokens remain; returns the number of tokens evicted. Corpora stay.
  int64_t evict_global(int64_t keep_tokens) {
    int64_t ev = 0;
    while (!fifo_.empty() && cached_tokens_ > keep_tokens) {
      auto old = fifo_.front();
      fifo_.pop_front();
      global_.remove(old.first);
      cached_tokens_ -= old.second;
      ev += old.second;
    }
    if (ev) maybe_compact();
    return ev;
  }

  void compact_global() { global_.compact(); }

  // ------------------------------------------------------------------------- drafting
  void draft(int64_t h, int64_t budget, bool tree, Draft& out) { draft_req(get(h), budget, tree, out); }

  // batch helpers: the caller validated the handles
  struct Request;
  Request* find(int64_t h) {
    auto it = requests_.find(h);
    return it == requests_.end() ? nullptr : it->second.get();
  }

  struct Request {
    SuffixIndex index;
    int64_t num_prompt = 0;
    int64_t hint_local;
    int64_t hint_global;
    // the last global match: state of ctx[memo_n - memo_len : memo_n], taken at global shape
    // version memo_shape (appends may have come since)
    State memo_st;
    int64_t memo_len = 0;
    int64_t memo_n = 0;
    uint64_t memo_shape = ~0ull;
    // its sequence in the global index while live (live_outputs), else -1
    int64_t global_seq = -1;
    int32_t global_slot = -1;
    Request(int D, size_t prompt_len) : index(D, slots_for(prompt_len)), hint_local(D), hint_global(D) {
      index.add_sequence(0);
    }
    static uint32_t slots_for(size_t n) {
      size_t need = 8 * n + 64;  // up to ~4 nodes per token at load <= 1/2
      uint32_t cap = 64;
      while (cap < need && cap < (1u << 30)) cap <<= 1;
      return cap;
    }
  };

  // Warm the cache for the next step of r (first appended token, or its draft start) while the
  // batch serves the request before it.
  void prefetch_req(const Request& r, const int32_t* toks, size_t n) const {
    if (n == 0) return;
    r.index.prefetch_append(0, toks[0]);
    if (r.memo_shape == global_.shape_version() && r.memo_len > 0) {
      // the global match extends its last state by toks[0] first: node and hash slot
      __builtin_prefetch(&global_.node_ref(r.memo_st.node));
      if (r.memo_st.extra == 0) global_.prefetch_child_slot(r.memo_st.node, toks[0]);
    }
  }

  void extend_req(Request& r, const int32_t* toks, size_t n) {
    r.index.extend_slot(0, toks, n);
    if (r.global_slot >= 0 && requests_.size() > 1) catch_up(r);  // alone: nobody would read them
    r.hint_local += (int64_t)n;
    r.hint_global += (int64_t)n;
  }

  // Python SuffixCore._catch_up: index the request's tokens the global index does not hold yet
  void catch_up(Request& r) {
    const std::vector<int32_t>& all = r.index.tokens_of_slot(0);
    const int64_t have = (cache_prompts_ ? 0 : r.num_prompt) +
                         (int64_t)global_.tokens_of_slot(r.global_slot).size();
    if (have < (int64_t)all.size())
      global_.extend_slot(r.global_slot, all.data() + have, (size_t)((int64_t)all.size() - have));
  }

  void draft_req(Request& r, int64_t budget, bool tree, Draft& out) {
    out.clear();
    if (budget <= 0) return;
    const std::vector<int32_t>& ctxv = r.index.tokens_of_slot(0);
    const int32_t* ctx = ctxv.data();
    const int64_t n = (int64_t)ctxv.size();
    int64_t len_l = 0, len_g = 0;
    State st_l = r.index.longest_match_tail(0, r.hint_local, len_l);
    if (debug_checks()) {
      int64_t L2 = 0;
      State s2 = r.index.longest_match(ctx, n, r.hint_local, L2);
      if (!(s2 == st_l) || L2 != len_l) throw AssertErr{"local longest_match_tail != longest_match"};
    }
    r.hint_local = len_l;
#ifdef SPECDRAFT_COUNTERS
    const uint64_t f0 = g_counters[C_FIND];
#endif
    State st_g = global_match(r, ctx, n, r.hint_global, len_g);
#ifdef SPECDRAFT_COUNTERS
    g_counters[C_GLOBAL_FINDS] += g_counters[C_FIND] - f0;
#endif
    SD_COUNT(C_DRAFTS, 1);
    SD_COUNT(C_LEN_G, len_g);
    SD_COUNT(C_LEN_L, len_l);
    if (debug_checks()) {
      int64_t L2 = 0;
      State s2 = global_.longest_match(ctx, n, r.hint_global, L2);
      if (!(s2 == st_g) || L2 != len_g) throw AssertErr{"global_match != longest_match"};
    }
    r.hint_global = len_g;
    const int64_t match_len = std::max(len_l, len_g);
    if (!st_l.valid() && !st_g.valid()) return;
    out.match_len = match_len;
    SuffixIndex& local = r.index;

    heap_.clear();
    int64_t order = 0;
    {
      State sts[2] = {st_l, st_g};
      expand(local, sts, ctx, n, out, -1);
      for (const Mixed& m : mixed_) {
        if (m.p < min_path_prob_) break;
        heap_.push_back(HeapItem{-m.p, order, -1, m.tok, m.p, {m.nx[0], m.nx[1]}});
        order += 1;
        if (!tree) break;
      }
      std::make_heap(heap_.begin(), heap_.end(), heap_less);
    }
    while (!heap_.empty() && (int64_t)out.toks.size() < budget) {
      std::pop_heap(heap_.begin(), heap_.end(), heap_less);
      const HeapItem it = heap_.back();
      heap_.pop_back();
      const int32_t i = (int32_t)out.toks.size();
      out.toks.push_back(it.tok);
      out.parents.push_back(it.parent);
      out.probs.push_back(it.p);
      // The Python twin expands this node even when the budget is now full; expanding has no
      // side effects and its children could never be popped, so stop here.
      if ((int64_t)out.toks.size() >= budget) break;
      const double pathp = -it.negp;
      State sts[2] = {it.nx[0], it.nx[1]};
      expand(local, sts, ctx, n, out, i);
      for (const Mixed& m : mixed_) {
        const double cpath = pathp * m.p;
        if (cpath < min_path_prob_) break;
        heap_.push_back(HeapItem{-cpath, order, i, m.tok, m.p, {m.nx[0], m.nx[1]}});
        std::push_heap(heap_.begin(), heap_.end(), heap_less);
        order += 1;
        if (!tree) break;
      }
    }
  }

 private:
  struct Mixed {
    int32_t tok;
    double p;
    State nx[2];
  };
  struct HeapItem {
    double negp;
    int64_t order;
    int32_t parent;
    int32_t tok;
    double p;
    State nx[2];
  };
  // std heap is a max-heap on "less": the top is the smallest (negp, order), like heapq
  static bool heap_less(const HeapItem& a, const HeapItem& b) {
    if (a.negp != b.negp) return a.negp > b.negp;
    return a.order > b.order;
  }

  Request& get(int64_t h) const {
    auto it = requests_.find(h);
    if (it == requests_.end()) throw KeyErr{h, ""};
    return *it->second;
  }

  // global_.longest_match(ctx, n, hi), incrementally. A gram that occurred has occurred with
  // every suffix and every prefix, so "walk(ctx[-L:]) is valid" is monotone in L, and the longest
  // valid L at position j is at most one more than at j-1. With the previous answer (state of
  // ctx[memo_n - memo_len, memo_n)) and hi == memo_len + new tokens, stream the new tokens like
  // matching statistics: extend by one token, or drop the first token (suffix_state) and retry;
  // that yields the longest valid L <= min(hi, max_depth); then step down through suffixes to the
  // longest with a continuation, exactly the twin's loop. Without a usable memo: probe hi, then
  // binary-search the longest valid L. Either way the same answer as the twin's walk per L.
  State global_match(Request& r, const int32_t* ctx, int64_t n, int64_t hi, int64_t& len) {
    State res{};
    len = 0;
    const int64_t L0 = std::min<int64_t>(std::min<int64_t>(hi, D_), n);
    bool done = false;
    if (L0 > 0 && r.memo_shape == global_.shape_version() && r.memo_n <= n &&
        hi == r.memo_len + (n - r.memo_n)) {
      State st = r.memo_len > 0 ? r.memo_st : State{kRoot, 0};
      // Appends since the memo (live requests' tokens) only add occurrences: the memo's gram
      // still occurred, and the loop below still yields the longest valid L <= hi. Its state
      // stays valid unless it ran past a node (extra > 0: the node was closed then) that has
      // since opened: walk it again.
      if (st.extra > 0 && global_.is_open(st.node))
        st = global_.walk(ctx + (r.memo_n - r.memo_len), r.memo_len);
      bool ok = st.valid();
      int64_t L = r.memo_len;
      for (int64_t j = r.memo_n; j < n && ok; ++j) {
        if (L == D_) {
          st = global_.suffix_state(st, ctx, j);
          L -= 1;
          if (!st.valid()) ok = false;
        }
        while (ok) {
          State s2 = global_.walk_from(st, ctx + j, 1);
          if (s2.valid()) {
            st = s2;
            L += 1;
            break;
          }
          if (L == 0) break;
          st = global_.suffix_state(st, ctx, j);
          L -= 1;
          if (!st.valid()) ok = false;
        }
      }
      if (ok) {
        for (; L > 0; --L) {
          if (global_.has_cont(st)) {
            res = st;
            len = L;
            break;
          }
          st = global_.suffix_state(st, ctx, n);
          if (!st.valid()) {
            ok = false;
            break;
          }
        }
      }
      done = ok;
      if (!ok) {
        res = State{};
        len = 0;
      }
    }
    if (!done && L0 > 0) {
      State st = global_.walk(ctx + (n - L0), L0);
      int64_t Lmax = 0;
      State smax{};
      if (st.valid()) {
        Lmax = L0;
        smax = st;
      } else {
        int64_t lo = 0, hi2 = L0;  // walk(lo) valid (lo = 0: the root), walk(hi2) not
        while (hi2 - lo > 1) {
          const int64_t mid = (lo + hi2) / 2;
          State sm = global_.walk(ctx + (n - mid), mid);
          if (sm.valid()) {
            lo = mid;
            smax = sm;
          } else {
            hi2 = mid;
          }
        }
        Lmax = lo;
      }
      for (int64_t L = Lmax; L > 0; --L) {
        State s2 = L == Lmax ? smax : global_.walk(ctx + (n - L), L);
        if (s2.valid() && global_.has_cont(s2)) {
          res = s2;
          len = L;
          break;
        }
      }
    }
    r.memo_st = res;
    r.memo_len = len;
    r.memo_n = n;
    r.memo_shape = global_.shape_version();
    return res;
  }

  int64_t slice_len(int64_t size) const {
    // Python conts[:max_children]
    if (max_children_ >= 0) return std::min(max_children_, size);
    return std::max<int64_t>(0, size + max_children_);
  }

  // Tokens of the context tail plus the draft path to node `node` (-1: the context tail only),
  // at most max_depth of them: Python path_of(node)() / ctx_tail().
  void path_tokens(const int32_t* ctx, int64_t n, const Draft& d, int32_t node, std::vector<int32_t>& out) const {
    out.clear();
    if (node < 0) {
      const int64_t b = std::max<int64_t>(0, n - D_);
      out.assign(ctx + b, ctx + n);
      return;
    }
    path_.clear();
    for (int32_t i = node; i >= 0; i = d.parents[i]) path_.push_back(d.toks[i]);
    std::reverse(path_.begin(), path_.end());
    const int64_t keep = (int64_t)D_ - (int64_t)path_.size();
    if (keep <= 0) {
      out.assign(path_.end() - D_, path_.end());
      return;
    }
    const int64_t b = std::max<int64_t>(0, n - keep);
    out.assign(ctx + b, ctx + n);
    out.insert(out.end(), path_.begin(), path_.end());
  }

  // Python _expand: fills mixed_ with [(token, prob, next_states)], best first, truncated.
  void expand(SuffixIndex& local, State sts[2], const int32_t* ctx, int64_t n, const Draft& d, int32_t node) {
    mixed_.clear();
    int64_t wsum = 0;
    // both sources' next cache lines (first child, heavy entry, or the reference token) before
    // either is read, so their misses overlap
    if (sts[0].valid()) local.prefetch_state(sts[0]);
    if (sts[1].valid()) global_.prefetch_state(sts[1]);
    for (int si = 0; si < 2; ++si) {
      State st = sts[si];
      if (!st.valid()) continue;
      SuffixIndex& idx = si ? global_ : local;
      int64_t total = 0;
      const int64_t k = max_children_ >= 0 ? max_children_ : INT64_MAX;
      int64_t ncont = idx.top_continuations(st, k, conts_, total);
      if (ncont == 0 && st.extra == 0 && idx.depth_of(st.node) == D_) {
        // capped depth: re-anchor on the gram's shorter suffix. The state's gram is the last
        // max_depth tokens of context + path, so for an open node the answer is down its
        // suffix links; a closed one (its only occurrence ends its sequence) is walked.
        SD_COUNT(C_REANCHOR, 1);
        int64_t L = 0;
        State re{};
        const bool linked = idx.is_open(st.node) && idx.suffix_match(st.node, re, L);
        if (!linked || debug_checks()) {
          path_tokens(ctx, n, d, node, ptoks_);
          int64_t L2 = 0;
          State s2 = idx.longest_match(ptoks_.data(), (int64_t)ptoks_.size(), D_ - 1, L2);
          if (linked && !(s2 == re && L2 == L)) throw AssertErr{"suffix_match != longest_match"};
          re = s2;
        }
        st = re;
        if (!st.valid()) continue;
        ncont = idx.top_continuations(st, k, conts_, total);
      }
      if (ncont == 0) continue;
      if (max_children_ < 0) {  // negative slice: drop from the end of the full sorted list
        conts_.resize((size_t)slice_len(ncont));
      }
      const int64_t w = idx.state_depth(st);
      const int64_t wm = si ? w : w * local_weight_;  // the request's own history counts more
      wsum += wm;
      const double den = (double)total + kappa_ / (double)w;
      for (const Cont& c : conts_) {
        const double v = (double)(wm * (int64_t)c.cnt) / den;
        Mixed* m = nullptr;
        for (Mixed& x : mixed_)
          if (x.tok == c.tok) {
            m = &x;
            break;
          }
        if (!m) {
          mixed_.push_back(Mixed{c.tok, 0.0, {State{}, State{}}});
          m = &mixed_.back();
        }
        m->p = m->p + v;
        m->nx[si] = c.next;
      }
    }
    if (wsum == 0) {
      mixed_.clear();
      return;
    }
    const double ws = (double)wsum;
    for (Mixed& m : mixed_) m.p = m.p / ws;
    std::sort(mixed_.begin(), mixed_.end(),
              [](const Mixed& a, const Mixed& b) { return a.p != b.p ? a.p > b.p : a.tok < b.tok; });
    const int64_t keep = slice_len((int64_t)mixed_.size());
    mixed_.resize((size_t)keep);
  }

  int64_t add_global(const int32_t* toks, size_t n) {
    const int64_t sid = next_seq_++;
    int32_t si = global_.add_sequence(sid);
    global_.reserve_tokens(si, n);
    for (size_t i = 0; i < n; ++i) global_.append_slot(si, toks[i]);
    global_.close(sid);
    return sid;
  }

  void maybe_compact() {
    const size_t cap = global_.node_capacity();
    if (cap > 4096 && (size_t)global_.num_nodes() * 4 < cap) global_.compact();
  }

  int D_;
  int64_t global_cache_tokens_;
  int64_t max_children_;
  double min_path_prob_;
  double kappa_;
  int64_t local_weight_;
  bool cache_prompts_;
  bool live_outputs_;
  SuffixIndex global_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  std::deque<std::pair<int64_t, int64_t>> fifo_;
  int64_t next_seq_ = 0;
  int64_t cached_tokens_ = 0;
  int64_t corpus_tokens_ = 0;
  // scratch (single-threaded use is guaranteed by the bindings' mutex)
  std::vector<HeapItem> heap_;
  std::vector<Mixed> mixed_;
  std::vector<Cont> conts_;
  std::vector<int32_t> ptoks_;
  mutable std::vector<int32_t> path_;
};

}  // namespace specdraft
