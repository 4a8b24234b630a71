"""The blocks PyTorch's CUDA caching allocator handed out, replayed from a memory snapshot.

The allocator history records the bytes each allocation asked for; torch's allocated-bytes
counters (`memory_allocated`, `max_memory_allocated`) count the block it got, which is larger:
a request is rounded (to 512 bytes, or by `roundup_power2_divisions`), and a cached block larger
than the rounded request is handed out whole when what would remain is not worth a block of its
own (`should_split`): in the large pool (rounded requests over 1 MiB) a remainder of 1 MiB or
less, and any block once the request reaches `max_split_size`.

Small-pool blocks, and every block under expandable segments, are the rounded request: sizes
there are multiples of 512, so a remainder is zero or worth a block. Large-pool blocks depend on
the splits and merges before them, so that pool is replayed segment by segment, in event order:
the layout at the start of the history is rebuilt from the snapshot's segments (blocks live all
along keep their recorded sizes; the space between allocated blocks is one free block, as the
allocator keeps free neighbours merged), then an `alloc` takes the free block at its address and
splits it or takes it whole, `free_requested` gives the block's bytes back (torch's counter drops
there), and `free_completed` returns the block to the cache, merged with free neighbours.

That replay is a walk over the large pool's events (a state machine: each split depends on the
merges before it); everything else here is polars. A block allocated before the recording and
freed during it has no recorded size: it is the rounded request, or reaches the next block when
the gap is 1 MiB or less (no large-pool block is that small).
"""

from __future__ import annotations

import bisect

import polars as pl

MIN_BLOCK = 512  # kMinBlockSize: every size is rounded to a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: the largest small-pool request; no large-pool block is this small
SMALL_BUFFER = 2 << 20  # kSmallBuffer: the size of a small-pool segment
POWER2_START = 1 << 20  # roundup_power2_divisions' intervals start at 1 MiB

ALLOC, FREE, DONE = "alloc", "free_requested", "free_completed"
SEGMENT_NEW, SEGMENT_GONE = "segment_alloc", "segment_free"


def settings(data: dict) -> dict:
    """The allocator settings that change block sizes (torch's defaults when the snapshot has
    none, or holds them in a shape kview does not know)."""
    s = data.get("allocator_settings")
    s = s if isinstance(s, dict) else {}
    try:
        split = int(s.get("max_split_size") or -1)
        given = s.get("roundup_power2_divisions")
        divisions = {int(k): int(v) for k, v in (given if isinstance(given, dict) else {}).items() if int(v) > 1}
    except (TypeError, ValueError, OverflowError):
        split, divisions = -1, {}
    return {
        "max_split_size": split if split > 0 else None,
        "expandable_segments": bool(s.get("expandable_segments")),
        "divisions": divisions,  # interval start in MiB -> divisions
    }


def _power2_rounded(size: int, divisions: dict[int, int]) -> int:
    """round_size under roundup_power2_divisions: a size between two powers of two rounds up to
    one of N equal steps, N the divisions of its interval (1 MiB, 2 MiB, ... 32 GiB and up)."""
    interval = min(max(size.bit_length() - 1 - (POWER2_START.bit_length() - 1), 0), 15)
    n = divisions.get(1 << interval, 0)
    if size < MIN_BLOCK or n <= 1 or size <= MIN_BLOCK * n:
        return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (n.bit_length() - 1)
    if step == 0:
        return floor << 1
    down = size & ~(step - 1)
    return size if down == size else down + step


def rounded(sizes: pl.Series, cfg: dict) -> pl.Series:
    """round_size of the requests: at least 512, a multiple of 512 (the default), or the
    power-of-two divisions when they are configured (worked out once per distinct size)."""
    if not cfg["divisions"]:
        return (((sizes.clip(lower_bound=1) - 1) // MIN_BLOCK + 1) * MIN_BLOCK).alias("r")
    distinct = sizes.unique().to_list()
    table = {s: _power2_rounded(int(s), cfg["divisions"]) for s in distinct}
    return sizes.replace_strict(table, return_dtype=pl.Int64).alias("r")


def block_sizes(data: dict, device: int, ev: pl.DataFrame) -> tuple[pl.Series, int]:
    """The block of every `alloc` and `free_requested` event of `ev` (idx, action, addr, size;
    0 for other events), and the bytes of the blocks allocated at the snapshot."""
    cfg = settings(data)
    segments = [s for s in data.get("segments") or [] if s.get("device", device) == device]
    end_bytes = sum(
        int(b.get("size") or 0) for s in segments for b in s.get("blocks") or [] if b.get("state") == "active_allocated"
    )
    r = ev.select("action", "addr", "size").with_columns(rounded(ev["size"], cfg))
    counted = pl.col("action").is_in([ALLOC, FREE])
    blocks = r.select(pl.when(counted).then(pl.col("r")).otherwise(0).alias("block"))["block"]
    if cfg["expandable_segments"]:
        return blocks, end_bytes
    code = pl.col("action").replace_strict(CODES, default=-1, return_dtype=pl.Int8)
    large = (
        r.with_row_index("_pos")
        .filter(
            (pl.col("action").is_in([ALLOC, FREE, DONE]) & (pl.col("r") > SMALL_SIZE))
            | (pl.col("action").is_in([SEGMENT_NEW, SEGMENT_GONE]) & (pl.col("size") != SMALL_BUFFER))
        )
        .with_columns(code.alias("code"))
    )
    if large.height == 0:
        return blocks, end_bytes
    got = _replay_large_pool(_initial_layout(segments, large), large, cfg["max_split_size"])
    pos = large.select("_pos", pl.Series("_b", got, dtype=pl.Int64)).filter(pl.col("_b") > 0)
    return blocks.scatter(pos["_pos"], pos["_b"]), end_bytes


# the large pool's events as small ints for the replay's loop
CODES = {ALLOC: 0, FREE: 1, DONE: 2, SEGMENT_NEW: 3, SEGMENT_GONE: 4}
IS_FREE, IS_ALLOCATED, IS_PENDING = 0, 1, 2  # a block's state (pending: freed, not yet back in the cache)
NONE = -1  # no neighbour


def _chain(blocks: dict[int, list[int]], start: int, size: int, taken: list[tuple[int, int, int]]) -> None:
    """Lay out one segment as a chain of blocks [size, state, prev, next] keyed by address: the
    `taken` (addr, size, state) blocks, and free blocks in the gaps between them."""
    layout: list[tuple[int, int, int]] = []
    pos, end = start, start + size
    for addr, bsize, state in sorted(taken):
        if addr > pos:
            layout.append((pos, addr - pos, IS_FREE))
        layout.append((addr, bsize, state))
        pos = addr + bsize
    if pos < end:
        layout.append((pos, end - pos, IS_FREE))
    for i, (addr, bsize, state) in enumerate(layout):
        prev = layout[i - 1][0] if i else NONE
        nxt = layout[i + 1][0] if i + 1 < len(layout) else NONE
        blocks[addr] = [bsize, state, prev, nxt]


def _initial_layout(segments: list[dict], large: pl.DataFrame) -> dict[int, list[int]]:
    """The large pool when the history began, as block chains: its segments then, the blocks
    allocated (or waiting to be freed) then, free space merged between them."""
    seg_events = large.filter(pl.col("code") >= CODES[SEGMENT_NEW])
    first_seg = dict(seg_events.group_by("addr", maintain_order=True).agg(pl.col("code").first()).iter_rows())
    seg: dict[int, int] = {}
    recorded: dict[int, tuple[int, int]] = {}
    for s in segments:
        if s.get("segment_type", "large") == "small" or int(s.get("total_size") or 0) == SMALL_BUFFER:
            continue
        addr = int(s.get("address") or 0)
        if first_seg.get(addr) != CODES[SEGMENT_NEW]:
            seg[addr] = int(s.get("total_size") or 0)
        for b in s.get("blocks") or []:
            if b.get("state") in ("active_allocated", "active_pending_free"):
                state = IS_ALLOCATED if b["state"] == "active_allocated" else IS_PENDING
                recorded[int(b.get("address") or 0)] = (int(b.get("size") or 0), state)
    gone_first = seg_events.filter(pl.col("code") == CODES[SEGMENT_GONE]).unique("addr", keep="first")
    for addr, size in gone_first.select("addr", "size").iter_rows():
        if first_seg.get(addr) == CODES[SEGMENT_GONE]:
            seg[addr] = size
    # blocks that existed when the recording began: freed during it without being allocated in it
    # (its first event a free: size unknown, see below), or allocated all along (recorded)
    firsts = (
        large.filter(pl.col("code") <= CODES[DONE])
        .group_by("addr", maintain_order=True)
        .agg(pl.col("code").first(), pl.col("r").first())
    )
    before: dict[int, tuple[int | None, int, int]] = {
        addr: (None, IS_ALLOCATED if code == CODES[FREE] else IS_PENDING, r)
        for addr, code, r in firsts.filter(pl.col("code") != CODES[ALLOC]).iter_rows()
    }
    touched = set(firsts["addr"].to_list())
    for addr, (size, state) in recorded.items():
        if addr not in touched:
            before[addr] = (size, state, size)
    starts = sorted(seg)
    inside: dict[int, list[int]] = {s: [] for s in seg}
    for addr in before:
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < starts[i] + seg[starts[i]]:
            inside[starts[i]].append(addr)
    blocks: dict[int, list[int]] = {}
    for start, addrs in inside.items():
        addrs.sort()
        taken = []
        for i, addr in enumerate(addrs):
            size, state, r = before[addr]
            if size is None:  # the rounded request, or up to the next block when no block fits between
                nxt = addrs[i + 1] if i + 1 < len(addrs) else start + seg[start]
                size = nxt - addr if nxt - addr - r <= SMALL_SIZE else r
            taken.append((addr, size, state))
        _chain(blocks, start, seg[start], taken)
    return blocks


def _replay_large_pool(blocks: dict[int, list[int]], large: pl.DataFrame, max_split: int | None) -> list[int]:
    """The block of each large-pool alloc and free_requested (0 for the other events): the
    allocator's split (should_split) and merge (free_block) steps over block chains."""
    split_below = max_split if max_split is not None else 1 << 62
    out = [0] * large.height
    get = blocks.get
    rows = zip(large["code"].to_list(), large["addr"].to_list(), large["r"].to_list(), large["size"].to_list())
    for i, (code, addr, r, size) in enumerate(rows):
        if code == 0:  # alloc: the free block at addr, split or whole
            b = get(addr)
            if b is None or b[1] != IS_FREE:  # the layout has no free block there: the rounded request
                b = blocks[addr] = [r, IS_ALLOCATED, NONE, NONE]
            else:
                rest = b[0] - r
                if rest > SMALL_SIZE and r < split_below:
                    nxt = b[3]
                    blocks[addr + r] = [rest, IS_FREE, addr, nxt]
                    if nxt != NONE:
                        blocks[nxt][2] = addr + r
                    b[0], b[3] = r, addr + r
                b[1] = IS_ALLOCATED
            out[i] = b[0]
        elif code == 1:  # free_requested: torch's counter drops by the block
            b = get(addr)
            if b is None:
                out[i] = r
            else:
                out[i] = b[0]
                b[1] = IS_PENDING
        elif code == 2:  # free_completed: back in the cache, merged with free neighbours
            b = get(addr)
            if b is None:
                continue
            b[1] = IS_FREE
            nxt = b[3]
            if nxt != NONE and blocks[nxt][1] == IS_FREE:
                n = blocks.pop(nxt)
                b[0] += n[0]
                b[3] = n[3]
                if n[3] != NONE:
                    blocks[n[3]][2] = addr
            prev = b[2]
            if prev != NONE and blocks[prev][1] == IS_FREE:
                p = blocks[prev]
                p[0] += b[0]
                p[3] = b[3]
                if b[3] != NONE:
                    blocks[b[3]][2] = prev
                del blocks[addr]
        elif code == 3:  # segment_alloc: one free block
            blocks[addr] = [size, IS_FREE, NONE, NONE]
        elif code == 4:  # segment_free: its blocks go
            while addr != NONE and addr in blocks:
                addr = blocks.pop(addr)[3]
    return out
