// The engine step as the engine hands it over: one call from the engine's own arrays to the
// engine's own answer.
//
// `EngineStep` sits between an engine adapter and the core's Stepper (step.h). It takes the
// batch as the engine keeps it (the request id of each row, the tokens each row emitted this
// step, the engine's token buffer and lengths, the drafts verified this step by request id, the
// requests that left since the last step), keeps the request id -> handle map, turns the rows
// into the Stepper's flat input (accepted counts, per-row budgets from the step's budget,
// per-request opt-out, a request that this step's tokens ended, the length limit), runs the step with the GIL
// released, finishes the requests that ended, counts what happened, and returns one list of
// draft token ids per row (checked: no draft longer than its budget, no id outside the
// vocabulary). Which engine arrays are handed over, and what a request's stop rule is, is the
// adapter's business: this file holds no engine fact.
//
// Plain-Python twin: the adapter's step_rows + SpecDrafter.step + engine_rows path
// (adapters/vllm_step.py), checked against this one by tests/test_engine_step_twin.py.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller.h"
#include "py_convert.h"
#include "step.h"
#include "suffix_core.h"

namespace specdraft {
// What the adapter says about a request, asked once when the request is first seen.
struct RequestRule {
  bool speculates = true;      // false: the request opted out of speculation (cap 0)
  bool can_end = false;        // false: no stop rule known (never ended here)
  int64_t max_output = -1;     // the request ends once it has this many output tokens (-1: none)
  std::vector<int32_t> stops;  // a new token among these ends the request
};

class EngineStep {
 public:
  using py_object = pybind11::object;

  // `handles`: the drafter's request id -> handle dict, shared with its per-request API.
  EngineStep(pybind11::dict handles, int64_t vocab_size, bool tree)
      : handles_(std::move(handles)), vocab_size_(vocab_size), tree_(tree) {}

  int64_t next_handle = 0;  // the drafter's handle counter (shared with its per-request API)
  int64_t total_ns = 0;     // time inside step() since construction (benchmarks read it)

  // Counts since the last take_drafter_counters() / take_engine_counters().
  struct DrafterCounters {
    int64_t started = 0, finished = 0, aborted = 0, accepted = 0, drafts = 0, drafted = 0;
    int64_t draft_ns = 0;
  } drafter_counters;
  struct EngineCounters {
    int64_t rows = 0, drafts = 0, draft_tokens = 0;
    std::vector<int64_t> length_counts;  // rows per draft length
    // the drafts the engine verified in this step, counted as vLLM's spec_decode counters
    // count them (a row that emitted tokens and had a draft: one draft, its tokens, the
    // accepted ones); the adapter subtracts the draft tokens the engine marked invalid
    int64_t verified_drafts = 0, verified_tokens = 0, verified_accepted = 0;
  } engine_counters;

  // Forget the rules of every request (the drafter dropped its requests).
  void clear() { rules_.clear(); }
  void forget(int64_t h) { rules_.erase(h); }

  template <class PyCore>
  pybind11::list step(PyCore& core, pybind11::handle req_ids, pybind11::handle new_tokens,
                      pybind11::handle num_tokens_obj, pybind11::handle token_buffer,
                      pybind11::handle num_prompt_obj, pybind11::handle verified, int64_t budget,
                      int64_t max_len, int64_t end_len, pybind11::handle describe, pybind11::handle finished,
                      pybind11::handle aborted, int64_t scored_tokens, double scored_seconds) {
    namespace py = pybind11;
    const auto t0 = std::chrono::steady_clock::now();
    PyObject* ids = req_ids.ptr();
    PyObject* rows_new = new_tokens.ptr();
    if (!PyList_Check(rows_new)) throw ValueErr{"new_tokens must be a list (one list of token ids per row)"};
    if (!PyList_Check(ids)) throw ValueErr{"req_ids must be a list of request ids"};
    const Py_ssize_t num_rows = PyList_GET_SIZE(rows_new);
    if (PyList_GET_SIZE(ids) < num_rows)
      throw ValueErr{"the batch has " + std::to_string(PyList_GET_SIZE(ids)) + " request ids for " +
                     std::to_string(num_rows) + " rows"};
    PyObject* hmap = handles_.ptr();
    PyObject* vmap = verified.is_none() ? nullptr : verified.ptr();
    if (vmap && !PyDict_Check(vmap)) throw ValueErr{"verified must be a dict (request id -> draft tokens)"};

    // events first: requests that left since the last step
    fin_.clear();
    ab_.clear();
    pop_all(finished, fin_);
    pop_all(aborted, ab_);

    // the rows that emitted tokens (rows still in prefill emit none and are left out)
    handles_v_.clear();
    rows_.clear();
    ntok_.clear();
    nprompt_.clear();
    budgets_.clear();
    acc_.clear();
    emit_.clear();
    ended_.clear();
    ended_ids_.clear();
    IntColumn num_tokens(num_tokens_obj.ptr(), "num_tokens");
    IntColumn num_prompt(num_prompt_obj.ptr(), "num_prompt_tokens");
    if (num_tokens.size < num_rows || num_prompt.size < num_rows)
      throw ValueErr{"num_tokens and num_prompt_tokens need an entry for each of the " + std::to_string(num_rows) +
                     " rows"};
    bool all_rows = true;
    for (Py_ssize_t j = 0; j < num_rows; ++j) {
      PyObject* toks = PyList_GET_ITEM(rows_new, j);
      const Py_ssize_t e = PyList_Check(toks) ? PyList_GET_SIZE(toks) : checked_len(toks);
      if (e == 0) {
        all_rows = false;
        continue;
      }
      PyObject* rid = PyList_GET_ITEM(ids, j);
      int64_t h;
      PyObject* hv = PyDict_GetItemWithError(hmap, rid);
      if (hv) {
        h = to_i64(hv);
      } else {
        if (PyErr_Occurred()) throw py::error_already_set();
        h = next_handle++;
        py::object hobj = py::reinterpret_steal<py::object>(new_ref_or_throw(PyLong_FromLongLong(h)));
        if (PyDict_SetItem(hmap, rid, hobj.ptr()) != 0) throw py::error_already_set();
      }
      auto it = rules_.find(h);
      if (it == rules_.end()) it = rules_.emplace(h, rule_of(describe, rid)).first;
      const RequestRule& rule = it->second;
      int64_t drafted = 0;
      if (vmap) {
        PyObject* d = PyDict_GetItemWithError(vmap, rid);
        if (d) {
          drafted = checked_len(d);
        } else if (PyErr_Occurred()) {
          throw py::error_already_set();
        }
      }
      const int64_t n = num_tokens[j];
      const int64_t np = num_prompt[j];
      bool ended = false;
      if (rule.can_end) {
        ended = (rule.max_output >= 0 && n - np >= rule.max_output) || n >= end_len;
        if (!ended && !rule.stops.empty()) {
          for (Py_ssize_t i = 0; i < e && !ended; ++i) {
            PyObject* t = PyList_Check(toks) ? PyList_GET_ITEM(toks, i) : nullptr;
            py::object keep;
            if (!t) {
              keep = py::reinterpret_steal<py::object>(new_ref_or_throw(PySequence_GetItem(toks, i)));
              t = keep.ptr();
            }
            const int64_t tok = to_i64(t);
            for (int32_t s : rule.stops) ended |= (tok == s);
          }
        }
      }
      handles_v_.push_back(h);
      rows_.push_back((int64_t)j);
      ntok_.push_back(n);
      nprompt_.push_back(np);
      budgets_.push_back(rule.speculates && !ended ? std::min(budget, max_len - n) : std::min<int64_t>(0, max_len - n));
      // every emitted token but the last (bonus or correction) was an accepted draft token: the
      // twin of proposers/base.py accepted_count
      const int64_t acc = drafted > 0 ? std::min<int64_t>(e - 1, drafted) : -1;
      acc_.push_back(acc);
      if (acc >= 0) {
        engine_counters.verified_drafts += 1;
        engine_counters.verified_tokens += drafted;
        engine_counters.verified_accepted += acc;
      }
      emit_.push_back(e);
      if (ended) {
        ended_.push_back(h);
        ended_ids_.push_back(rid);
      }
    }
    (void)all_rows;

    // the engine's token buffer, as is: row j's history is buffer[rows[j], :num_tokens[j]]
    // read in place when it is a C-contiguous int32 array (an engine's token buffer usually is), else an int32 copy
    Buffer held;
    py::object copy_holder;  // (an array_t default-constructs a numpy array: not on this path)
    const int32_t* data;
    int64_t nbuf, width;
    py::object arr_obj = py::isinstance<py::array>(token_buffer) ? py::reinterpret_borrow<py::object>(token_buffer)
                                                                 : py::object();
    py::array arr = arr_obj ? py::reinterpret_steal<py::array>(arr_obj.release()) : py::reinterpret_steal<py::array>(py::handle());
    if (arr && arr.ndim() == 2 && arr.itemsize() == 4 && arr.dtype().kind() == 'i' &&
        (arr.flags() & py::array::c_style)) {
      data = (const int32_t*)arr.data();
      nbuf = (int64_t)arr.shape(0);
      width = (int64_t)arr.shape(1);
    } else if (held.get(token_buffer.ptr(), PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) && held.view.ndim == 2 &&
               held.view.itemsize == 4 && (held.format() == 'i' || held.format() == 'l')) {
      data = (const int32_t*)held.view.buf;
      nbuf = (int64_t)held.view.shape[0];
      width = (int64_t)held.view.shape[1];
    } else {
      auto copy = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(token_buffer);
      if (!copy) throw py::error_already_set();
      copy_holder = copy;
      if (copy.ndim() != 2) throw ValueErr{"the token buffer must be an (N, L) array"};
      data = copy.data();
      nbuf = (int64_t)copy.shape(0);
      width = (int64_t)copy.shape(1);
    }
    const size_t m = handles_v_.size();
    offs_.resize(m);
    starts_.assign(m, 0);
    for (size_t r = 0; r < m; ++r) {
      if (rows_[r] >= nbuf) throw ValueErr{"rows must lie in 0.." + std::to_string(nbuf - 1)};
      offs_[r] = rows_[r] * width;
    }
    StepInput in;
    in.num_rows = m;
    in.handles = handles_v_.data();
    in.tokens = data;
    in.tokens_size = nbuf * width;
    in.row_offset = offs_.data();
    in.row_start = starts_.data();
    in.num_prompt = nprompt_.data();
    in.num_tokens = ntok_.data();
    in.num_accepted = acc_.data();
    in.num_emitted = emit_.data();
    in.budgets = budgets_.data();
    in.finished = fin_.data();
    in.num_finished = fin_.size();
    in.aborted = ab_.data();
    in.num_aborted = ab_.size();
    in.vocab_size = vocab_size_;
    in.tree = tree_;
    StepCounts ended_counts;
    {
      py::gil_scoped_release rel;
      std::lock_guard<std::mutex> lk(core.mu);
      DraftLengthController* ctl = core.ctl.get();
      if (ctl && scored_tokens >= 0) ctl->observe_pass(scored_tokens, scored_seconds);
      core.stepper.run(core.core, ctl, in, out_);
      // requests this step's tokens ended: into the global cache now
      for (int64_t h : ended_) {
        if (!core.core.has(h)) continue;
        core.core.finish(h);
        if (ctl) ctl->forget(h);
        ended_counts.finished += 1;
      }
    }
    for (int64_t h : fin_) rules_.erase(h);
    for (int64_t h : ab_) rules_.erase(h);
    for (size_t i = 0; i < ended_.size(); ++i) {  // the engine's finish notice will find them gone
      rules_.erase(ended_[i]);
      if (PyDict_DelItem(hmap, ended_ids_[i]) != 0) PyErr_Clear();  // listed twice: gone already
    }

    // the engine's list[list[int]]: one list per batch row, [] for rows without a draft
    const int64_t vmax = vocab_size_ > 0 ? vocab_size_ : (int64_t)INT32_MAX + 1;
    py::list res(num_rows);
    const int32_t* t = out_.tokens.data();
    size_t a = 0;
    int64_t drafts = 0;
    size_t filled = 0;
    if ((int64_t)engine_counters.length_counts.size() < budget + 1) engine_counters.length_counts.resize((size_t)std::max<int64_t>(budget + 1, 1), 0);
    for (size_t r = 0; r < m; ++r) {
      const int64_t k = out_.lengths[r];
      if (k < 0 || k > std::max<int64_t>(0, budgets_[r]))
        throw ValueErr{"drafter returned a draft of " + std::to_string(k) + " tokens for row " +
                       std::to_string(rows_[r]) + " (at most " + std::to_string(std::max<int64_t>(0, budgets_[r])) +
                       " allowed)"};
      if (a + (size_t)k > out_.tokens.size()) throw ValueErr{"drafter returned fewer tokens than its lengths say"};
      PyObject* row = new_ref_or_throw(PyList_New((Py_ssize_t)k));
      PyList_SET_ITEM(res.ptr(), (Py_ssize_t)rows_[r], row);
      for (int64_t i = 0; i < k; ++i) {
        const int32_t tok = t[a + (size_t)i];
        if (tok < 0 || (int64_t)tok >= vmax)
          throw ValueErr{"drafter proposed token id " + std::to_string(tok) + ", outside the vocabulary (0.." +
                         std::to_string(vmax - 1) + ")"};
        PyList_SET_ITEM(row, (Py_ssize_t)i, new_ref_or_throw(PyLong_FromLong(tok)));
      }
      a += (size_t)k;
      drafts += k > 0;
      if ((size_t)k >= engine_counters.length_counts.size()) engine_counters.length_counts.resize((size_t)k + 1, 0);
      engine_counters.length_counts[(size_t)k] += 1;
      ++filled;
    }
    if (a != out_.tokens.size())
      throw ValueErr{"drafter returned " + std::to_string(out_.tokens.size()) + " tokens for lengths adding up to " +
                     std::to_string(a)};
    if (filled < (size_t)num_rows)
      for (Py_ssize_t j = 0; j < num_rows; ++j)
        if (!PyList_GET_ITEM(res.ptr(), j)) PyList_SET_ITEM(res.ptr(), j, new_ref_or_throw(PyList_New(0)));

    const StepCounts& c = out_.counts;
    drafter_counters.started += c.started;
    drafter_counters.finished += c.finished + ended_counts.finished;
    drafter_counters.aborted += c.aborted;
    drafter_counters.accepted += c.accepted;
    drafter_counters.drafts += drafts;
    drafter_counters.drafted += (int64_t)out_.tokens.size();
    engine_counters.rows += (int64_t)m;
    engine_counters.drafts += drafts;
    engine_counters.draft_tokens += (int64_t)out_.tokens.size();
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    drafter_counters.draft_ns += ns;
    total_ns += ns;
    return res;
  }

 private:
  static Py_ssize_t checked_len(PyObject* o) {
    const Py_ssize_t n = PyObject_Length(o);
    if (n < 0) throw pybind11::error_already_set();
    return n;
  }

  // Pops each request id of `ids` from the handle map; the handles it held go to `out`.
  void pop_all(pybind11::handle ids, std::vector<int64_t>& out) {
    if (ids.is_none()) return;
    PyObject* hmap = handles_.ptr();
    for (pybind11::handle rid : ids) {
      PyObject* hv = PyDict_GetItemWithError(hmap, rid.ptr());
      if (!hv) {
        if (PyErr_Occurred()) throw pybind11::error_already_set();
        continue;
      }
      out.push_back(to_i64(hv));
      if (PyDict_DelItem(hmap, rid.ptr()) != 0) throw pybind11::error_already_set();
    }
  }

  static RequestRule rule_of(pybind11::handle describe, PyObject* rid) {
    RequestRule rule;
    if (describe.is_none()) return rule;
    pybind11::object d = describe(pybind11::handle(rid));
    if (d.is_none()) return rule;
    pybind11::tuple t = d.cast<pybind11::tuple>();
    if (t.size() != 3) throw ValueErr{"describe(req_id) must return None or (speculates, max_output, stop_ids)"};
    rule.speculates = t[0].cast<bool>();
    rule.can_end = true;
    rule.max_output = t[1].is_none() ? -1 : t[1].cast<int64_t>();
    rule.stops = tokens_of(t[2]);
    return rule;
  }

  pybind11::dict handles_;
  int64_t vocab_size_;
  bool tree_;
  std::unordered_map<int64_t, RequestRule> rules_;
  StepOutput out_;
  std::vector<PyObject*> ended_ids_;  // borrowed from the caller's req_ids during the call
  std::vector<int64_t> fin_, ab_, handles_v_, rows_, ntok_, nprompt_, budgets_, acc_, emit_, ended_, offs_, starts_;
};

// EngineStep.step as a METH_FASTCALL | METH_KEYWORDS method: the arguments of EngineStep::step,
// by position or name, the last two optional. Native errors become the Python exceptions the
// rest of the module raises (set_python_error, py_convert.h).
template <class PyCore>
PyObject* engine_step_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  namespace py = pybind11;
  static const char* const names[] = {"core", "req_ids", "new_tokens", "num_tokens", "token_buffer",
                                      "num_prompt_tokens", "verified", "budget", "max_len", "end_len",
                                      "describe", "finished", "aborted", "scored_tokens", "scored_seconds"};
  constexpr Py_ssize_t kParams = 15, kRequired = 13;
  try {
    // positional first (the engine adapters' call), then keywords by name
    PyObject* a[kParams] = {};
    if (nargs > kParams) {
      PyErr_Format(PyExc_TypeError, "EngineStep.step() takes at most %zd arguments, got %zd", kParams, nargs);
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < nargs; ++i) a[i] = args[i];
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
      if (!key) return nullptr;
      Py_ssize_t i = 0;
      while (i < kParams && std::strcmp(key, names[i]) != 0) ++i;
      if (i == kParams) {
        std::string known;
        for (const char* n : names) known += (known.empty() ? "" : ", ") + std::string(n);
        PyErr_Format(PyExc_TypeError, "EngineStep.step() got an unexpected keyword argument '%s' (its arguments: %s)",
                     key, known.c_str());
        return nullptr;
      }
      if (a[i]) {
        PyErr_Format(PyExc_TypeError, "EngineStep.step() got multiple values for argument '%s'", key);
        return nullptr;
      }
      a[i] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < kRequired; ++i)
      if (!a[i]) {
        PyErr_Format(PyExc_TypeError, "EngineStep.step() missing required argument '%s'", names[i]);
        return nullptr;
      }
    EngineStep& s = py::cast<EngineStep&>(py::handle(self));
    if (!py::isinstance<PyCore>(a[0])) {
      PyErr_Format(PyExc_TypeError, "EngineStep.step(): core must be the drafter's native core, got %s",
                   Py_TYPE(a[0])->tp_name);
      return nullptr;
    }
    PyCore& core = py::cast<PyCore&>(py::handle(a[0]));
    const int64_t budget = to_i64(a[7]), max_len = to_i64(a[8]), end_len = to_i64(a[9]);
    const int64_t scored_tokens = a[13] ? to_i64(a[13]) : -1;
    const double scored_seconds = a[14] ? PyFloat_AsDouble(a[14]) : 0.0;
    if (scored_seconds == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    py::list res = s.template step<PyCore>(core, a[1], a[2], a[3], a[4], a[5], a[6], budget, max_len,
                                           end_len, a[10], a[11], a[12], scored_tokens,
                                           scored_seconds);
    return res.release().ptr();
  } catch (py::cast_error& e) {  // core (or self) is not what it must be
    PyErr_SetString(PyExc_TypeError, (std::string("EngineStep.step(): ") + e.what()).c_str());
  } catch (...) {
    set_python_error(std::current_exception());
  }
  return nullptr;
}

// Registers EngineStep on the extension module (PyCore: the module's SuffixCore wrapper, with
// `core`, `ctl`, `mu` and `stepper`).
template <class PyCore>
void register_engine_step(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<EngineStep> cls(m, "EngineStep",
                             "The engine step from the engine's own arrays to its list[list[int]] (engine_step.h).");
  cls.def(py::init<py::dict, int64_t, bool>(), py::arg("handles"), py::arg("vocab_size") = 0,
           py::arg("tree") = false)
      .def_readwrite("next_handle", &EngineStep::next_handle)
      .def_readonly("total_ns", &EngineStep::total_ns)
      .def("clear", &EngineStep::clear, "Forget every request's rule (the drafter dropped its requests).")
      .def("forget", &EngineStep::forget, py::arg("handle"))
      .def("take_drafter_counters",
           [](EngineStep& s) {
             auto t = s.drafter_counters;
             s.drafter_counters = EngineStep::DrafterCounters{};
             return py::make_tuple(t.started, t.finished, t.aborted, t.accepted, t.drafts, t.drafted,
                                   (double)t.draft_ns * 1e-9);
           },
           "(started, finished, aborted, accepted, drafts, drafted_tokens, seconds) since the last call.")
      .def("take_engine_counters",
           [](EngineStep& s) {
             auto f = std::move(s.engine_counters);
             s.engine_counters = EngineStep::EngineCounters{};
             py::list counts;
             for (int64_t c : f.length_counts) counts.append(c);
             return py::make_tuple(f.rows, f.drafts, f.draft_tokens, counts, f.verified_drafts,
                                   f.verified_tokens, f.verified_accepted);
           },
           "(rows, drafts, draft_tokens, rows per draft length, verified drafts, verified draft "
           "tokens, accepted tokens) since the last call.");
  // `step` is called once per engine step with 15 arguments: a vectorcall method, not a
  // pybind11 overload, whose dispatch cost about 1 us a call (an empty batch: ~1,000 ns through
  // pybind11, ~330 ns this way).
  static PyMethodDef step_def = {
      "step", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&engine_step_call<PyCore>)),
      METH_FASTCALL | METH_KEYWORDS,
      "step(core, req_ids, new_tokens, num_tokens, token_buffer, num_prompt_tokens, verified, budget, max_len, "
      "end_len, describe, finished, aborted, scored_tokens=-1, scored_seconds=0.0)\n\n"
      "One engine step: events, rows (request ids, new tokens, the engine's token buffer), drafts; "
      "returns one list of draft token ids per row."};
  PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &step_def);
  if (!descr) throw py::error_already_set();
  cls.attr("step") = py::reinterpret_steal<py::object>(descr);
}

}  // namespace specdraft
