// One engine step for the whole batch: request events, sync, drafts, draft lengths.
//
// Native twin of SpecDrafter._step_python (proposers/drafter.py), which is the specification:
// the same events in the same order, so the drafts and the chosen lengths are identical
// (tests/test_step_twin.py). Called with the GIL released.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "controller.h"
#include "suffix_core.h"

namespace specdraft {

// The adapter's view of one step, as flat arrays (one entry per row unless said otherwise).
struct StepInput {
  size_t num_rows = 0;
  const int64_t* handles = nullptr;       // request handle of each row
  const int32_t* tokens = nullptr;        // token storage shared by the rows
  int64_t tokens_size = 0;                // elements in `tokens`
  const int64_t* row_offset = nullptr;    // index in `tokens` of the row's first given token
  const int64_t* row_start = nullptr;     // history position of that token (0: the whole history)
  const int64_t* num_prompt = nullptr;    // prompt length of the row's request
  const int64_t* num_tokens = nullptr;    // history length: positions [row_start, num_tokens) given
  const int64_t* num_accepted = nullptr;  // accepted tokens of the last draft; -1: unknown
  const int64_t* num_emitted = nullptr;   // tokens the engine emitted this step; -1: not checked
  const int64_t* budgets = nullptr;       // most draft tokens the row may get (<= 0: no draft)
  const int64_t* finished = nullptr;      // requests that ended normally since the last step
  size_t num_finished = 0;
  const int64_t* aborted = nullptr;       // requests dropped since the last step
  size_t num_aborted = 0;
  int64_t vocab_size = 0;                 // token ids must be < this (<= 0: int32 range)
  bool tree = false;                      // draft trees (reduced to their best chain unless `trees`)
  bool trees = false;                     // return each row's whole draft, with its parents
  bool detail = false;                    // also each draft's parents, probs and match length
};

struct StepCounts {
  int64_t started = 0;    // requests started (new, or restarted after their history shrank)
  int64_t finished = 0;
  int64_t aborted = 0;    // aborted events plus restarts
  int64_t accepted = 0;   // sum of the accepted counts applied
};

struct StepOutput {
  std::vector<int32_t> tokens;   // the rows' drafts, concatenated in row order
  std::vector<int32_t> lengths;  // draft length of each row
  std::vector<int32_t> parents;  // with `trees` or `detail`: each node's parent within its row's draft (-1: root)
  std::vector<double> probs;     // with `detail`: each node's probability given its parent
  std::vector<int32_t> match_lens;  // with `detail`: each row's draft's root match length (0: no draft)
  StepCounts counts;
};

// The chain through `d` with the most expected accepted tokens: DraftTree.best_path.
inline void best_path(const Draft& d, Draft& out, std::vector<double>& pp, std::vector<double>& best,
                      std::vector<int32_t>& best_child) {
  const size_t n = d.toks.size();
  out.clear();
  out.match_len = d.match_len;
  if (n == 0) return;
  pp.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = d.parents[i];
    pp[i] = d.probs[i] * (p >= 0 ? pp[(size_t)p] : 1.0);
  }
  best.assign(n, 0.0);
  best_child.assign(n, -1);
  for (size_t k = n; k-- > 0;) {
    best[k] = pp[k] + (best_child[k] >= 0 ? best[(size_t)best_child[k]] : 0.0);
    const int32_t p = d.parents[k];
    if (p >= 0 && (best_child[(size_t)p] < 0 || best[k] >= best[(size_t)best_child[(size_t)p]]))
      best_child[(size_t)p] = (int32_t)k;
  }
  int32_t node = -1;
  for (size_t i = 0; i < n; ++i)
    if (d.parents[i] < 0 && (node < 0 || best[i] > best[(size_t)node])) node = (int32_t)i;
  while (node >= 0) {
    out.parents.push_back((int32_t)out.toks.size() - 1);
    out.toks.push_back(d.toks[(size_t)node]);
    out.probs.push_back(d.probs[(size_t)node]);
    node = best_child[(size_t)node];
  }
}

class Stepper {
 public:
  void run(SuffixCore& core, DraftLengthController* ctl, const StepInput& in, StepOutput& out) {
    out.tokens.clear();
    out.parents.clear();
    out.probs.clear();
    out.match_lens.assign(in.detail ? in.num_rows : 0, 0);
    out.lengths.assign(in.num_rows, 0);
    out.counts = StepCounts{};
    for (size_t i = 0; i < in.num_finished; ++i) {
      if (!core.has(in.finished[i])) {  // never started: only its scope to forget
        core.drop_scope(in.finished[i]);
        continue;
      }
      core.finish(in.finished[i]);
      if (ctl) ctl->forget(in.finished[i]);
      out.counts.finished += 1;
    }
    for (size_t i = 0; i < in.num_aborted; ++i) {
      if (!core.has(in.aborted[i])) {
        core.drop_scope(in.aborted[i]);
        continue;
      }
      core.abort(in.aborted[i]);
      if (ctl) ctl->forget(in.aborted[i]);
      out.counts.aborted += 1;
    }
    const int64_t vmax = in.vocab_size > 0 ? in.vocab_size : (int64_t)INT32_MAX + 1;
    for (size_t j = 0; j < in.num_rows; ++j) sync_row(core, ctl, in, j, vmax, out.counts);

    // drafts of the rows that may draft, in row order
    keys_.clear();
    rows_.clear();
    match_lens_.clear();
    parents_.clear();
    probs_.clear();
    toks_.clear();
    offsets_.assign(1, 0);
    for (size_t j = 0; j < in.num_rows; ++j) {
      if (in.budgets[j] <= 0) continue;
      SuffixCore::Request* r = core.find(in.handles[j]);
      core.draft_req(*r, in.budgets[j], in.tree, draft_);
      const Draft* d = &draft_;
      if (in.tree && !in.trees) {
        best_path(draft_, chain_, pp_, best_, best_child_);
        d = &chain_;
      }
      keys_.push_back(in.handles[j]);
      rows_.push_back(j);
      match_lens_.push_back(d->match_len);
      toks_.insert(toks_.end(), d->toks.begin(), d->toks.end());
      parents_.insert(parents_.end(), d->parents.begin(), d->parents.end());
      probs_.insert(probs_.end(), d->probs.begin(), d->probs.end());
      offsets_.push_back((int64_t)toks_.size());
    }
    const size_t m = rows_.size();
    counts_.resize(m);
    if (ctl) {  // the pass holds every row, drafting or not
      BatchShape batch{(int64_t)in.num_rows, 0.0, 0.0};
      int64_t context = 0, longest = 0;
      for (size_t j = 0; j < in.num_rows; ++j) {
        context += in.num_tokens[j];
        longest = std::max(longest, in.num_tokens[j]);
      }
      batch.context = (double)context;
      batch.longest = (double)longest;
      ctl->choose(keys_.data(), m, parents_.data(), probs_.data(), offsets_.data(), batch,
                  counts_.data(), match_lens_.data());
    } else {
      for (size_t r = 0; r < m; ++r) counts_[r] = offsets_[r + 1] - offsets_[r];
    }
    for (size_t r = 0; r < m; ++r) {
      const int64_t a = offsets_[r];
      const int64_t k = std::max<int64_t>(0, std::min<int64_t>(counts_[r], offsets_[r + 1] - a));
      if (ctl) sent(ctl, r, a, k, in.trees);
      out.tokens.insert(out.tokens.end(), toks_.begin() + a, toks_.begin() + a + k);
      if (in.trees || in.detail)
        out.parents.insert(out.parents.end(), parents_.begin() + a, parents_.begin() + a + k);
      if (in.detail) {
        out.probs.insert(out.probs.end(), probs_.begin() + a, probs_.begin() + a + k);
        out.match_lens[rows_[r]] = (int32_t)match_lens_[r];
      }
      out.lengths[rows_[r]] = (int32_t)k;
    }
  }

 private:
  // The controller learns the chain it will see verified: a tree's best path (DraftTree.chain_probs).
  void sent(DraftLengthController* ctl, size_t r, int64_t a, int64_t k, bool whole_trees) {
    bool chain = true;  // without whole trees every draft is a chain
    for (int64_t i = 0; whole_trees && i < k && chain; ++i) chain = parents_[(size_t)(a + i)] == (int32_t)i - 1;
    if (chain) {
      ctl->sent(keys_[r], probs_.data() + a, (size_t)k, match_lens_[r]);
      return;
    }
    draft_.clear();
    draft_.match_len = match_lens_[r];
    draft_.toks.assign(toks_.begin() + a, toks_.begin() + a + k);
    draft_.parents.assign(parents_.begin() + a, parents_.begin() + a + k);
    draft_.probs.assign(probs_.begin() + a, probs_.begin() + a + k);
    best_path(draft_, chain_, pp_, best_, best_child_);
    ctl->sent(keys_[r], chain_.probs.data(), chain_.probs.size(), chain_.match_len);
  }

  static void check_tokens(const int32_t* t, int64_t n, int64_t vmax, size_t row, int64_t handle) {
    for (int64_t i = 0; i < n; ++i)
      if (t[i] < 0 || (int64_t)t[i] >= vmax)
        throw ValueErr{"row " + std::to_string(row) + " (request handle " + std::to_string(handle) +
                       "): token id " + std::to_string(t[i]) + " out of range; accepted 0 <= id < " +
                       std::to_string(vmax)};
  }

  static const int32_t* history(const StepInput& in, size_t j, int64_t from, int64_t handle) {
    if (from < in.row_start[j])
      throw ValueErr{"row " + std::to_string(j) + " (request handle " + std::to_string(handle) +
                     "): the drafter needs the history from position " + std::to_string(from) +
                     " but the row's tokens start at position " + std::to_string(in.row_start[j])};
    const int64_t at = in.row_offset[j] + (from - in.row_start[j]);
    const int64_t end = in.row_offset[j] + (in.num_tokens[j] - in.row_start[j]);
    if (in.row_offset[j] < 0 || end > in.tokens_size)
      throw ValueErr{"row " + std::to_string(j) + " (request handle " + std::to_string(handle) +
                     "): its tokens [" + std::to_string(at) + ", " + std::to_string(end) +
                     ") lie outside the token array of " + std::to_string(in.tokens_size)};
    return in.tokens + at;
  }

  // SpecDrafter._sync_row: bring the request up to the engine's history.
  static void sync_row(SuffixCore& core, DraftLengthController* ctl, const StepInput& in, size_t j,
                       int64_t vmax, StepCounts& counts) {
    const int64_t h = in.handles[j];
    const int64_t n = in.num_tokens[j];
    int64_t known = core.has(h) ? core.num_tokens(h) : -1;
    if (known >= 0 && n < known) {  // the engine discarded tokens: start over (same scope)
      core.abort(h, true);
      if (ctl) ctl->forget(h);
      counts.aborted += 1;
      known = -1;
    }
    if (known < 0) {
      known = std::max<int64_t>(0, std::min(in.num_prompt[j], n));
      const int32_t* t = history(in, j, 0, h);
      check_tokens(t, known, vmax, j, h);
      core.start(h, t, (size_t)known);
      counts.started += 1;
    }
    if (n > known) {
      const int32_t* t = history(in, j, known, h);
      check_tokens(t, n - known, vmax, j, h);
      const int64_t acc = in.num_accepted[j];
      const bool use = acc >= 0 && (in.num_emitted[j] < 0 || in.num_emitted[j] == n - known);
      core.extend(h, t, (size_t)(n - known));
      if (use) {
        counts.accepted += acc;
        if (ctl) ctl->observe(h, acc);
      }
    }
  }

  Draft draft_, chain_;
  std::vector<double> pp_, best_;
  std::vector<int32_t> best_child_;
  std::vector<int64_t> keys_, offsets_, counts_, match_lens_;
  std::vector<size_t> rows_;
  std::vector<int32_t> toks_, parents_;
  std::vector<double> probs_;
};

}  // namespace specdraft
