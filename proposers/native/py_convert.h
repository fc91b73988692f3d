// The conversions between Python objects and C++ values the bindings (suffix_index.cc) use,
// written once: integers, token ids, and
// integer arrays (read in place where the object allows it). Each throws
// pybind11::error_already_set with Python's own error (TypeError, OverflowError, MemoryError), or
// ValueErr naming the argument where the caller gives its name.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "index_errors.h"

namespace specdraft {

// A new reference from the C API, or the pending Python error as an exception.
inline PyObject* new_ref_or_throw(PyObject* o) {
  if (!o) throw pybind11::error_already_set();
  return o;
}

// The index's own errors (KeyErr, ValueErr, AssertErr) as KeyError, ValueError and
// AssertionError; false, with nothing set, for any other exception. The module's exception
// translator passes those on to pybind11's.
inline bool set_index_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const KeyErr& e) {
    if (e.msg.empty()) {
      pybind11::int_ k(e.key);
      PyErr_SetObject(PyExc_KeyError, k.ptr());
    } else {
      pybind11::str s(e.msg);
      PyErr_SetObject(PyExc_KeyError, s.ptr());
    }
  } catch (const ValueErr& e) {
    PyErr_SetString(PyExc_ValueError, e.msg.c_str());
  } catch (const AssertErr& e) {
    PyErr_SetString(PyExc_AssertionError, e.msg.c_str());
  } catch (...) {
    return false;
  }
  return true;
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

// A token id: it must fit in int32.
inline int32_t token_of(int64_t v) {
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "token %lld does not fit in int32", (long long)v);
    throw pybind11::error_already_set();
  }
  return (int32_t)v;
}

inline int32_t to_token(PyObject* o) { return token_of(to_i64(o)); }

// ------------------------------------------------------------------------ integer arrays

// A buffer held for the duration of a call (no copy; released on destruction).
struct Buffer {
  Py_buffer view{};
  bool held = false;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
  // false (and no Python error pending) when `o` exports no such buffer
  bool get(PyObject* o, int flags) {
    if (PyObject_GetBuffer(o, &view, flags) != 0) {
      PyErr_Clear();
      return false;
    }
    held = true;
    return true;
  }
  // the element's struct format character ('i', 'q', ...), byte order marks skipped; 0 when
  // the format is more than one character
  char format() const {
    const char* f = view.format ? view.format : "B";
    while (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!') ++f;
    return f[0] != 0 && f[1] == 0 ? f[0] : 0;
  }
};

// A 1-D integer array read in place: a numpy array through its own fields (no buffer export),
// any other object through the buffer protocol. Entries are read as int64 (an unsigned 64-bit
// entry above INT64_MAX: OverflowError).
struct IntColumn {
  Buffer buf;
  const char* base = nullptr;
  Py_ssize_t stride = 0, itemsize = 8, size = 0;
  bool is_signed = true;

  IntColumn() = default;
  // `name`: the argument, named in the ValueError when `obj` is not a 1-D integer array
  IntColumn(PyObject* obj, const char* name) {
    if (!open(obj)) throw ValueErr{std::string(name) + " must be a 1-D integer array"};
  }

  // Reads `obj` in place; false (nothing held, no Python error pending) when it is not a 1-D
  // integer array.
  bool open(PyObject* obj) {
    namespace py = pybind11;
    if (py::isinstance<py::array>(obj)) {
      py::array a = py::reinterpret_borrow<py::array>(obj);
      const char kind = a.dtype().kind();
      if (a.ndim() != 1 || (kind != 'i' && kind != 'u') || !width_ok(a.itemsize())) return false;
      is_signed = kind == 'i';
      itemsize = a.itemsize();
      base = (const char*)a.data();
      stride = a.strides(0);
      size = a.shape(0);
      return true;
    }
    if (!PyObject_CheckBuffer(obj) || !buf.get(obj, PyBUF_STRIDES | PyBUF_FORMAT)) return false;
    const char k = buf.format();
    if (!k || buf.view.ndim != 1 || !std::strchr("bBhHiIlLqQ", k) || !width_ok(buf.view.itemsize)) {
      PyBuffer_Release(&buf.view);
      buf.held = false;
      return false;
    }
    is_signed = k >= 'a';
    itemsize = buf.view.itemsize;
    base = (const char*)buf.view.buf;
    stride = buf.view.strides ? buf.view.strides[0] : itemsize;
    size = buf.view.shape[0];
    return true;
  }

  int64_t operator[](Py_ssize_t i) const {
    const char* p = base + i * stride;
    switch (itemsize) {
      case 1: return is_signed ? at<int8_t>(p) : at<uint8_t>(p);
      case 2: return is_signed ? at<int16_t>(p) : at<uint16_t>(p);
      case 4: return is_signed ? at<int32_t>(p) : at<uint32_t>(p);
      default: return is_signed ? at<int64_t>(p) : at<uint64_t>(p);
    }
  }

  // f(entry) for each entry in order, the element type chosen once for the whole column.
  template <class F>
  void each(F&& f) const {
    switch (itemsize) {
      case 1: return is_signed ? loop<int8_t>(f) : loop<uint8_t>(f);
      case 2: return is_signed ? loop<int16_t>(f) : loop<uint16_t>(f);
      case 4: return is_signed ? loop<int32_t>(f) : loop<uint32_t>(f);
      default: return is_signed ? loop<int64_t>(f) : loop<uint64_t>(f);
    }
  }

 private:
  static bool width_ok(Py_ssize_t n) { return n == 1 || n == 2 || n == 4 || n == 8; }

  template <class E>
  static int64_t at(const char* p) {
    E v;
    std::memcpy(&v, p, sizeof(E));
    if constexpr (std::is_same<E, uint64_t>::value) {
      if (v > (uint64_t)INT64_MAX) {
        PyErr_Format(PyExc_OverflowError, "integer %llu does not fit in int64", (unsigned long long)v);
        throw pybind11::error_already_set();
      }
    }
    return (int64_t)v;
  }

  template <class E, class F>
  void loop(F& f) const {
    for (Py_ssize_t i = 0; i < size; ++i) f(at<E>(base + i * stride));
  }
};

// One integer of a Python object, or of an integer array's entry, as T: int32_t holds token ids
// (OverflowError outside int32), int64_t any 64-bit integer.
template <class T>
T int_of(PyObject* o) {
  static_assert(std::is_same<T, int32_t>::value || std::is_same<T, int64_t>::value, "int32_t or int64_t");
  if constexpr (std::is_same<T, int32_t>::value) return to_token(o);
  else return to_i64(o);
}
template <class T>
T int_of(int64_t v) {
  if constexpr (std::is_same<T, int32_t>::value) return token_of(v);
  else return v;
}

// Appends the integers of `obj` to `out`: a list or tuple, a 1-D integer array (numpy or any
// integer buffer, read in place), or any iterable of integers.
template <class T>
void append_ints(pybind11::handle obj, std::vector<T>& out) {
  PyObject* o = obj.ptr();
  const bool list = PyList_CheckExact(o);
  if (list || PyTuple_CheckExact(o)) {
    const Py_ssize_t n = list ? PyList_GET_SIZE(o) : PyTuple_GET_SIZE(o);
    out.reserve(out.size() + (size_t)n);
    for (Py_ssize_t i = 0; i < n; ++i) out.push_back(int_of<T>(list ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i)));
    return;
  }
  IntColumn col;
  if (col.open(o)) {
    const size_t at = out.size();
    out.resize(at + (size_t)col.size);  // on an error, the caller drops `out`
    T* dst = out.data() + at;
    if (col.is_signed && col.itemsize == (Py_ssize_t)sizeof(T) && col.stride == (Py_ssize_t)sizeof(T)) {
      if (col.size) std::memcpy(dst, col.base, (size_t)col.size * sizeof(T));  // already T, contiguous
    } else {
      col.each([&dst](int64_t v) { *dst++ = int_of<T>(v); });
    }
    return;
  }
  for (pybind11::handle item : obj) out.push_back(int_of<T>(item.ptr()));
}

// The integers of `obj` (append_ints) as a new vector.
template <class T>
std::vector<T> ints_of(pybind11::handle obj) {
  std::vector<T> v;
  append_ints(obj, v);
  return v;
}

// The token ids of `obj` (list, tuple, 1-D integer array, iterable).
inline std::vector<int32_t> tokens_of(pybind11::handle obj) { return ints_of<int32_t>(obj); }

}  // namespace specdraft
