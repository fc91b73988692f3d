// Adaptive draft length: native twin of proposers/controller.py (CostModel, DraftLengthController).
//
// The Python module is the specification (the model, calibration and cost model are explained
// there); tests/test_step_twin.py checks that both choose the same lengths on random inputs.
// Every arithmetic step is written in the Python file's order, so results agree to the bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace specdraft {

constexpr int kNumBins = 20;
constexpr double kMaxProb = 0.995;
constexpr double kStepDecay = 0.98;  // STEP_DECAY in proposers/controller.py
constexpr int kNumMatch = 5;  // match-length buckets: 0-1, 2-3, 4-7, 8-15, 16+ tokens

// Bucket of a node's matched context length (root match + the node's depth).
inline int match_bucket(int64_t m) {
  int b = 0;
  while (m > 1 && b < kNumMatch - 1) {
    m >>= 1;
    b += 1;
  }
  return b;
}

// The parameters of the GPU cost model (proposers/controller.py, PARAMS order); all zero for a
// curve in tokens only.
struct CostParams {
  double fixed = 0.0, kv = 0.0, kv_min_batch = 0.0, attention = 0.0, slope = 0.0, knee = 0.0,
         width = 0.0;
};

// The batch a pass verifies: requests, the sum of their contexts, the longest context.
struct BatchShape {
  int64_t requests = 1;
  double context = 0.0;
  double longest = 0.0;
};

// Cost of one verification pass of a batch, corrected online by step timings.
class CostModel {
 public:
  struct Observed {
    double ratio_sum = 0.0;  // decayed sum of observed / predicted
    double count = 0.0;      // decayed number of observations
  };
  using Timing = std::map<int, Observed>;  // bucket -> its observations (CostModel._obs)

  CostModel(CostParams params, std::vector<std::pair<double, double>> points, double prior)
      : p_(params), prior_(prior) {
    std::sort(points.begin(), points.end());
    for (const auto& p : points) {
      tokens_.push_back(p.first);
      costs_.push_back(p.second);
    }
    floor_ = 0.002 * base_cost(1.0, BatchShape{1, 0.0, 0.0});
  }

  double base_cost(double tokens, const BatchShape& b) const {
    double c = p_.fixed + p_.kv * std::max(b.context, p_.kv_min_batch * b.longest);
    if (b.requests > 0) c += p_.attention * (b.context / (double)b.requests) * tokens;
    const double x = tokens - p_.knee;
    c += p_.slope * (std::sqrt(x * x + p_.width * p_.width) + x) * 0.5;
    if (!tokens_.empty()) c += curve(tokens);
    return c;
  }

  // `timing`: the observations that correct it (nullptr: every pass's)
  double cost(double tokens, const BatchShape& b, const Timing* timing = nullptr) const {
    return base_cost(tokens, b) * factor(tokens, timing ? *timing : observed_) + floor_ * (tokens - 1);
  }

  // A pass that scored `tokens` took `seconds`; its batch is the one last sized unless given;
  // it goes into `timing` (nullptr: every pass's observations).
  void observe(int64_t tokens, double seconds, const BatchShape* b = nullptr, Timing* timing = nullptr) {
    if (tokens <= 0 || seconds <= 0) return;
    const double pred = base_cost((double)tokens, b ? *b : batch);
    Observed& o = (timing ? *timing : observed_)[bucket((double)tokens)];
    o.ratio_sum = kStepDecay * o.ratio_sum + seconds / pred;
    o.count = kStepDecay * o.count + 1.0;
  }

  BatchShape batch;  // the batch last sized

 private:
  double curve(double tokens) const {
    if (tokens <= tokens_[0]) return costs_[0];
    size_t i = (size_t)(std::lower_bound(tokens_.begin(), tokens_.end(), tokens) - tokens_.begin());
    if (i == tokens_.size()) i = tokens_.size() - 1;  // extrapolate the last segment
    const double t0 = tokens_[i - 1], t1 = tokens_[i], c0 = costs_[i - 1], c1 = costs_[i];
    return c0 + (c1 - c0) * (tokens - t0) / (t1 - t0);
  }

  static int bucket(double tokens) { return (int)std::log2(std::max(1.0, tokens)); }

  // observed / predicted cost of a pass scoring `tokens`, relative to the lowest bucket
  // observed: linear in log2 T between the observed buckets' centres (b + 0.5); past the
  // highest, the highest's; below the lowest, 1 (CostModel._factor)
  double factor(double tokens, const Timing& obs) const {
    if (obs.empty()) return 1.0;
    const double x = std::log2(std::max(1.0, tokens));
    auto hi = obs.begin();
    while (hi != obs.end() && (double)hi->first + 0.5 <= x) ++hi;
    if (hi == obs.begin()) return 1.0;
    auto lo = std::prev(hi);
    const double f_lo = observed_factor(lo->second, obs);
    if (hi == obs.end()) return f_lo;
    const double f_hi = observed_factor(hi->second, obs);
    return f_lo + (f_hi - f_lo) * (x - ((double)lo->first + 0.5)) / (double)(hi->first - lo->first);
  }

  double observed_factor(const Observed& o, const Timing& obs) const {
    const Observed& ref = obs.begin()->second;
    const double rel = (o.ratio_sum / o.count) / (ref.ratio_sum / ref.count);
    const double w = o.count / (o.count + prior_);
    return 1.0 + w * (rel - 1.0);
  }

  CostParams p_;
  std::vector<double> tokens_, costs_;
  double prior_;
  double floor_;  // 0.2% of a one-token pass per extra token
  std::map<int, Observed> observed_;  // ordered: the reference is the lowest bucket
};

struct ControllerParams {
  double calibration_prior = 8.0;
  double request_prior = 1.0;
  double request_decay = 0.9;
  double idle_decay = 0.9;
  double min_gain = 0.1;
  double max_waste = 4.0;
  double match_prior = 2.0;
  int64_t max_scopes = 1024;
};

class DraftLengthController {
 public:
  // A key's tenant scope: true and the scope's name, or false for the unscoped pool.
  using ScopeOf = std::function<bool(int64_t, std::string&)>;

  DraftLengthController(CostModel cost_model, ControllerParams params)
      : cost_model_(std::move(cost_model)), params_(params),
        default_(std::make_shared<Calibration>()) {}

  // Set by the core that owns the keys (none: every key is unscoped).
  void set_scope_of(ScopeOf scope_of) { scope_of_ = std::move(scope_of); }

  CostModel& cost_model() { return cost_model_; }
  const std::map<int64_t, int64_t>& chosen_lengths() const { return chosen_lengths_; }

  static int bin(double p) {
    const double x = p * kNumBins;
    if (!(x < kNumBins - 1)) return kNumBins - 1;
    if (x < 1.0) return 0;
    return (int)x;
  }

  // The calibrated acceptance of a node of raw probability p in a scope (nullptr: unscoped).
  double calibrated(double p, const std::string* scope = nullptr) const {
    if (scope == nullptr) return default_->cal[bin(p)];
    auto it = scoped_.find(*scope);
    return it == scoped_.end() ? Calibration().cal[bin(p)] : it->second.cal->cal[bin(p)];
  }

  double request_factor(int64_t key) const {
    auto it = requests_.find(key);
    if (it == requests_.end()) return 1.0;
    return (it->second.accepted + params_.request_prior) / (it->second.expected + params_.request_prior);
  }

  void forget(int64_t key) { requests_.erase(key); }

  // The target accepted `num_accepted` tokens of the draft last sent for `key`.
  void observe(int64_t key, int64_t num_accepted) {
    auto it = requests_.find(key);
    if (it == requests_.end() || !it->second.has_sent) return;
    Evidence& ev = it->second;
    ev.has_sent = false;
    const int64_t n = (int64_t)ev.sent_probs.size();
    const int64_t a = std::max<int64_t>(0, std::min<int64_t>(num_accepted, n));
    double expected = 0.0;
    const double d = params_.request_decay;
    if (!ev.cal) ev.cal = resolve(key);
    Calibration& c = *ev.cal;
    for (int64_t i = 0; i < std::min<int64_t>(a + 1, n); ++i) {
      const int b = bin(ev.sent_probs[(size_t)i]);
      update_bin(c, b, i < a);
      expected += c.cal[b];
      if (params_.match_prior > 0) {
        const int m = match_bucket(ev.sent_match + i);
        ev.m_acc[m] = d * ev.m_acc[m] + (i < a ? 1.0 : 0.0);
        ev.m_exp[m] = d * ev.m_exp[m] + c.cal[b];
      }
    }
    ev.accepted = d * ev.accepted + (double)a;
    ev.expected = d * ev.expected + expected;
  }

  // Calibrated path acceptance probability of each node, made non-increasing.
  // `match_len`: the draft's root match length (a node's matched context adds its depth).
  void path_gains(int64_t key, const int32_t* parents, const double* probs, size_t n,
                  int64_t match_len, std::vector<double>& out) {
    path_gains(key, *calibration(key), parents, probs, n, match_len, out);
  }

  // A verification pass of the batch last sized scored `tokens` in `seconds`: every pass
  // corrects the shared cost model; a pass whose drafting requests were all of one scope also
  // corrects that scope's own (DraftLengthController.observe_pass).
  void observe_pass(int64_t tokens, double seconds) {
    cost_model_.observe(tokens, seconds, nullptr);
    if (batch_cal_) cost_model_.observe(tokens, seconds, nullptr, &batch_cal_->timing);
  }

 private:
  struct Calibration;

  void path_gains(int64_t key, const Calibration& c, const int32_t* parents, const double* probs,
                  size_t n, int64_t match_len, std::vector<double>& out) {
    const double f = request_factor(key);
    double fm[kNumMatch];
    bool by_match = false;
    const double* cal = c.cal;
    if (params_.match_prior > 0) {
      auto it = requests_.find(key);
      if (it != requests_.end()) {
        const double mp = params_.match_prior;
        for (int m = 0; m < kNumMatch; ++m)
          fm[m] = (it->second.m_acc[m] + mp * f) / (it->second.m_exp[m] + mp);
        by_match = true;
      }
    }
    out.clear();
    depth_.clear();
    double run = 1.0;
    for (size_t i = 0; i < n; ++i) {
      const int b = (int)(probs[i] * kNumBins);
      const int32_t par = parents[i];
      const int64_t dep = par >= 0 ? depth_[(size_t)par] + 1 : 0;
      depth_.push_back(dep);
      double q = cal[b < kNumBins ? b : kNumBins - 1] * (by_match ? fm[match_bucket(match_len + dep)] : f);
      if (q > kMaxProb) q = kMaxProb;
      const double g = par >= 0 ? q * out[(size_t)par] : q;
      if (g < run) run = g;
      out.push_back(run);
    }
  }

 public:
  // Number of nodes to keep from each of `num` drafts: draft r has nodes
  // [offsets[r], offsets[r + 1]) of parents/probs (node order, parents local to the draft).
  // `batch` is the whole pass these drafts join (every row of the step, drafting or not);
  // `match_lens`: each draft's root match length (nullptr: 0).
  void choose(const int64_t* keys, size_t num, const int32_t* parents, const double* probs,
              const int64_t* offsets, const BatchShape& batch, int64_t* counts,
              const int64_t* match_lens = nullptr) {
    gains_.clear();
    std::shared_ptr<Calibration> single;  // the requests' one scope (none: several, or none)
    bool mixed = false;
    for (size_t r = 0; r < num; ++r) {
      const int64_t a = offsets[r], b = offsets[r + 1];
      std::shared_ptr<Calibration> c = calibration(keys[r]);
      if (r == 0)
        single = c;
      else if (c != single)
        mixed = true;
      path_gains(keys[r], *c, parents + a, probs + a, (size_t)(b - a), match_lens ? match_lens[r] : 0,
                 scratch_);
      // chains only: a tree's alternatives are there to be rejected
      bool chain = true;
      for (int64_t i = a; i < b && chain; ++i) chain = parents[i] == (int32_t)(i - a - 1);
      const double cap = chain ? params_.max_waste : std::numeric_limits<double>::infinity();
      double waste = 0.0;
      for (double g : scratch_) {
        if (g < params_.min_gain) break;  // the rest are below the floor too
        waste += 1.0 - g;
        if (waste > cap) break;  // the chain would waste more than max_waste tokens in expectation
        gains_.emplace_back(-g, (int64_t)r);
      }
    }
    std::sort(gains_.begin(), gains_.end());
    const int64_t R = batch.requests;
    cost_model_.batch = batch;
    if (mixed) single.reset();
    batch_cal_ = single;
    const CostModel::Timing* timing = single ? &single->timing : nullptr;
    size_t best_j = 0;
    double best_ratio = R ? (double)R / cost_model_.cost((double)R, batch, timing) : 0.0;
    double numer = (double)R;
    for (size_t j = 1; j <= gains_.size(); ++j) {
      numer -= gains_[j - 1].first;
      const double ratio = numer / cost_model_.cost((double)(R + (int64_t)j), batch, timing);
      if (ratio > best_ratio) {
        best_j = j;
        best_ratio = ratio;
      }
    }
    std::fill(counts, counts + num, 0);
    for (size_t j = 0; j < best_j; ++j) counts[gains_[j].second] += 1;
    for (size_t r = 0; r < num; ++r) {
      chosen_lengths_[counts[r]] += 1;
      if (counts[r] == 0) {
        auto it = requests_.find(keys[r]);
        if (it != requests_.end()) {
          it->second.accepted *= params_.idle_decay;
          it->second.expected *= params_.idle_decay;
          for (int m = 0; m < kNumMatch; ++m) {
            it->second.m_acc[m] *= params_.idle_decay;
            it->second.m_exp[m] *= params_.idle_decay;
          }
        }
      }
    }
  }

  // Record the raw probabilities of the chain actually sent (for observe).
  void sent(int64_t key, const double* probs, size_t n, int64_t match_len = 0) {
    Evidence& ev = requests_[key];
    if (!ev.cal) ev.cal = resolve(key);
    ev.sent_probs.assign(probs, probs + n);
    ev.has_sent = n > 0;
    ev.sent_match = match_len;
  }

 private:
  // A scope's controller state: observed acceptance per raw-probability bin, calibrated(p) per
  // bin, and the step timings of the passes its requests had to themselves.
  struct Calibration {
    CostModel::Timing timing;
    double acc[kNumBins] = {};
    double n[kNumBins] = {};
    double cal[kNumBins];
    Calibration() {
      for (int b = 0; b < kNumBins; ++b) cal[b] = (b + 0.5) / kNumBins;
    }
  };
  struct Scoped {
    std::shared_ptr<Calibration> cal;
    uint64_t used = 0;  // LRU stamp
  };

  // The calibration of key's scope, made on first use; past max_scopes the least recently used
  // scope's is dropped (its live requests keep theirs).
  std::shared_ptr<Calibration> resolve(int64_t key) {
    if (!scope_of_ || !scope_of_(key, scope_name_)) return default_;
    auto it = scoped_.find(scope_name_);
    if (it == scoped_.end()) {
      if ((int64_t)scoped_.size() >= std::max<int64_t>(1, params_.max_scopes)) {
        auto oldest = scoped_.begin();
        for (auto j = scoped_.begin(); j != scoped_.end(); ++j)
          if (j->second.used < oldest->second.used) oldest = j;
        scoped_.erase(oldest);
      }
      it = scoped_.emplace(scope_name_, Scoped{std::make_shared<Calibration>(), 0}).first;
    }
    it->second.used = ++clock_;
    return it->second.cal;
  }

  std::shared_ptr<Calibration> calibration(int64_t key) {
    auto it = requests_.find(key);
    return it != requests_.end() && it->second.cal ? it->second.cal : resolve(key);
  }

  struct Evidence {
    std::shared_ptr<Calibration> cal;  // its scope's calibration (bound when sent)
    double accepted = 0.0;
    double expected = 0.0;
    std::vector<double> sent_probs;
    bool has_sent = false;  // Python: sent_probs is not None
    int64_t sent_match = 0;  // root match length of the chain last sent
    double m_acc[kNumMatch] = {};  // accepted nodes per match bucket (decayed)
    double m_exp[kNumMatch] = {};  // their calibrated expectation
  };

  void update_bin(Calibration& c, int b, bool accepted) {
    c.n[b] += 1.0;
    if (accepted) c.acc[b] += 1.0;
    const double prior = params_.calibration_prior;
    c.cal[b] = (c.acc[b] + prior * (b + 0.5) / kNumBins) / (c.n[b] + prior);
  }

  CostModel cost_model_;
  ControllerParams params_;
  std::shared_ptr<Calibration> default_;                 // the unscoped pool's
  std::unordered_map<std::string, Scoped> scoped_;       // at most max_scopes
  uint64_t clock_ = 0;
  std::shared_ptr<Calibration> batch_cal_;  // the one scope of the batch last sized
  ScopeOf scope_of_;
  std::string scope_name_;  // scratch for scope_of_
  std::unordered_map<int64_t, Evidence> requests_;
  std::map<int64_t, int64_t> chosen_lengths_;
  std::vector<std::pair<double, int64_t>> gains_;
  std::vector<double> scratch_;
  std::vector<int64_t> depth_;
};

}  // namespace specdraft
