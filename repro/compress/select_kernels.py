"""The compiled loops of the radix select (`repro.compress.select`), numba on the CPU.

Input: each row's floats viewed as signed integers of the same width. Clearing the sign
bit leaves the magnitude's bits, which order as the magnitudes do. Per segment:
0. a long segment (at least `_SAMPLED_FROM` entries) is first narrowed to candidates: a
   magnitude estimated from `_SAMPLE` evenly spaced entries to lie below the k-th largest
   (the sample's rank-th largest, found by step 3's digit passes: `np.partition` took
   three times as long), and one pass listing every entry at or above it (975 entries
   for k = 271 of 271,224 Gaussian values, c = 0.001). Every entry the selection can keep
   is listed, so steps 1-3 run over the list alone; where the estimate fell above the
   k-th largest (fewer than k listed) they run over the whole segment. One pass over the
   row instead of two: on 8 rows of 271,224 values, 40% less time at c = 0.01 and 0.001,
   20% at c = 0.1.
   The listing compares each block of `_BLOCK` entries at once into a 64-bit mask and
   visits only its set bits (`_listed`), writing each listed entry (its bits, sign and
   all) beside its index (`vals`), so the passes below read the list in order, its
   magnitudes by clearing the sign, and the filter writes the kept entries from it rather
   than from the row again (AG-Topk at c = 0.1 inside training steps: the selection
   0.12-0.15 ms shorter). With step 3's filter also
   free of branches, AG-Topk's layer-wise selection inside training steps took 2.8 ms
   instead of 3.4 at c = 0.1 and 1.4 instead of 2.1 at c = 0.01 (8 rows of `cnn1d_wide`)
   against a listing that stored every index and a filter that branched.
   A shorter segment whose k is at most its number of blocks is narrowed without a
   sample: the k-th largest block maximum is at most the k-th largest entry (k blocks each
   hold an entry that large), so the entries at or above it, listed only in the blocks
   whose maximum reaches it, hold the whole selection, and no estimate can fall short
   (layer-wise on the same rows, c = 0.001: the nine short tensors in 0.37x the time);
1. one pass counts the entries by their top `_TOP` magnitude bits (the exponent and a few
   mantissa bits) and finds the bucket holding the k-th largest;
2. a second pass lists, in index order, every entry of that bucket or above, with its
   bits: all of the selection and the few other members of the threshold's bucket;
3. the remaining bits of the threshold are found `_DIGIT` at a time by histograms over
   the members of the threshold's bucket alone, copied out of the list first (layer-wise
   c = 0.1: about 5,000 of a 256,000-entry segment's 30,000 listed), and the list is
   filtered, without a branch: everything above the threshold, and the first entries
   equal to it (the list holds about 1.2 entries per one kept, so a branch on each
   mispredicted often). With
   the sample's estimate found the same way, layer-wise selection of 8 rows of a trained
   `cnn1d_wide` gradient took 0.82x the time at c = 0.1 (2.90 -> 2.37 ms), 0.81x at
   c = 0.01 and 0.77x at c = 0.001 against digit passes over the whole list and the
   sample partitioned.
When the k-th largest sits in the lowest bucket and fewer than k entries are non-zero (a
row of almost only zeros: a layer whose units died), the threshold is 0 and one pass
takes every non-zero entry and the first zeros instead of steps 2 and 3; a long segment
whose sample is mostly zeros tries that first, before step 1 (8 dead rows of 271,224
values, k = 271: 5.1 ms before the candidates, 3.1 ms with this order).
Four interleaved counters per bucket keep repeated increments of one bucket (magnitudes
crowd into a few exponents) from waiting on each other. Every count is an integer, so the
result depends on no order of summation. A histogram's scan starts at the largest bucket
counted, and afterwards only the buckets counted into are cleared (the histograms are all
zeros between uses): a short segment, a layer's 25 biases, had paid for clearing and
scanning every one of the 2,048 buckets and 1,024 digits (layer-wise, 8 rows: the nine
short tensors in 0.04 ms instead of 0.24 at c = 0.001, 0.14 instead of 0.29 at c = 0.01).

The loops that write at the selected positions (error feedback's zeros, AG-Topk's sums)
are `repro.compress.position_kernels`.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz, one instruction

from repro.compiled_loops import njit

_TOP = 11
_DIGIT = 10
_LANES = 4
_SAMPLE = 4096
_SAMPLED_FROM = 8 * _SAMPLE
_MOSTLY_ZERO = -2
_BLOCK = 64  # one block's comparisons fill one 64-bit mask


@njit()
def _select_segment(
    row, start, stop, k, out, kept, at, top, low, listed, vals, sample, peaks, members
):
    """Write segment [start, stop)'s k indices of largest magnitude into out[at:at + k],
    and the entries there (their bits) into kept[at:at + k]."""
    width = row.itemsize * 8
    magnitude = (np.int64(1) << (width - 1)) - 1  # every bit but the sign
    shift = width - 1 - _TOP
    m = -1
    if stop - start >= _SAMPLED_FROM:
        m = _candidates(row, magnitude, start, stop, k, listed, vals, sample, peaks, low)
        if m == _MOSTLY_ZERO:
            if _zero_threshold(row, magnitude, start, stop, k, out, kept, at):
                return
            m = -1
    elif k * _BLOCK <= stop - start:
        # the k-th largest block peak is at most the k-th largest entry: k blocks each hold
        # an entry at least that large. So the entries at or above it hold the selection.
        blocks = _block_peaks(row, magnitude, start, stop, peaks)
        bound, _ = _narrow(peaks, blocks, k, np.int64(0), width - 1, low)
        if bound > 0:  # else a dead segment: the passes below find its zero threshold
            m = _listed(row, magnitude, start, stop, bound, listed, vals, peaks, blocks)
    lowest, highest = (1 << _TOP) - 1, 0
    if m >= 0:
        for j in range(m):
            b = (vals[j] & magnitude) >> shift
            top[(b << 2) | (j & (_LANES - 1))] += 1
            lowest, highest = min(lowest, b), max(highest, b)
    else:
        for i in range(start, stop):
            b = (np.int64(row[i]) & magnitude) >> shift
            top[(b << 2) | (i & (_LANES - 1))] += 1
            lowest, highest = min(lowest, b), max(highest, b)
    rank = k  # the threshold is the rank-th largest of the entries matching its prefix
    bucket = highest
    while True:
        base = bucket << 2
        count = top[base] + top[base + 1] + top[base + 2] + top[base + 3]
        if count >= rank:
            break
        rank -= count
        bucket -= 1
    top[lowest << 2 : (highest + 1) << 2] = 0
    if bucket == 0 and _zero_threshold(row, magnitude, start, stop, k, out, kept, at):
        return
    if m < 0:
        m = _listed(row, magnitude, start, stop, np.int64(bucket) << shift, listed, vals, peaks, 0)
    held = 0  # the threshold's bucket, copied out: the digit passes read it alone
    for j in range(m):
        u = vals[j] & magnitude
        members[held] = u
        held += (u >> shift) == bucket
    prefix, rank = _narrow(members, held, rank, np.int64(bucket) << shift, shift, low)
    # `rank` entries equal to the threshold are still needed; every larger one is kept
    w, end = at, at + k
    for j in range(m):
        v = vals[j]
        u = v & magnitude
        tie = u == prefix
        take = (u > prefix) | (tie & (rank > 0))
        out[w] = listed[j]
        kept[w] = v
        rank -= tie & take
        w += take
        if w == end:
            break


@njit()
def _narrow(vals, m, rank, prefix, bits, low):
    """The rank-th largest of those vals[:m] whose bits from bit `bits` up are `prefix`'s,
    found `_DIGIT` bits at a time from the top, and how many entries equal to it the rank
    takes: (value, count). `low`, the digits' histogram, is all zeros on entry and left so."""
    fixed = ~((np.int64(1) << bits) - 1)
    while bits > 0:
        d = min(_DIGIT, bits)
        bits -= d
        mask = (np.int64(1) << d) - 1
        lowest, highest = mask, np.int64(0)
        for j in range(m):
            u = vals[j]
            if (u & fixed) == prefix:
                g = (u >> bits) & mask
                low[g] += 1
                lowest, highest = min(lowest, g), max(highest, g)
        digit = highest
        while low[digit] < rank:
            rank -= low[digit]
            digit -= 1
        low[lowest : highest + 1] = 0
        prefix |= np.int64(digit) << bits
        fixed |= mask << bits
    return prefix, rank


@njit()
def _candidates(row, magnitude, start, stop, k, listed, vals, sample, peaks, low):
    """List, in index order, every entry of the segment at or above a magnitude estimated
    from an evenly spaced sample to lie below the k-th largest (indices in `listed`, their
    bits in `vals`); return how many, or -1 when
    fewer than k were listed (the estimate fell above the k-th largest: the caller takes
    the whole segment instead). The sample's rank is set three standard deviations above
    the k entries' expected share of it, so the estimate falls short about once in a
    thousand segments. An estimate of 0 (the sample is mostly zeros: a dead layer) would
    list the whole segment; `_MOSTLY_ZERO` sends the caller to the zero threshold's one
    pass first instead."""
    n = stop - start
    size = sample.shape[0]
    step = n // size
    for j in range(size):
        sample[j] = np.int64(row[start + j * step]) & magnitude
    expected = k * size / n
    rank = int(expected + 3.0 * np.sqrt(expected) + 4.0)
    if rank >= size:
        return -1
    # the sample's rank-th largest, as the threshold's digits are found (`np.partition`
    # took 20-40 us of a 256,000-entry segment's 0.3 ms, these passes 6-8 us)
    estimate, _ = _narrow(sample, size, rank, np.int64(0), row.itemsize * 8 - 1, low)
    if estimate == 0:
        return _MOSTLY_ZERO
    m = _listed(row, magnitude, start, stop, estimate, listed, vals, peaks, 0)
    return m if m >= k else -1


@njit()
def _block_peaks(row, magnitude, start, stop, peaks):
    """Each block of `_BLOCK` entries' largest magnitude into `peaks`, the partial block at
    the end as one more; returns how many blocks. A branch-free maximum the compiler
    vectorises, at memory speed. (The blocks index a slice from 0 with a fixed trip count:
    indexed from `start`, the maximum was not vectorised and took ten times as long.)"""
    segment = row[start:stop]
    n = stop - start
    blocks = n // _BLOCK
    for b in range(blocks):
        base = b * _BLOCK
        peak = np.int64(0)
        for j in range(_BLOCK):
            peak = max(peak, np.int64(segment[base + j]) & magnitude)
        peaks[b] = peak
    if blocks * _BLOCK < n:
        peak = np.int64(0)
        for i in range(blocks * _BLOCK, n):
            peak = max(peak, np.int64(segment[i]) & magnitude)
        peaks[blocks] = peak
        blocks += 1
    return blocks


@njit()
def _listed(row, magnitude, start, stop, at_least, listed, vals, peaks, blocks):
    """List, in index order, every entry of the segment whose magnitude is at or above
    `at_least` (its bits, sign and all, in `vals`); returns how many. With `blocks` (> 0)
    of `_block_peaks` in `peaks`, it looks only inside the blocks whose peak reaches it:
    the same entries.

    Each block of `_BLOCK` entries is compared at once into a 64-bit mask (a branch-free
    loop the compiler vectorises), and only the set bits are visited, lowest first, each
    bit's position counted by one instruction (`trailing_zeros`, LLVM's cttz; reading it
    from a de Bruijn table took 1.1x as long: the hidden layer's 8 rows at c = 0.1 listed in
    1.19 ms against 1.09). Writing every index and
    advancing the count by the comparison, as before, stored once per entry and waited on
    the count each time: over the 256,000-entry hidden layer of 8 rows of a trained
    `cnn1d_wide` gradient, the pass over every entry took 0.54x its time at c = 0.1 and
    0.43x at c = 0.05; a long segment's block peaks taken first no longer paid (c = 0.01:
    0.47 ms with them, 0.36 without), so only a short segment's narrowing gives `blocks`.
    The pass indexes a slice of the segment from 0 (from `start`, it took 1.2x as long)."""
    segment = row[start:stop]
    n = stop - start
    full = n // _BLOCK
    m = 0
    for b in range(full):
        if blocks and peaks[b] < at_least:
            continue
        base = b * _BLOCK
        mask = np.uint64(0)
        for j in range(_BLOCK):
            above = (np.int64(segment[base + j]) & magnitude) >= at_least
            mask |= np.uint64(above) << np.uint64(j)
        while mask:
            i = base + trailing_zeros(mask)
            listed[m] = start + i
            vals[m] = segment[i]
            m += 1
            mask &= mask - np.uint64(1)  # the lowest set bit cleared
    for i in range(full * _BLOCK, n):  # the partial block at the end
        v = np.int64(segment[i])
        listed[m] = start + i
        vals[m] = v
        m += (v & magnitude) >= at_least
    return m


@njit()
def _zero_threshold(row, magnitude, start, stop, k, out, kept, at):
    """When fewer than k entries are non-zero the threshold is 0 and the selection is every
    non-zero entry and the first zeros, in index order: written in one pass, True. Else
    nothing is written, False. A model whose gradients vanish (dead units) sends rows of
    almost only zeros, where the digit passes below would each walk the whole row."""
    nonzero = 0
    for i in range(start, stop):
        nonzero += (np.int64(row[i]) & magnitude) != 0
    if nonzero >= k:
        return False
    zeros = k - nonzero
    w = at
    for i in range(start, stop):
        if (np.int64(row[i]) & magnitude) != 0:
            out[w] = i
            kept[w] = row[i]
            w += 1
        elif zeros > 0:
            zeros -= 1
            out[w] = i
            kept[w] = row[i]
            w += 1
        if w == at + k:
            break
    return True


@njit()
def _select(bits, starts, ks, out, kept):
    top = np.zeros(_LANES << _TOP, dtype=np.int32)
    low = np.zeros(1 << _DIGIT, dtype=np.int64)
    longest = 0
    for s in range(ks.shape[0]):
        longest = max(longest, starts[s + 1] - starts[s])
    listed = np.empty(longest, dtype=np.int64)
    vals = np.empty(longest, dtype=np.int64)
    sample = np.empty(_SAMPLE, dtype=np.int64)
    peaks = np.empty(longest // _BLOCK + 1, dtype=np.int64)
    members = np.empty(longest, dtype=np.int64)
    for r in range(bits.shape[0]):
        at = 0
        for s in range(ks.shape[0]):
            if ks[s] > 0:
                _select_segment(
                    bits[r],
                    starts[s],
                    starts[s + 1],
                    ks[s],
                    out[r],
                    kept[r],
                    at,
                    top,
                    low,
                    listed,
                    vals,
                    sample,
                    peaks,
                    members,
                )
                at += ks[s]


def select_rows(
    bits: np.ndarray, starts: np.ndarray, ks: list[int], out: np.ndarray, kept: np.ndarray
) -> None:
    """Fill `out` (rows, sum(ks)) with each row's selected indices, segment by segment, and
    `kept` (same shape, `bits`' type) with the bits found there; segment s spans columns
    starts[s]:starts[s + 1] of `bits` (rows, n), the floats' bits as signed integers of
    their width."""
    _select(bits, starts, np.asarray(ks, dtype=np.int64), out, kept)


def _load_all() -> None:
    """Compile each loop, or load it from the cache, with the types a float32 run passes it.

    Done once, when the first selection imports this module, so that numba's and LLVM's
    start-up (about a second of CPU) happens at one moment of a run, before its first
    checkpoint, rather than again at the first exchange: a stop signal that lands inside
    LLVM's callbacks is reported by ctypes as an ignored exception with a traceback (seen
    when a sweep worker's second trial, an allgather, loaded the sum's loop as Ctrl-C
    arrived). `repro.compress.select` imports the loops that write at the positions with
    these.
    """
    rows = np.ones((2, 8), dtype=np.float32)
    out, kept = np.empty((2, 1), dtype=np.int64), np.empty((2, 1), dtype=np.int32)
    select_rows(rows.view(np.int32), np.array([0, 8], dtype=np.int64), [1], out, kept)


_load_all()
