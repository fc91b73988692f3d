// pybind11 module specdraft.proposers._suffix_native: the native SuffixIndex and SuffixCore.
//
// The Python twins (proposers/suffix_index.py, proposers/suffix_core.py) are the specification;
// tests/test_native_twin.py checks that both return identical answers on random streams.
// Native extensions: memory_bytes(), evict_global(), compact_global().
// The engine step (`step`, native twin of SpecDrafter._step_python) and the draft-length
// controller (native twin of proposers/controller.py) live on the core, so that one call with
// flat arrays does a whole step with the GIL released. `ctl_*` are the controller's entries
// outside a step: accepted counts given per request, pass timings, requests that leave outside a
// step, and what metrics read (calibration, chosen lengths).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "controller.h"
#include "py_convert.h"
#include "step.h"
#include "suffix_core.h"
#include "suffix_index.h"

namespace py = pybind11;
using namespace specdraft;

namespace {

// Argument conversion (to_i64, to_token, tokens_of, ints_of: integer arrays read in place) is in
// py_convert.h.

// ------------------------------------------------------------------------------- results
py::tuple draft_tuple(const Draft& d) {
  const size_t n = d.toks.size();
  PyObject* t = new_ref_or_throw(PyList_New((Py_ssize_t)n));
  py::object tl = py::reinterpret_steal<py::object>(t);
  PyObject* p = new_ref_or_throw(PyList_New((Py_ssize_t)n));
  py::object pl = py::reinterpret_steal<py::object>(p);
  PyObject* q = new_ref_or_throw(PyList_New((Py_ssize_t)n));
  py::object ql = py::reinterpret_steal<py::object>(q);
  for (size_t i = 0; i < n; ++i) {
    PyList_SET_ITEM(t, (Py_ssize_t)i, new_ref_or_throw(PyLong_FromLong(d.toks[i])));
    PyList_SET_ITEM(p, (Py_ssize_t)i, new_ref_or_throw(PyLong_FromLong(d.parents[i])));
    PyList_SET_ITEM(q, (Py_ssize_t)i, new_ref_or_throw(PyFloat_FromDouble(d.probs[i])));
  }
  return py::make_tuple(tl, pl, ql, py::int_(d.match_len));
}

py::object state_obj(State st) {
  if (!st.valid()) return py::none();
  return py::make_tuple(st.node, st.extra);
}

State state_of(py::handle obj, const SuffixIndex& idx) {
  py::tuple t = py::reinterpret_borrow<py::object>(obj).cast<py::tuple>();
  if (t.size() != 2) throw py::value_error("state must be a (node, extra) tuple");
  State st{t[0].cast<int32_t>(), t[1].cast<int32_t>()};
  if (st.node < 0 || (size_t)st.node >= idx.node_capacity()) throw py::index_error("node id out of range");
  return st;
}

// ------------------------------------------------------------------------------ wrappers
struct PyCore {
  SuffixCore core;
  std::mutex mu;
  std::unique_ptr<DraftLengthController> ctl;  // set_controller(); none: drafts are not sized
  Stepper stepper;
  StepOutput step_out;
  PyCore(int max_depth, int64_t global_cache_tokens, int64_t max_children, double min_path_prob, double kappa,
         bool cache_prompts, int64_t local_weight, bool live_outputs, int64_t scope_cache_tokens,
         int64_t max_scopes)
      : core(max_depth, global_cache_tokens, max_children, min_path_prob, kappa, cache_prompts, local_weight,
             live_outputs, scope_cache_tokens, max_scopes) {}
};

// A scope from Python: a str, or None for the unscoped pool
std::optional<std::string> scope_key(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!py::isinstance<py::str>(obj))
    throw py::type_error("scope must be a string or None, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  return obj.cast<std::string>();
}

using Lock = std::lock_guard<std::mutex>;

// Every binding that touches the core takes its lock first, through locked(): KeepGil for quick
// calls, NoGil to release the GIL before waiting for the lock (long calls; other Python threads
// run meanwhile).
struct KeepGil {};
struct NoGil {
  py::gil_scoped_release rel;
};
template <class Gil = KeepGil, class F>
decltype(auto) locked(PyCore& s, F&& f) {
  Gil gil;
  Lock lk(s.mu);
  return f();
}

// The binding of a SuffixCore method: locked(), then the call.
template <class Gil = KeepGil, class R, class... A>
auto core_call(R (SuffixCore::*m)(A...)) {
  return [m](PyCore& s, A... a) -> R { return locked<Gil>(s, [&]() -> R { return (s.core.*m)(a...); }); };
}
template <class Gil = KeepGil, class R, class... A>
auto core_call(R (SuffixCore::*m)(A...) const) {
  return [m](PyCore& s, A... a) -> R { return locked<Gil>(s, [&]() -> R { return (s.core.*m)(a...); }); };
}

using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

DraftLengthController& controller_of(PyCore& s) {
  if (!s.ctl) throw ValueErr{"this core has no draft-length controller (call set_controller first)"};
  return *s.ctl;
}

std::vector<double> doubles_of(py::handle obj) {
  std::vector<double> v;
  for (py::handle item : obj) v.push_back(item.cast<double>());
  return v;
}

// Per-row integers from a list, a tuple, a 1-D integer array (numpy, read in place) or an
// iterable; an int is broadcast; None gives `fill`. Exactly `n` entries are required.
std::vector<int64_t> row_ints(py::handle obj, size_t n, const char* name, int64_t fill, bool allow_none) {
  if (obj.is_none()) {
    if (!allow_none) throw ValueErr{std::string(name) + " is required"};
    return std::vector<int64_t>(n, fill);
  }
  if (PyLong_Check(obj.ptr())) return std::vector<int64_t>(n, to_i64(obj.ptr()));
  std::vector<int64_t> out = ints_of<int64_t>(obj);
  if (out.size() != n)
    throw ValueErr{std::string(name) + " must have one entry per row (" + std::to_string(n) + "), got " +
                   std::to_string(out.size())};
  return out;
}

py::tuple run_step(PyCore& self, py::handle handles_obj, const I32Array& tokens, py::handle num_tokens_obj,
                   py::handle num_prompt_obj, py::handle budgets_obj, py::handle rows_obj, py::handle offsets_obj,
                   py::handle accepted_obj, py::handle emitted_obj, py::handle finished_obj, py::handle aborted_obj,
                   int64_t vocab_size, bool tree, int64_t max_len, bool trees, bool detail) {
  std::vector<int64_t> handles = ints_of<int64_t>(handles_obj);
  const size_t n = handles.size();
  std::vector<int64_t> num_tokens = row_ints(num_tokens_obj, n, "num_tokens", 0, false);
  std::vector<int64_t> num_prompt = row_ints(num_prompt_obj, n, "num_prompt_tokens", 0, false);
  std::vector<int64_t> budgets = row_ints(budgets_obj, n, "budgets", 0, false);
  std::vector<int64_t> accepted = row_ints(accepted_obj, n, "num_accepted", -1, true);
  std::vector<int64_t> emitted = row_ints(emitted_obj, n, "num_emitted", -1, true);
  std::vector<int64_t> finished = finished_obj.is_none() ? std::vector<int64_t>() : ints_of<int64_t>(finished_obj);
  std::vector<int64_t> aborted = aborted_obj.is_none() ? std::vector<int64_t>() : ints_of<int64_t>(aborted_obj);
  std::vector<int64_t> row_offset(n), row_start(n, 0);
  if (!offsets_obj.is_none()) {  // flat: row j's tokens are the last tokens of its history
    if (tokens.ndim() != 1) throw ValueErr{"token_offsets needs a 1-D token_ids array"};
    std::vector<int64_t> off = row_ints(offsets_obj, n + 1, "token_offsets", 0, false);
    for (size_t j = 0; j < n; ++j) {
      row_offset[j] = off[j];
      row_start[j] = num_tokens[j] - (off[j + 1] - off[j]);
    }
  } else {  // a buffer of rows: row j's history is token_ids[rows[j], :num_tokens[j]]
    if (tokens.ndim() != 2) throw ValueErr{"token_ids must be an (N, L) array, or 1-D with token_offsets"};
    const int64_t nrows = (int64_t)tokens.shape(0), width = (int64_t)tokens.shape(1);
    std::vector<int64_t> rows = rows_obj.is_none() ? std::vector<int64_t>() : row_ints(rows_obj, n, "rows", 0, false);
    for (size_t j = 0; j < n; ++j) {
      const int64_t r = rows_obj.is_none() ? (int64_t)j : rows[j];
      if (r < 0 || r >= nrows) throw ValueErr{"rows must lie in 0.." + std::to_string(nrows - 1)};
      row_offset[j] = r * width;
    }
  }
  if (max_len >= 0)
    for (size_t j = 0; j < n; ++j) budgets[j] = std::min(budgets[j], max_len - num_tokens[j]);
  StepInput in;
  in.num_rows = n;
  in.handles = handles.data();
  in.tokens = tokens.data();
  in.tokens_size = (int64_t)tokens.size();
  in.row_offset = row_offset.data();
  in.row_start = row_start.data();
  in.num_prompt = num_prompt.data();
  in.num_tokens = num_tokens.data();
  in.num_accepted = accepted.data();
  in.num_emitted = emitted.data();
  in.budgets = budgets.data();
  in.finished = finished.data();
  in.num_finished = finished.size();
  in.aborted = aborted.data();
  in.num_aborted = aborted.size();
  in.vocab_size = vocab_size;
  in.tree = tree;
  in.trees = trees;
  in.detail = detail;
  StepOutput out;  // a copy taken under the lock: another thread's step may reuse step_out
  locked<NoGil>(self, [&] {
    self.stepper.run(self.core, self.ctl.get(), in, self.step_out);
    out = self.step_out;
  });
  py::array_t<int32_t> toks((py::ssize_t)out.tokens.size());
  if (!out.tokens.empty()) std::memcpy(toks.mutable_data(), out.tokens.data(), out.tokens.size() * sizeof(int32_t));
  py::array_t<int32_t> lens((py::ssize_t)n);
  int64_t drafts = 0;
  for (size_t j = 0; j < n; ++j) drafts += out.lengths[j] > 0;
  if (n) std::memcpy(lens.mutable_data(), out.lengths.data(), n * sizeof(int32_t));
  const StepCounts& c = out.counts;
  py::tuple counts =
      py::make_tuple(c.started, c.finished, c.aborted, c.accepted, drafts, (int64_t)out.tokens.size());
  if (!trees && !detail) return py::make_tuple(toks, lens, counts);
  py::array_t<int32_t> parents((py::ssize_t)out.parents.size());
  if (!out.parents.empty())
    std::memcpy(parents.mutable_data(), out.parents.data(), out.parents.size() * sizeof(int32_t));
  if (!detail) return py::make_tuple(toks, lens, counts, parents);
  py::array_t<double> probs((py::ssize_t)out.probs.size());
  if (!out.probs.empty()) std::memcpy(probs.mutable_data(), out.probs.data(), out.probs.size() * sizeof(double));
  py::array_t<int32_t> match_lens((py::ssize_t)n);
  if (n) std::memcpy(match_lens.mutable_data(), out.match_lens.data(), n * sizeof(int32_t));
  return py::make_tuple(toks, lens, counts, parents, probs, match_lens);
}

// vLLM's list[list[int]] for `num_rows` batch rows from the drafts of the rows given (`rows`:
// their batch rows, None: 0..). Checks what must never reach the engine: a draft longer than its
// budget, or a token id outside 0..vocab_size-1.
py::list engine_rows(const I32Array& tokens, const I32Array& lengths, int64_t num_rows, py::handle rows_obj,
                     py::handle budgets_obj, int64_t vocab_size) {
  const size_t n = (size_t)lengths.size();
  std::vector<int64_t> rows = rows_obj.is_none() ? std::vector<int64_t>() : row_ints(rows_obj, n, "rows", 0, false);
  std::vector<int64_t> budgets = row_ints(budgets_obj, n, "budgets", 0, false);
  const int32_t* t = tokens.data();
  const int32_t* l = lengths.data();
  size_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    if (l[j] < 0 || l[j] > std::max<int64_t>(0, budgets[j]))
      throw ValueErr{"drafter returned a draft of " + std::to_string(l[j]) + " tokens for row " + std::to_string(j) +
                     " (at most " + std::to_string(std::max<int64_t>(0, budgets[j])) + " allowed)"};
    total += (size_t)l[j];
  }
  if (total != (size_t)tokens.size())
    throw ValueErr{"drafter returned " + std::to_string(tokens.size()) + " tokens for lengths adding up to " +
                   std::to_string(total)};
  for (size_t i = 0; i < total; ++i)
    if (t[i] < 0 || (vocab_size > 0 && t[i] >= vocab_size))
      throw ValueErr{"drafter proposed token id " + std::to_string(t[i]) + ", outside the vocabulary (0.." +
                     std::to_string(vocab_size - 1) + ")"};
  py::list res(num_rows);
  std::vector<char> filled((size_t)std::max<int64_t>(0, num_rows), 0);
  size_t a = 0;
  for (size_t j = 0; j < n; ++j) {
    const int64_t r = rows_obj.is_none() ? (int64_t)j : rows[j];
    if (r < 0 || r >= num_rows) throw ValueErr{"rows must lie in 0.." + std::to_string(num_rows - 1)};
    const size_t k = (size_t)l[j];
    PyObject* row = new_ref_or_throw(PyList_New((Py_ssize_t)k));
    py::object keep = py::reinterpret_steal<py::object>(row);
    for (size_t i = 0; i < k; ++i) PyList_SET_ITEM(row, (Py_ssize_t)i, new_ref_or_throw(PyLong_FromLong(t[a + i])));
    res[(size_t)r] = keep;
    filled[(size_t)r] = 1;
    a += k;
  }
  for (int64_t r = 0; r < num_rows; ++r)
    if (!filled[(size_t)r]) res[(size_t)r] = py::reinterpret_steal<py::object>(new_ref_or_throw(PyList_New(0)));
  return res;
}

// Drafts as vLLM takes them: [list(tokens[a:a + lengths[j]]) for each row j].
py::list rows_to_lists(const I32Array& tokens, const I32Array& lengths) {
  const int32_t* t = tokens.data();
  const int32_t* l = lengths.data();
  const size_t n = (size_t)lengths.size();
  py::list res(n);
  size_t a = 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t k = (size_t)std::max<int32_t>(0, l[j]);
    if (a + k > (size_t)tokens.size()) throw ValueErr{"lengths add up to more than the tokens given"};
    PyObject* row = new_ref_or_throw(PyList_New((Py_ssize_t)k));
    py::object keep = py::reinterpret_steal<py::object>(row);
    for (size_t i = 0; i < k; ++i) PyList_SET_ITEM(row, (Py_ssize_t)i, new_ref_or_throw(PyLong_FromLong(t[a + i])));
    res[j] = keep;
    a += k;
  }
  return res;
}

}  // namespace

PYBIND11_MODULE(_suffix_native, m) {
  m.doc() = "Native twin of specdraft.proposers.suffix_index / suffix_core (identical answers).";
  m.attr("AVAILABLE") = true;
  m.attr("NODE_BYTES") = (int)sizeof(Node);
#ifdef SPECDRAFT_COUNTERS
  m.def("_counters", []() {
    const char* names[] = {"find", "walk", "walk_levels", "enum", "enum_children", "heavy_q", "global_finds",
                           "drafts", "len_g", "len_l", "reanchor", "append", "append_levels", "new_node", "probes"};
    py::dict d;
    for (int i = 0; i < 15; ++i) {
      d[names[i]] = g_counters[i];
      g_counters[i] = 0;
    }
    return d;
  });
#endif
  m.def(
      "_set_debug_checks",
      [](bool on) {
        bool old = debug_checks();
        debug_checks() = on;
        return old;
      },
      py::arg("on"), "Tests only: cross-check the fast match paths against the plain algorithm.");
  m.def(
      "_set_heavy_threshold",
      [](int t) {
        int old = heavy_threshold();
        heavy_threshold() = t < 0 ? 0 : t;
        return old;
      },
      py::arg("children"),
      "Tests only: nodes with more children than this keep a cached top list (default 4). Returns the old value.");

  m.def("engine_rows", &engine_rows, py::arg("tokens"), py::arg("lengths"), py::arg("num_rows"),
        py::arg("rows"), py::arg("budgets"), py::arg("vocab_size"),
        "Drafts as one list per batch row (rows not given get []), after checking lengths against budgets "
        "and token ids against the vocabulary (ValueError otherwise).");
  m.def("rows_to_lists", &rows_to_lists, py::arg("tokens"), py::arg("lengths"),
        "Split concatenated drafts into one list of ints per row (the form vLLM takes).");

  py::register_exception_translator([](std::exception_ptr p) {
    if (p && !set_index_error(p)) std::rethrow_exception(p);  // anything else: pybind11's own
  });

  // ------------------------------------------------------------------------- SuffixIndex
  py::class_<SuffixIndex>(m, "SuffixIndex",
                          "Depth-bounded suffix trie with counts and lazy leaves (native twin of "
                          "specdraft.proposers.suffix_index.SuffixIndex; same answers, private node ids).")
      .def(py::init<int>(), py::arg("max_depth") = 24)
      .def_property_readonly("max_depth", &SuffixIndex::max_depth)
      .def_property_readonly("num_tokens", &SuffixIndex::num_tokens)
      .def("num_nodes", &SuffixIndex::num_nodes)
      .def("add_sequence", [](SuffixIndex& s, int64_t seq) { s.add_sequence(seq); }, py::arg("seq"))
      .def("append", [](SuffixIndex& s, int64_t seq, py::handle tok) { s.append(seq, to_token(tok.ptr())); },
           py::arg("seq"), py::arg("token"))
      .def("extend",
           [](SuffixIndex& s, int64_t seq, py::handle toks) {
             std::vector<int32_t> v = tokens_of(toks);
             s.extend(seq, v.data(), v.size());
           },
           py::arg("seq"), py::arg("tokens"))
      .def("close", &SuffixIndex::close, py::arg("seq"))
      .def("remove", &SuffixIndex::remove, py::arg("seq"))
      .def("sequence",
           [](const SuffixIndex& s, int64_t seq) {
             const auto& v = s.tokens(seq);
             py::list l(v.size());
             for (size_t i = 0; i < v.size(); ++i) l[i] = v[i];
             return l;
           },
           py::arg("seq"))
      .def("walk",
           [](const SuffixIndex& s, py::handle toks) {
             std::vector<int32_t> v = tokens_of(toks);
             return state_obj(s.walk(v.data(), (int64_t)v.size()));
           },
           py::arg("tokens"))
      .def("continuations",
           [](const SuffixIndex& s, py::handle state) {
             State st = state_of(state, s);
             std::vector<Cont> cs;
             s.continuations(st, cs);
             py::list l(cs.size());
             for (size_t i = 0; i < cs.size(); ++i) l[i] = py::make_tuple(cs[i].tok, cs[i].cnt, state_obj(cs[i].next));
             return l;
           },
           py::arg("state"))
      .def("state_depth", [](const SuffixIndex& s, py::handle state) { return s.state_depth(state_of(state, s)); },
           py::arg("state"))
      .def("longest_match",
           [](const SuffixIndex& s, py::handle ctx, int64_t hi) {
             std::vector<int32_t> v = tokens_of(ctx);
             int64_t L = 0;
             State st = s.longest_match(v.data(), (int64_t)v.size(), hi, L);
             return py::make_tuple(state_obj(st), L);
           },
           py::arg("context"), py::arg("hi"))
      .def("check", &SuffixIndex::check)
      .def("memory_bytes", &SuffixIndex::memory_bytes)
      .def("compact", &SuffixIndex::compact,
           "Renumber nodes breadth-first and shrink the arrays (node ids change afterwards).");

  // -------------------------------------------------------------------------- SuffixCore
  py::class_<PyCore>(m, "SuffixCore",
                     "Suffix drafting over a per-request index and a global cache (native twin of "
                     "specdraft.proposers.suffix_core.SuffixCore; identical drafts).")
      .def(py::init<int, int64_t, int64_t, double, double, bool, int64_t, bool, int64_t, int64_t>(),
           py::arg("max_depth") = 24, py::arg("global_cache_tokens") = 1000000, py::arg("max_children") = 4,
           py::arg("min_path_prob") = 0.02, py::arg("kappa") = 1.0, py::arg("cache_prompts") = false,
           py::arg("local_weight") = 1, py::arg("live_outputs") = false, py::arg("scope_cache_tokens") = -1,
           py::arg("max_scopes") = 1024)
      .def_property_readonly("scope_cache_tokens", [](PyCore& s) { return s.core.scope_cache_tokens(); })
      .def_property_readonly("max_scopes", [](PyCore& s) { return s.core.max_scopes(); })
      .def("set_scope",
           [](PyCore& s, int64_t h, py::handle scope) {
             std::optional<std::string> k = scope_key(scope);
             locked(s, [&] { s.core.set_scope(h, k); });
           },
           py::arg("handle"), py::arg("scope"),
           "The scope (a str; None: the unscoped pool) request handle starts in.")
      .def("scope_of",
           [](PyCore& s, int64_t h) -> py::object {
             std::optional<std::string> k = locked(s, [&] { return s.core.scope_of(h); });
             if (!k) return py::none();
             return py::str(*k);
           },
           py::arg("handle"))
      .def("drop_scope", core_call(&SuffixCore::drop_scope), py::arg("handle"))
      .def("num_scopes", core_call(&SuffixCore::num_scopes))
      .def("scope_tokens",
           [](PyCore& s, int64_t k) {
             std::vector<int64_t> v = locked(s, [&] { return s.core.scope_tokens(k); });
             py::list out;
             for (int64_t x : v) out.append(x);
             return out;
           },
           py::arg("k") = 5)
      .def("check_scopes", core_call(&SuffixCore::check_scopes))
      .def_property_readonly("max_depth", [](PyCore& s) { return s.core.max_depth(); })
      .def_property_readonly("global_cache_tokens", [](PyCore& s) { return s.core.global_cache_tokens(); })
      .def_property_readonly("max_children", [](PyCore& s) { return s.core.max_children(); })
      .def_property_readonly("min_path_prob", [](PyCore& s) { return s.core.min_path_prob(); })
      .def_property_readonly("kappa", [](PyCore& s) { return s.core.kappa(); })
      .def_property_readonly("local_weight", [](PyCore& s) { return s.core.local_weight(); })
      .def_property_readonly("cache_prompts", [](PyCore& s) { return s.core.cache_prompts(); })
      .def_property_readonly("live_outputs", [](PyCore& s) { return s.core.live_outputs(); })
      .def_property_readonly("cached_tokens",
                             core_call(&SuffixCore::cached_tokens))
      .def_property_readonly("corpus_tokens",
                             core_call(&SuffixCore::corpus_tokens))
      .def("start",
           [](PyCore& s, int64_t h, py::handle prompt) {
             std::vector<int32_t> v = tokens_of(prompt);
             return locked<NoGil>(s, [&] { s.core.start(h, v.data(), v.size()); });
           },
           py::arg("handle"), py::arg("prompt"))
      .def("extend",
           [](PyCore& s, int64_t h, py::handle toks) {
             std::vector<int32_t> v = tokens_of(toks);
             return locked(s, [&] { s.core.extend(h, v.data(), v.size()); });
           },
           py::arg("handle"), py::arg("tokens"))
      .def("has", core_call(&SuffixCore::has),
           py::arg("handle"))
      .def("num_tokens", core_call(&SuffixCore::num_tokens),
           py::arg("handle"))
      .def("abort", core_call(&SuffixCore::abort),
           py::arg("handle"), py::arg("keep_scope") = false)
      .def("finish", core_call<NoGil>(&SuffixCore::finish),
           py::arg("handle"), py::arg("export") = true)
      .def("enable_export", core_call(&SuffixCore::enable_export), py::arg("budget_tokens"),
           "Keep each request that finishes normally, as drain_finished() returns it, at most "
           "budget_tokens tokens (oldest dropped first); <= 0: off.")
      .def("drain_finished",
           [](PyCore& s) {
             std::deque<SuffixCore::Finished> got = locked<NoGil>(s, [&] { return s.core.take_finished(); });
             py::list out(got.size());
             std::vector<int32_t*> dst(got.size());
             for (size_t i = 0; i < got.size(); ++i) {
               py::array_t<int32_t> a((py::ssize_t)got[i].toks.size());
               dst[i] = a.mutable_data();
               out[i] = py::make_tuple(got[i].scope ? py::object(py::str(*got[i].scope)) : py::object(py::none()), a);
             }
             {
               py::gil_scoped_release rel;
               for (size_t i = 0; i < got.size(); ++i)
                 std::memcpy(dst[i], got[i].toks.data(), got[i].toks.size() * sizeof(int32_t));
             }
             return out;
           },
           "[(scope or None, int32 array)] of the requests finished since the last call, oldest first.")
      .def("export_dropped_tokens", core_call(&SuffixCore::export_dropped_tokens),
           "Tokens of finished requests dropped from a full outbox so far.")
      .def("load_corpus",
           [](PyCore& s, py::handle toks, py::handle scopes) {
             std::vector<int32_t> v = tokens_of(toks);
             std::optional<std::vector<std::optional<std::string>>> ks;
             if (!scopes.is_none()) {
               ks.emplace();
               for (py::handle k : scopes) ks->push_back(scope_key(k));
             }
             return locked<NoGil>(s, [&] { s.core.load_corpus(v.data(), v.size(), ks); });
           },
           py::arg("tokens"), py::arg("scopes") = py::none())
      .def("draft",
           [](PyCore& s, int64_t h, int64_t budget, bool tree) {
             static thread_local Draft d;
             locked(s, [&] { s.core.draft(h, budget, tree, d); });
             return draft_tuple(d);
           },
           py::arg("handle"), py::arg("budget"), py::arg("tree") = false,
           "Draft up to budget nodes: (token_ids, parents, probs, match_len).")
      .def("step", &run_step, py::arg("handles"), py::arg("token_ids"), py::arg("num_tokens"),
           py::arg("num_prompt_tokens"), py::arg("budgets"), py::arg("rows") = py::none(),
           py::arg("token_offsets") = py::none(), py::arg("num_accepted") = py::none(),
           py::arg("num_emitted") = py::none(), py::arg("finished") = py::none(), py::arg("aborted") = py::none(),
           py::arg("vocab_size") = 0, py::arg("tree") = false, py::arg("max_len") = -1,
           py::arg("trees") = false, py::arg("detail") = false,
           "One engine step over flat arrays (see SpecDrafter.step): finish/abort, sync every row, draft, "
           "size the drafts with the controller. Returns (tokens int32[sum], lengths int32[rows], "
           "(started, finished, aborted, accepted, drafts, drafted_tokens)), and with trees=True the "
           "whole tree drafts and their parents int32[sum] as a fourth entry; with detail=True the "
           "drafts' parents, probs float64[sum] and root match lengths int32[rows] follow (a "
           "per-request draft's DraftTree). GIL released.")
      .def("set_controller",
           [](PyCore& s, py::handle curve, double cost_prior, double calibration_prior, double request_prior,
              double request_decay, double idle_decay, double min_gain, py::handle cost_params,
              double max_waste, double match_prior, int64_t max_scopes) {
             std::vector<std::pair<double, double>> pts;
             for (py::handle p : curve) {
               py::sequence q = py::reinterpret_borrow<py::sequence>(p);
               pts.emplace_back(q[0].cast<double>(), q[1].cast<double>());
             }
             CostParams cp;
             if (!cost_params.is_none()) {
               std::vector<double> v = doubles_of(cost_params);
               if (v.size() != 7) throw ValueErr{"cost_params needs 7 numbers (see controller.PARAMS)"};
               cp = CostParams{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
             } else if (pts.size() < 2) {
               throw ValueErr{"cost curve needs at least 2 points"};
             }
             if (!pts.empty() && pts.size() < 2) throw ValueErr{"cost curve needs at least 2 points"};
             ControllerParams prm{calibration_prior, request_prior, request_decay, idle_decay, min_gain,
                                  max_waste, match_prior, max_scopes};
             return locked(s, [&] {
               s.ctl = std::make_unique<DraftLengthController>(CostModel(cp, pts, cost_prior), prm);
               // keys are the core's handles: each sized with its own scope's calibration
               SuffixCore* core = &s.core;
               s.ctl->set_scope_of([core](int64_t h, std::string& out) {
                 const std::string* sc = core->scope_ptr(h);
                 if (sc == nullptr) return false;
                 out = *sc;
                 return true;
               });
             });
           },
           py::arg("curve"), py::arg("cost_prior") = 4.0, py::arg("calibration_prior") = 8.0,
           py::arg("request_prior") = 1.0, py::arg("request_decay") = 0.9, py::arg("idle_decay") = 0.9,
           py::arg("min_gain") = 0.1, py::arg("cost_params") = py::none(), py::arg("max_waste") = 4.0,
           py::arg("match_prior") = 2.0, py::arg("max_scopes") = 1024,
           "Attach the native draft-length controller (twin of DraftLengthController): a cost curve "
           "[(tokens, cost), ...] and/or the seven GPU cost parameters.")
      .def("ctl_observe_pass",
           [](PyCore& s, int64_t tokens, double seconds) {
             return locked(s, [&] { controller_of(s).observe_pass(tokens, seconds); });
           },
           py::arg("tokens"), py::arg("seconds"),
           "A pass of the batch last sized: corrects the shared cost model, and the batch's one "
           "scope's when it had one (DraftLengthController.observe_pass).")
      .def("ctl_observe",
           [](PyCore& s, int64_t h, int64_t n) {
             return locked(s, [&] { controller_of(s).observe(h, n); });
           })
      .def("ctl_forget",
           [](PyCore& s, int64_t h) {
             return locked(s, [&] { controller_of(s).forget(h); });
           })
      .def("ctl_calibrated",
           [](PyCore& s, double p, py::handle scope) {
             std::optional<std::string> k = scope_key(scope);
             return locked(s, [&] { return controller_of(s).calibrated(p, k ? &*k : nullptr); });
           },
           py::arg("p"), py::arg("scope") = py::none())
      .def("ctl_chosen_lengths",
           [](PyCore& s) {
             return locked(s, [&] {
               py::dict d;
               for (const auto& kv : controller_of(s).chosen_lengths()) d[py::int_(kv.first)] = kv.second;
               return d;
             });
           })
      .def("num_requests", core_call(&SuffixCore::num_requests))
      .def("global_tokens", core_call(&SuffixCore::global_tokens))
      .def("global_nodes", core_call(&SuffixCore::global_nodes))
      .def("memory_bytes", core_call(&SuffixCore::memory_bytes),
           "Bytes held by the global index (node array, hash table, token storage, bookkeeping).")
      .def("requests_memory_bytes", core_call(&SuffixCore::requests_memory_bytes),
           "Bytes held by the live requests' local indexes.")
      .def("evict_global", core_call<NoGil>(&SuffixCore::evict_global),
           py::arg("keep_tokens") = 0,
           "Native extension: evict cached requests (oldest first) until at most keep_tokens remain.")
      .def("compact_global", core_call<NoGil>(&SuffixCore::compact_global),
           "Native extension: renumber the global index breadth-first and shrink its arrays.")
      .def("check_global",
           [](PyCore& s) {
             return locked(s, [&] { s.core.global_index().check(); });
           })
      .def("global_stats",
           [](PyCore& s) {
             return locked(s, [&] {
               const SuffixIndex& g = s.core.global_index();
               py::dict d;
               d["nodes"] = g.num_nodes();
               d["node_array"] = g.node_capacity();
               d["node_reserved"] = g.node_reserved();
               d["free_nodes"] = g.free_nodes();
               d["zombies"] = g.zombies();
               d["heavy_nodes"] = g.heavy_nodes();
               d["hash_slots"] = g.slot_count();
               d["tokens"] = g.num_tokens();
               d["memory_bytes"] = s.core.memory_bytes();
               return d;
             });
           },
           "Native extension: sizes of the global index's structures.")
      .def("check_requests", core_call(&SuffixCore::check_requests));
}
