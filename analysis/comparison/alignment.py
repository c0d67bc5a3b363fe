"""Order-preserving alignment of two sequences, for the task diff: `align` (Myers' shortest edit
script, by occurrence past MAX_EDITS edits), `align_turns` (turn signatures, paired by
similarity) and `align_steps` (the labels of two paired turns). Pure. Why these methods and what
they cost: docs/analysis.md, "Compare with typical, compare two tasks" (alignment)."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

# Beyond this many edits the middle of two sequences is aligned by occurrence (`_by_occurrence`):
# the Myers trace costs O(D²) memory, 250,000 entries at 500.
MAX_EDITS = 500
# Turns aligned within this many positions of the diagonal beyond the difference in turn counts.
TURN_BAND = 16

Pair = tuple[int | None, int | None]


def align(a: Sequence[Hashable], b: Sequence[Hashable], *, max_edits: int = MAX_EDITS) -> list[Pair]:
    """An order-preserving alignment of a and b: (i, j) matched, (i, None) only in a, (None, j)
    only in b. Minimal (a shortest edit script) up to `max_edits` edits."""
    n, m = len(a), len(b)
    lo, hi = _common_ends(a, b)
    mid_a, mid_b = a[lo:n - hi], b[lo:m - hi]
    mid = _myers(mid_a, mid_b, max_edits)
    if mid is None:
        mid = _by_occurrence(mid_a, mid_b)
    return _with_ends(mid, lo, hi, n, m)


def _common_ends(a: Sequence, b: Sequence) -> tuple[int, int]:
    """The lengths of the common prefix and of the common suffix after it."""
    n, m = len(a), len(b)
    lo = 0
    while lo < n and lo < m and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and hi < m - lo and a[n - 1 - hi] == b[m - 1 - hi]:
        hi += 1
    return lo, hi


def _with_ends(mid: list[Pair], lo: int, hi: int, n: int, m: int) -> list[Pair]:
    """The middle's pairs shifted back into place, between the matched prefix and suffix."""
    out: list[Pair] = [(i, i) for i in range(lo)]
    out += [(None if i is None else i + lo, None if j is None else j + lo) for i, j in mid]
    out += [(n - hi + k, m - hi + k) for k in range(hi)]
    return out


def _myers(a: Sequence, b: Sequence, max_edits: int) -> list[Pair] | None:
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    v = {1: 0}
    trace: list[dict[int, int]] = []
    for d in range(min(max_edits, n + m) + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[k - 1] < v[k + 1]):
                x = v[k + 1]
            else:
                x = v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[dict[int, int]], n: int, m: int) -> list[Pair]:
    out: list[Pair] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        prev_k = k + 1 if (k == -d or (k != d and v.get(k - 1, -1) < v.get(k + 1, -1))) else k - 1
        prev_x = v.get(prev_k, 0)
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x -= 1
            y -= 1
            out.append((x, y))
        if d > 0:
            if x == prev_x:
                out.append((None, prev_y))
            else:
                out.append((prev_x, None))
        x, y = prev_x, prev_y
    out.reverse()
    return out


def _by_occurrence(a: Sequence, b: Sequence) -> list[Pair]:
    """Pair the k-th occurrence of each label in a with its k-th in b, keep the longest run of
    pairs increasing in both (patience sorting), the rest unmatched. O(N log N)."""
    where: dict = defaultdict(list)
    for j, label in enumerate(b):
        where[label].append(j)
    seen: Counter = Counter()
    candidates = []
    for i, label in enumerate(a):
        k = seen[label]
        seen[label] += 1
        if k < len(where[label]):
            candidates.append((i, where[label][k]))
    tails: list[int] = []
    tail_at: list[int] = []
    back = [-1] * len(candidates)
    for c, (_, j) in enumerate(candidates):
        pos = bisect.bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_at.append(c)
        else:
            tails[pos] = j
            tail_at[pos] = c
        back[c] = tail_at[pos - 1] if pos else -1
    keep = []
    c = tail_at[-1] if tail_at else -1
    while c >= 0:
        keep.append(candidates[c])
        c = back[c]
    keep.reverse()
    out: list[Pair] = []
    i0 = j0 = 0
    for i, j in keep + [(len(a), len(b))]:
        out += [(x, None) for x in range(i0, i)] + [(None, y) for y in range(j0, j)]
        if i < len(a):
            out.append((i, j))
        i0, j0 = i + 1, j + 1
    return out


def align_turns(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]], *, band: int = TURN_BAND) -> list[Pair]:
    """Turns by signature: the common prefix and suffix matched, the middle by a banded
    Needleman-Wunsch maximising the summed similarity of paired turns (each pair also earns a
    little, so turns pair whenever they can; leaving a turn out costs nothing). A turn that
    gained a call pairs with its counterpart in place, an inserted turn is left out where it is
    least like its neighbours. The band (|n − m| + `band` either side of the diagonal) keeps it
    O(N·band): runs of one agent differ by a few turns, not by hundreds."""
    n, m = len(a), len(b)
    lo, hi = _common_ends(a, b)
    mid = _banded_pairing(a[lo:n - hi], b[lo:m - hi], band)
    return _with_ends(mid, lo, hi, n, m)


def _banded_pairing(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]], band: int) -> list[Pair]:
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    low, high = min(0, m - n) - band, max(0, m - n) + band  # allowed j − i
    counts: dict[tuple[str, ...], Counter] = {}
    memo: dict[tuple, float] = {}  # runs of one agent repeat a few signatures: score each pair once

    def similarity(x: tuple[str, ...], y: tuple[str, ...]) -> float:
        found = memo.get((x, y))
        if found is None:
            cx = counts.get(x) or counts.setdefault(x, Counter(x))
            cy = counts.get(y) or counts.setdefault(y, Counter(y))
            found = memo[(x, y)] = _similarity_counts(cx, cy)
        return found
    neg = float("-inf")
    score: list[dict[int, float]] = [{} for _ in range(n + 1)]
    move: list[dict[int, int]] = [{} for _ in range(n + 1)]  # 0 pair, 1 skip a, 2 skip b
    for i in range(n + 1):
        row, prev = score[i], score[i - 1] if i else None
        for j in range(max(0, i + low), min(m, i + high) + 1):
            if i == 0 and j == 0:
                row[0] = 0.0
                continue
            best, how = neg, 0
            if i and j and (j - 1) in prev:
                x, y = a[i - 1], b[j - 1]
                sim = 1.0 if x == y else similarity(x, y)
                best = prev[j - 1] + 0.01 + sim
            if i and j in prev and prev[j] > best:
                best, how = prev[j], 1
            if j and (j - 1) in row and row[j - 1] > best:
                best, how = row[j - 1], 2
            row[j] = best
            move[i][j] = how
    if m not in score[n]:  # outside the band: cannot happen (the band always holds (n, m))
        return [(i, None) for i in range(n)] + [(None, j) for j in range(m)]
    out: list[Pair] = []
    i, j = n, m
    while i > 0 or j > 0:
        how = move[i][j] if (i or j) else 0
        if i and j and how == 0:
            out.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and (how == 1 or j == 0):
            out.append((i - 1, None))
            i -= 1
        else:
            out.append((None, j - 1))
            j -= 1
    out.reverse()
    return out


def _similarity_counts(ca: Counter, cb: Counter) -> float:
    union = sum((ca | cb).values())
    return sum((ca & cb).values()) / union if union else 1.0


def align_steps(a: Sequence[str], b: Sequence[str]) -> list[Pair]:
    """Labels of two turns: Myers, then leftovers of the same label paired in order (concurrent
    calls start in any order)."""
    if a == b:  # most turns of two runs of one agent
        return [(i, i) for i in range(len(a))]
    pairs = align(a, b)
    spare_b: dict[str, list[int]] = defaultdict(list)
    for i, j in pairs:
        if i is None:
            spare_b[b[j]].append(j)
    if not spare_b:
        return pairs
    taken: set[int] = set()
    out: list[Pair] = []
    for i, j in pairs:
        if i is not None and j is None and spare_b.get(a[i]):
            j = spare_b[a[i]].pop(0)
            taken.add(j)
        out.append((i, j))
    return [(i, j) for i, j in out if not (i is None and j in taken)]
