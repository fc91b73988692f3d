// Placeholder: the native SuffixCore is being written; see proposers/suffix_core.py for the twin.
#include <pybind11/pybind11.h>
PYBIND11_MODULE(_suffix_native, m) { m.attr("AVAILABLE") = false; }
