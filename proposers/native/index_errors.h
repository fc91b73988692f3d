// Shared by the index headers: the errors the bindings translate into Python exceptions, the
// optional profiling counters, and the test-only switch that turns on cross-checks of fast paths.
// (The whole-index consistency check, SuffixIndex::check(), is in index_checks.h.)
#pragma once

#include <cstdint>
#include <string>

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

// Tests only: cross-check fast paths against the plain algorithms (throws AssertErr on mismatch).
inline bool& debug_checks() {
  static bool on = false;
  return on;
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

// Node-state assertions in the field accessors (node_store.h), compiled in only with
// -DSPECDRAFT_CHECK_NODES: a field read in the wrong node state throws AssertErr.
#ifdef SPECDRAFT_CHECK_NODES
#define SD_NODE_ASSERT(cond, what) \
  ((cond) ? (void)0 : throw ::specdraft::AssertErr{std::string("node state: ") + (what)})
#else
#define SD_NODE_ASSERT(cond, what) ((void)0)
#endif

}  // namespace specdraft
