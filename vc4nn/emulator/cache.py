"""A set-associative LRU cache of whole lines, for the cycle model and the stale-read check
(never the data itself: the emulator reads memory at the time of the request).

The TMU caches, the instruction caches, the V3D L2 and the VideoCore L2 use it. A line number
maps to set ``line % sets``; each set keeps at most ``ways`` lines in least- to most-recently-used
order, with a value per line (the TMU caches keep the write epoch their data dates from, the
instruction caches the clock at which a line's fill arrives, the V3D L2 that clock and the
epoch). It runs once per line fill in Python, so each set is an OrderedDict: hit, insert and
eviction are O(1). csrc/cache.c is the C core's copy.
"""

import collections


class LruCache:
    """``size`` bytes in ``line``-byte lines, ``ways`` per set; size 0 holds nothing."""

    def __init__(self, size, line, ways):
        self.line = line
        self.ways = ways if size else 0
        self.sets = [collections.OrderedDict()
                     for _ in range(max(1, size // (line * max(ways, 1))))]

    def set_of(self, line_number):
        """The index of the set that holds line ``line_number``."""
        return line_number % len(self.sets)

    def get(self, line_number):
        """The value stored with the line (and the line becomes most recently used), or None."""
        lines = self.sets[self.set_of(line_number)]
        value = lines.get(line_number)
        if value is not None:
            lines.move_to_end(line_number)
        return value

    def peek(self, line_number):
        """The value stored with the line, or None; the order of use does not change."""
        return self.sets[self.set_of(line_number)].get(line_number)

    def put(self, line_number, value):
        """Store the line as most recently used, evicting its set's least recently used."""
        lines = self.sets[self.set_of(line_number)]
        lines[line_number] = value
        lines.move_to_end(line_number)
        while len(lines) > self.ways:
            lines.popitem(last=False)

    def touch(self, line_number):
        """True on a hit; either way the line ends up in the cache, most recently used."""
        if self.get(line_number) is not None:
            return True
        self.put(line_number, True)
        return False
