// The conversions between Python objects and C++ values every binding uses (the module in
// suffix_index.cc and the engine step in engine_step.h), written once. Each throws
// pybind11::error_already_set with Python's own error (TypeError, OverflowError, MemoryError).
#pragma once

#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>

namespace specdraft {

// A new reference from the C API, or the pending Python error as an exception.
inline PyObject* new_ref_or_throw(PyObject* o) {
  if (!o) throw pybind11::error_already_set();
  return o;
}

// The one conversion of a Python integer (int, numpy integer, anything with __index__) to C++:
// TypeError / OverflowError from Python itself when it is not one or exceeds 64 bits.
inline int64_t to_i64(PyObject* o) {
  long long v;
  if (PyLong_CheckExact(o)) {
    v = PyLong_AsLongLong(o);
  } else {
    PyObject* i = PyNumber_Index(o);
    if (!i) throw pybind11::error_already_set();
    v = PyLong_AsLongLong(i);
    Py_DECREF(i);
  }
  if (v == -1 && PyErr_Occurred()) throw pybind11::error_already_set();
  return (int64_t)v;
}

// A token id: to_i64, then it must fit in int32.
inline int32_t to_token(PyObject* o) {
  const int64_t v = to_i64(o);
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "token %lld does not fit in int32", (long long)v);
    throw pybind11::error_already_set();
  }
  return (int32_t)v;
}

}  // namespace specdraft
