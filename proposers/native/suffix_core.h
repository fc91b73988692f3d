// SuffixCore: per-request local index + global index with FIFO eviction + chain/tree drafting
// with mixed probabilities. Native twin of proposers/suffix_core.py: identical drafts (tokens,
// parents, probabilities to the bit, match_len); see the Python file for the semantics, scopes
// (one global index per tenant scope, the unscoped pool being the core's only one without
// scopes) included.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
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
  // One scope's global cache: its index, cached requests (FIFO), live requests, LRU stamp
  struct Scope {
    SuffixIndex index;
    std::deque<std::pair<int64_t, int64_t>> fifo;  // (global seq id, tokens), oldest first
    int64_t next_seq = 0;
    int64_t cached_tokens = 0;
    int64_t corpus_tokens = 0;
    int64_t live = 0;
    int64_t last_used = 0;
    bool evicted = false;  // lost sequences since the last compaction check
    Scope(int D, int page_shift) : index(D, 1024, page_shift) {}
    size_t memory_bytes() const {
      return sizeof(Scope) + index.memory_bytes() + fifo.size() * sizeof(std::pair<int64_t, int64_t>);
    }
  };
  SuffixCore(int max_depth, int64_t global_cache_tokens, int64_t max_children, double min_path_prob,
             double kappa, bool cache_prompts, int64_t local_weight = 1, bool live_outputs = false,
             int64_t scope_cache_tokens = -1, int64_t max_scopes = 1024)
      : D_(max_depth),
        global_cache_tokens_(global_cache_tokens),
        scope_cache_tokens_(0 <= scope_cache_tokens && scope_cache_tokens <= global_cache_tokens
                                ? scope_cache_tokens
                                : global_cache_tokens),
        max_scopes_(std::max<int64_t>(1, max_scopes)),
        max_children_(max_children),
        min_path_prob_(min_path_prob),
        kappa_(kappa),
        local_weight_(local_weight),
        cache_prompts_(cache_prompts),
        live_outputs_(live_outputs && global_cache_tokens > 0),
        default_(max_depth, page_shift_for(global_cache_tokens)) {}

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
  int64_t scope_cache_tokens() const { return scope_cache_tokens_; }
  int64_t max_scopes() const { return max_scopes_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t corpus_tokens() const { return corpus_tokens_; }
  int64_t num_requests() const { return (int64_t)requests_.size(); }
  int64_t global_tokens() const { return cached_tokens_ + corpus_tokens_; }
  int64_t global_nodes() const {
    int64_t n = default_.index.num_nodes();
    for (const auto& kv : scopes_) n += kv.second->index.num_nodes();
    return n;
  }
  size_t memory_bytes() const {
    size_t b = default_.memory_bytes();
    for (const auto& kv : scopes_) b += kv.second->memory_bytes() + kv.first.capacity() + 4 * sizeof(void*);
    b += handle_scope_.size() * (sizeof(std::pair<const int64_t, std::string>) + 2 * sizeof(void*));
    for (const auto& c : corpora_) b += c.toks.capacity() * sizeof(int32_t);
    return b;
  }
  // scoped pools held (the unscoped pool is always there)
  int64_t num_scopes() const { return (int64_t)scopes_.size(); }
  // tokens (cached + corpus) of the k largest scoped pools, largest first
  std::vector<int64_t> scope_tokens(int64_t k) const {
    std::vector<int64_t> v;
    for (const auto& kv : scopes_) v.push_back(kv.second->cached_tokens + kv.second->corpus_tokens);
    std::sort(v.begin(), v.end(), std::greater<int64_t>());
    if ((int64_t)v.size() > std::max<int64_t>(0, k)) v.resize((size_t)std::max<int64_t>(0, k));
    return v;
  }
  size_t requests_memory_bytes() const {
    size_t b = 0;
    for (const auto& kv : requests_) b += sizeof(Request) + kv.second->index.memory_bytes();
    return b;
  }
  const SuffixIndex& global_index() const { return default_.index; }
  void check_scopes() const {
    for (const auto& kv : scopes_) kv.second->index.check();
  }

  // -------------------------------------------------------------------------- scopes
  // The scope request h starts in (nullopt: the unscoped pool); kept across a restart of the
  // request (abort with keep_scope), dropped when it finishes or is aborted.
  void set_scope(int64_t h, const std::optional<std::string>& scope) {
    if (scope)
      handle_scope_[h] = *scope;
    else
      handle_scope_.erase(h);
  }
  std::optional<std::string> scope_of(int64_t h) const {
    auto it = handle_scope_.find(h);
    if (it == handle_scope_.end()) return std::nullopt;
    return it->second;
  }
  // The scope of request h without a copy: nullptr for the unscoped pool.
  const std::string* scope_ptr(int64_t h) const {
    auto it = handle_scope_.find(h);
    return it == handle_scope_.end() ? nullptr : &it->second;
  }
  void drop_scope(int64_t h) { handle_scope_.erase(h); }
  void check_requests() const {
    for (const auto& kv : requests_) kv.second->index.check();
  }

  // ------------------------------------------------------------------------ lifecycle
  bool has(int64_t h) const { return requests_.count(h) != 0; }

  void start(int64_t h, const int32_t* prompt, size_t n) {
    if (requests_.count(h))
      throw KeyErr{h, "request handle " + std::to_string(h) + " already started"};
    auto hs = handle_scope_.find(h);
    Scope& sc = hs == handle_scope_.end() ? default_ : scope_for(hs->second);
    auto r = std::make_unique<Request>(D_, n);
    r->scope = &sc;
    r->index.extend_slot(0, prompt, n);
    r->num_prompt = (int64_t)n;
    if (live_outputs_) {
      r->global_seq = sc.next_seq++;
      r->global_slot = sc.index.add_sequence(r->global_seq);
    }
    sc.live += 1;
    touch(sc);
    requests_.emplace(h, std::move(r));
  }

  void extend(int64_t h, const int32_t* toks, size_t n) { extend_req(get(h), toks, n); }

  int64_t num_tokens(int64_t h) const { return (int64_t)get(h).index.tokens_of_slot(0).size(); }

  // keep_scope: the request restarts at once under the same handle
  void abort(int64_t h, bool keep_scope = false) {
    auto it = requests_.find(h);
    if (it == requests_.end()) throw KeyErr{h, ""};
    const int64_t gs = it->second->global_seq;
    Scope& sc = *it->second->scope;
    requests_.erase(it);
    sc.live -= 1;
    if (!keep_scope) handle_scope_.erase(h);
    if (gs >= 0) sc.index.remove(gs);  // an aborted request's tokens are not cached
  }

  // exported: record it in the outbox when export is on (false: a sequence learned elsewhere)
  void finish(int64_t h, bool exported = true) {
    auto it = requests_.find(h);
    if (it == requests_.end()) throw KeyErr{h, ""};
    std::unique_ptr<Request> r = std::move(it->second);
    requests_.erase(it);
    if (exported && export_budget_ > 0) export_finished(h, *r);
    Scope& sc = *r->scope;
    sc.live -= 1;
    touch(sc);
    handle_scope_.erase(h);
    if (r->global_seq >= 0) {  // indexed while it ran: keep it (or not) as a finished one
      catch_up(*r);
      const int64_t sid = r->global_seq;
      r.reset();
      sc.index.close(sid);
      const int64_t n = (int64_t)sc.index.tokens(sid).size();
      if (0 < n && n <= scope_cache_tokens_) {
        cache(sc, sid, n);
      } else {
        sc.index.remove(sid);
      }
      return;
    }
    const std::vector<int32_t>& all = r->index.tokens_of_slot(0);
    const int64_t skip = cache_prompts_ ? 0 : std::min<int64_t>(r->num_prompt, (int64_t)all.size());
    const int64_t n = (int64_t)all.size() - skip;
    if (0 < n && n <= scope_cache_tokens_) {
      const int64_t sid = add_global(sc, all.data() + skip, (size_t)n);
      r.reset();  // free the local index before the global one grows
      cache(sc, sid, n);
    }
  }

  // ------------------------------------------------------------------------- export
  // Python FinishedOutbox: requests that finish normally (not aborted), as (scope, the tokens
  // finish caches: the output, or prompt + output with cache_prompts), oldest first, for the
  // shared cache to publish. At most budget_tokens are held: past it the oldest are dropped
  // (counted), the newest is always kept. budget_tokens <= 0: off, the outbox emptied.
  struct Finished {
    std::optional<std::string> scope;
    std::vector<int32_t> toks;
  };
  void enable_export(int64_t budget_tokens) {
    export_budget_ = std::max<int64_t>(0, budget_tokens);
    if (export_budget_ == 0) {
      outbox_.clear();
      outbox_tokens_ = 0;
    }
  }
  std::deque<Finished> take_finished() {
    std::deque<Finished> out;
    out.swap(outbox_);
    outbox_tokens_ = 0;
    return out;
  }
  int64_t export_dropped_tokens() const { return export_dropped_tokens_; }

  // Python SuffixCore._cache: keep finished sequence sid (n tokens) in scope sc; evict its
  // oldest past the scope's budget, then, past the total, the least recently used other scope's
  // oldest (sc's own when no other scope holds any)
  void cache(Scope& sc, int64_t sid, int64_t n) {
    sc.fifo.emplace_back(sid, n);
    sc.cached_tokens += n;
    cached_tokens_ += n;
    while (sc.cached_tokens > scope_cache_tokens_) evict_oldest(sc);
    while (cached_tokens_ > global_cache_tokens_) evict_oldest(*victim(&sc));
    compact_evicted();
  }

  // Python load_corpus: pin a corpus in the scopes it serves (all: nullopt; a list may hold
  // nullopt for the unscoped pool), including scopes created later
  void load_corpus(const int32_t* toks, size_t n,
                   const std::optional<std::vector<std::optional<std::string>>>& scopes = std::nullopt) {
    if (!n) return;
    Corpus c;
    c.all = !scopes;
    bool serves_default = c.all, serves_named = c.all;
    if (scopes) {
      for (const auto& k : *scopes) {
        if (k) {
          c.names.push_back(*k);
          serves_named = true;
        } else {
          serves_default = true;
        }
      }
    }
    if (serves_default) add_corpus(default_, toks, n);
    for (auto& kv : scopes_)
      if (c.serves(kv.first)) add_corpus(*kv.second, toks, n);
    if (serves_named) {
      c.toks.assign(toks, toks + n);
      corpora_.push_back(std::move(c));
    }
  }

  // Native extension (not in the Python twin): evict cached requests, least recently used scope
  // first and oldest first within it, until at most keep_tokens remain; returns the number of
  // tokens evicted. Corpora stay.
  int64_t evict_global(int64_t keep_tokens) {
    int64_t ev = 0;
    while (cached_tokens_ > keep_tokens) {
      Scope* v = victim(nullptr);
      if (v == nullptr) break;
      ev += v->fifo.front().second;
      evict_oldest(*v);
    }
    compact_evicted();
    return ev;
  }

  void compact_global() {
    default_.index.compact();
    for (auto& kv : scopes_) kv.second->index.compact();
  }

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
    // its sequence in its scope's global index while live (live_outputs), else -1
    int64_t global_seq = -1;
    int32_t global_slot = -1;
    Scope* scope = nullptr;  // never evicted while it has live requests
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

  void extend_req(Request& r, const int32_t* toks, size_t n) {
    r.index.extend_slot(0, toks, n);
    if (r.global_slot >= 0 && r.scope->live > 1) catch_up(r);  // alone in its scope: nobody reads them
    r.hint_local += (int64_t)n;
    r.hint_global += (int64_t)n;
  }

  // Python SuffixCore._catch_up: index the request's tokens the global index does not hold yet
  void catch_up(Request& r) {
    SuffixIndex& global_ = r.scope->index;
    const std::vector<int32_t>& all = r.index.tokens_of_slot(0);
    const int64_t have = (cache_prompts_ ? 0 : r.num_prompt) +
                         (int64_t)global_.tokens_of_slot(r.global_slot).size();
    if (have < (int64_t)all.size())
      global_.extend_slot(r.global_slot, all.data() + have, (size_t)((int64_t)all.size() - have));
  }

  void draft_req(Request& r, int64_t budget, bool tree, Draft& out) {
    out.clear();
    SuffixIndex& global_ = r.scope->index;
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
      expand(local, global_, sts, ctx, n, out, -1);
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
      expand(local, global_, sts, ctx, n, out, i);
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
    SuffixIndex& global_ = r.scope->index;
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
  void expand(SuffixIndex& local, SuffixIndex& global_, State sts[2], const int32_t* ctx, int64_t n,
              const Draft& d, int32_t node) {
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

  struct Corpus {
    std::vector<int32_t> toks;
    bool all = true;
    std::vector<std::string> names;
    bool serves(const std::string& k) const {
      return all || std::find(names.begin(), names.end(), k) != names.end();
    }
  };

  void export_finished(int64_t h, const Request& r) {
    const std::vector<int32_t>& all = r.index.tokens_of_slot(0);
    const size_t skip = cache_prompts_ ? 0 : (size_t)std::min<int64_t>(r.num_prompt, (int64_t)all.size());
    if (skip == all.size()) return;
    const std::string* sc = scope_ptr(h);
    outbox_.push_back(Finished{sc ? std::optional<std::string>(*sc) : std::nullopt,
                               std::vector<int32_t>(all.begin() + (std::ptrdiff_t)skip, all.end())});
    outbox_tokens_ += (int64_t)(all.size() - skip);
    while (outbox_tokens_ > export_budget_ && outbox_.size() > 1) {
      const int64_t n = (int64_t)outbox_.front().toks.size();
      outbox_.pop_front();
      outbox_tokens_ -= n;
      export_dropped_tokens_ += n;
    }
  }

  int64_t add_global(Scope& sc, const int32_t* toks, size_t n) {
    const int64_t sid = sc.next_seq++;
    int32_t si = sc.index.add_sequence(sid);
    sc.index.extend_slot(si, toks, n);
    sc.index.close(sid);
    return sid;
  }

  void add_corpus(Scope& sc, const int32_t* toks, size_t n) {
    add_global(sc, toks, n);
    sc.corpus_tokens += (int64_t)n;
    corpus_tokens_ += (int64_t)n;
  }

  void touch(Scope& sc) { sc.last_used = ++clock_; }

  // Python _scope_for: the scope named k, created (after evicting the least recently used idle
  // scope, whole, when max_scopes are held) with the corpora that serve it
  Scope& scope_for(const std::string& k) {
    auto it = scopes_.find(k);
    if (it != scopes_.end()) return *it->second;
    while ((int64_t)scopes_.size() >= max_scopes_) {  // scopes with live requests stay
      auto lru = scopes_.end();
      for (auto j = scopes_.begin(); j != scopes_.end(); ++j)
        if (j->second->live == 0 && (lru == scopes_.end() || j->second->last_used < lru->second->last_used))
          lru = j;
      if (lru == scopes_.end()) break;
      cached_tokens_ -= lru->second->cached_tokens;
      corpus_tokens_ -= lru->second->corpus_tokens;
      scopes_.erase(lru);
    }
    auto sc = std::make_unique<Scope>(D_, 10);  // small pages: many scopes stay cheap
    Scope& ref = *sc;
    scopes_.emplace(k, std::move(sc));
    for (const Corpus& c : corpora_)
      if (c.serves(k)) add_corpus(ref, c.toks.data(), c.toks.size());
    return ref;
  }

  // Python _victim: the least recently used scope other than `except` holding cached requests,
  // else `except` itself (nullptr: any scope; nullptr when none holds any)
  Scope* victim(Scope* except) {
    Scope* best = nullptr;
    for (auto& kv : scopes_) {
      Scope* v = kv.second.get();
      if (v != except && !v->fifo.empty() && (!best || v->last_used < best->last_used)) best = v;
    }
    if (&default_ != except && !default_.fifo.empty() && (!best || default_.last_used < best->last_used))
      best = &default_;
    return best ? best : except;
  }

  void evict_oldest(Scope& sc) {
    auto old = sc.fifo.front();
    sc.fifo.pop_front();
    sc.index.remove(old.first);
    sc.cached_tokens -= old.second;
    cached_tokens_ -= old.second;
    sc.evicted = true;
  }

  void compact_evicted() {
    if (default_.evicted) maybe_compact(default_);
    for (auto& kv : scopes_)
      if (kv.second->evicted) maybe_compact(*kv.second);
  }

  void maybe_compact(Scope& sc) {
    sc.evicted = false;
    SuffixIndex& g = sc.index;
    const size_t cap = g.node_capacity();
    if (cap > 4096 && (size_t)g.num_nodes() * 4 < cap) g.compact();
  }

  int D_;
  int64_t global_cache_tokens_;
  int64_t scope_cache_tokens_;
  int64_t max_scopes_;
  int64_t max_children_;
  double min_path_prob_;
  double kappa_;
  int64_t local_weight_;
  bool cache_prompts_;
  bool live_outputs_;
  Scope default_;  // the unscoped pool
  std::unordered_map<std::string, std::unique_ptr<Scope>> scopes_;
  std::unordered_map<int64_t, std::string> handle_scope_;
  std::vector<Corpus> corpora_;  // corpora serving scoped pools, for scopes made later
  int64_t clock_ = 0;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  int64_t cached_tokens_ = 0;
  int64_t corpus_tokens_ = 0;
  int64_t export_budget_ = 0;  // 0: finished requests are not exported
  std::deque<Finished> outbox_;
  int64_t outbox_tokens_ = 0;
  int64_t export_dropped_tokens_ = 0;
  // scratch (single-threaded use is guaranteed by the bindings' mutex)
  std::vector<HeapItem> heap_;
  std::vector<Mixed> mixed_;
  std::vector<Cont> conts_;
  std::vector<int32_t> ptoks_;
  mutable std::vector<int32_t> path_;
};

}  // namespace specdraft
