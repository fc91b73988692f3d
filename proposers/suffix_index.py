"""Depth-bounded suffix trie with occurrence counts and lazy leaves (plain-Python twin).

This is the reference implementation of the native index in ``native/suffix_index.cc``; the two
are tested against each other on random token streams and must produce identical drafts. Keep
every arithmetic step and tie-break in the same order in both.

The trie holds, for every cached position and every length k <= max_depth, the k-gram that ends
there; node ``count`` is the number of positions at which the node's k-gram ends. A node whose
k-gram has occurred once is *closed*: its subtree is not materialised, its single continuation is
read from the sequence it points at (``ref_seq``, ``ref_pos``). The second occurrence *opens* it
and materialises one child for the old occurrence. Novel text therefore costs about two nodes per
token instead of max_depth, and repeated text is shared.

Invariants (checked by ``check()``):
- an open node has, for every occurrence whose next position is indexed and whose depth is below
  max_depth, a child for that next token, and the child counts sum to those occurrences;
- a closed node has count 1 and no children;
- ``window[seq][k]`` is the node of the k-gram ending at the last position of a live sequence
  when that node is materialised, else -1 (index 0 is the root).

Cost: an append updates at most max_depth window entries (O(max_depth), independent of how much
is cached); a match of the context tail walks at most max_depth nodes per tried length, and the
drafter carries the previous match length forward so the tried lengths amortise to O(1) per token.
"""

from __future__ import annotations

ROOT = 0


class SuffixIndex:
    def __init__(self, max_depth: int = 24):
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.max_depth = max_depth
        self.tok = [-1]
        self.cnt = [0]
        self.dep = [0]
        self.par = [-1]
        self.ref_seq = [-1]
        self.ref_pos = [-1]
        self.is_open = [True]
        self.children: list[dict[int, int] | None] = [{}]
        self.free: list[int] = []
        self.seqs: dict[int, list[int]] = {}
        self.windows: dict[int, list[int]] = {}
        self.num_tokens = 0

    # ------------------------------------------------------------------ nodes
    def _new_node(self, token: int, parent: int, seq: int, pos: int) -> int:
        d = self.dep[parent] + 1
        if self.free:
            n = self.free.pop()
            self.tok[n], self.cnt[n], self.dep[n], self.par[n] = token, 1, d, parent
            self.ref_seq[n], self.ref_pos[n], self.is_open[n] = seq, pos, False
            self.children[n] = None
        else:
            n = len(self.tok)
            self.tok.append(token)
            self.cnt.append(1)
            self.dep.append(d)
            self.par.append(parent)
            self.ref_seq.append(seq)
            self.ref_pos.append(pos)
            self.is_open.append(False)
            self.children.append(None)
        ch = self.children[parent]
        if ch is None:
            ch = self.children[parent] = {}
        ch[token] = n
        return n

    def _open(self, node: int, cur_seq: int, cur_pos: int) -> None:
        """Second occurrence of a closed node: materialise the child of its first occurrence."""
        self.is_open[node] = True
        if self.children[node] is None:
            self.children[node] = {}
        if self.dep[node] >= self.max_depth:
            return
        rs, rp = self.ref_seq[node], self.ref_pos[node] + 1
        s = self.seqs[rs]
        # Only positions already indexed get a child; the position being appended right now
        # (same sequence, overlapping repeat) is added by the append loop itself.
        if rp >= len(s) or (rs == cur_seq and rp >= cur_pos):
            return
        child = self._new_node(s[rp], node, rs, rp)
        if rp == len(s) - 1:
            w = self.windows.get(rs)
            if w is not None and self.dep[child] < self.max_depth:
                w[self.dep[child]] = child

    # --------------------------------------------------------------- updates
    def add_sequence(self, seq: int) -> None:
        if seq in self.seqs:
            raise KeyError(f"sequence {seq} already in the index")
        self.seqs[seq] = []
        self.windows[seq] = [ROOT] + [-1] * (self.max_depth - 1)

    def append(self, seq: int, token: int) -> None:
        s = self.seqs[seq]
        w = self.windows[seq]  # KeyError on a closed sequence
        pos = len(s)
        s.append(token)
        self.num_tokens += 1
        D = self.max_depth
        new_w = [ROOT] + [-1] * (D - 1)
        for k in range(D):
            a = w[k]
            if a < 0 or not self.is_open[a]:
                continue  # the (k+1)-gram continues a closed node implicitly
            ch = self.children[a]
            c = ch.get(token) if ch is not None else None
            if c is None:
                c = self._new_node(token, a, seq, pos)
            else:
                if not self.is_open[c]:
                    self._open(c, seq, pos)
                self.cnt[c] += 1
                self.ref_seq[c], self.ref_pos[c] = seq, pos
            if k + 1 < D:
                new_w[k + 1] = c
        self.cnt[ROOT] += 1
        self.windows[seq] = new_w

    def extend(self, seq: int, tokens) -> None:
        for t in tokens:
            self.append(seq, int(t))

    def close(self, seq: int) -> None:
        """No more appends to ``seq``: drop its window (the sequence stays indexed)."""
        self.windows.pop(seq, None)

    def remove(self, seq: int) -> None:
        """Un-index every position of ``seq`` and free the nodes nobody else uses."""
        s = self.seqs[seq]
        self.windows.pop(seq, None)
        D = self.max_depth
        n = len(s)
        dead: list[int] = []
        for i in range(n):
            cur = ROOT
            for j in range(i, min(i + D, n)):
                c = self.children[cur][s[j]]
                self.cnt[c] -= 1
                if self.cnt[c] == 0:
                    dead.append(c)
                if not self.is_open[c]:
                    break
                cur = c
        self.cnt[ROOT] -= n
        self.num_tokens -= n
        # children die with (or before) their parents; unlink deepest first
        for c in sorted(dead, key=lambda x: -self.dep[x]):
            p = self.par[c]
            ch = self.children[p]
            if ch is not None and ch.get(self.tok[c]) == c:
                del ch[self.tok[c]]
            self.children[c] = None
            self.tok[c], self.par[c], self.ref_seq[c], self.ref_pos[c] = -1, -1, -1, -1
            self.is_open[c] = False
            self.free.append(c)
        del self.seqs[seq]

    # --------------------------------------------------------------- queries
    def walk(self, tokens) -> tuple[int, int] | None:
        """State of the gram ``tokens``: (node, extra) or None if it never occurred.

        ``extra`` > 0 means the gram continues ``extra`` tokens past the closed ``node`` along
        the node's single occurrence.
        """
        cur = ROOT
        n = len(tokens)
        for i in range(n):
            if not self.is_open[cur]:
                s = self.seqs[self.ref_seq[cur]]
                p = self.ref_pos[cur]
                extra = n - i
                if p + extra >= len(s):
                    return None
                for j in range(extra):
                    if s[p + 1 + j] != tokens[i + j]:
                        return None
                return cur, extra
            ch = self.children[cur]
            c = ch.get(tokens[i]) if ch is not None else None
            if c is None:
                return None
            cur = c
        return cur, 0

    def continuations(self, state: tuple[int, int]) -> list[tuple[int, int, tuple[int, int]]]:
        """(token, count, next_state) for each token seen after the state's gram,
        most frequent first, ties by smaller token."""
        node, extra = state
        if self.is_open[node] and extra == 0:
            ch = self.children[node]
            if not ch:
                return []
            out = [(t, self.cnt[c], (c, 0)) for t, c in ch.items()]
            out.sort(key=lambda x: (-x[1], x[0]))
            return out
        s = self.seqs[self.ref_seq[node]]
        p = self.ref_pos[node] + extra + 1
        if p >= len(s):
            return []
        return [(s[p], 1, (node, extra + 1))]

    def state_depth(self, state: tuple[int, int]) -> int:
        return self.dep[state[0]] + state[1]

    def longest_match(self, context, hi: int) -> tuple[tuple[int, int] | None, int]:
        """Longest suffix of ``context`` (at most ``hi`` tokens) that occurred with a continuation."""
        L = min(hi, self.max_depth, len(context))
        while L > 0:
            st = self.walk(context[len(context) - L:])
            if st is not None and self.continuations(st):
                return st, L
            L -= 1
        return None, 0

    # ------------------------------------------------------------ accounting
    def num_nodes(self) -> int:
        return len(self.tok) - len(self.free)

    def check(self) -> None:
        """Verify the invariants (tests only; walks the whole trie)."""
        for n in range(len(self.tok)):
            if n != ROOT and self.par[n] < 0:
                continue  # free
            ch = self.children[n] or {}
            if not self.is_open[n]:
                assert self.cnt[n] == 1 and not ch, (n, self.cnt[n], ch)
            for t, c in ch.items():
                assert self.tok[c] == t and self.par[c] == n and self.dep[c] == self.dep[n] + 1
                assert 0 < self.cnt[c] <= self.cnt[n]
