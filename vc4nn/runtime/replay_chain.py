"""Recorded launches of consecutive layers chained into one launch (vc4nn/kernels/chain.py).

Every layer kernel ends by reading its stream's last word, the chain word (0: end the program).
A ``Chain`` of launches L0..Ln runs as one launch on N QPUs (the most any of them uses):

- a table in device memory holds the control list of the launch (L0's entries; QPUs L0 does
  not use run the pass program), for each joint j (Lj -> Lj+1) and QPU q a chain record
  ``[j % 2, N on QPU 0 else 0, Lj+1's uniforms of q, its code]`` and the one-word streams of the pass
  programs (QPU q past Lj+1's QPU count: its chain word for the next joint);
- ``link()`` writes into each stream's chain word (in the recorded streams) the address of its
  QPU's record for the joint after it; ``unlink()`` writes 0 back: the launches run one by
  one again, as recorded.

Which launches may share one: the spans of ``launch_fusion.py`` (their memory planned for it),
cut where a launch's program does not end with the chain tail, a QPU's stream is not its own
or not in the recording's buffers, or a layer took a workspace (``chains_of``).
"""

import numpy as np

from ..kernels import chain as tail
from .replay import CONTROL_ENTRY_WORDS, PACK_ALIGN


class Chain:
    """Launches [(num_qpus, [(uniforms, code)], [chain word address per QPU], timeout)] of
    consecutive layers run as one launch: ``pair`` (num_qpus, control address)."""

    def __init__(self, device, code_pool, launches, writer, names=()):
        self.device, self.launches, self.write = device, launches, writer
        self.names = list(names)        # the layers, in order
        self.num_qpus = max(n for n, _, _, _ in launches)
        self.timeout = sum(t for _, _, _, t in launches)
        n, joints = self.num_qpus, len(launches) - 1
        pass_code = code_pool.address(np.frombuffer(tail.tail_code(), np.uint8))
        # Layout: control list, records [joint][qpu], pass streams [launch][qpu].
        control_words = n * CONTROL_ENTRY_WORDS
        records_at = control_words
        passes_at = records_at + joints * n * tail.RECORD_WORDS
        self.table = device.alloc(table_words(launches), np.uint32, align=PACK_ALIGN)
        base = self.table.address

        def record(j, q):
            return base + 4 * (records_at + (j * n + q) * tail.RECORD_WORDS)

        def pass_stream(j, q):
            return base + 4 * (passes_at + j * n + q)

        def entry(j, q):
            count, entries, _, _ = launches[j]
            return entries[q] if q < count else (pass_stream(j, q), pass_code)

        words = self.table
        for q in range(n):
            words[q * CONTROL_ENTRY_WORDS:(q + 1) * CONTROL_ENTRY_WORDS] = entry(0, q)
            for j in range(len(launches)):
                words[(pass_stream(j, q) - base) // 4] = record(j, q) if j < joints else 0
            for j in range(joints):
                at = (record(j, q) - base) // 4
                words[at:at + tail.RECORD_WORDS] = (j % 2, n if q == 0 else 0, *entry(j + 1, q))
        self.pair = (n, base)
        self._links = [(address, record(j, q) if j < joints else tail.END)
                       for j, (_, _, tails, _) in enumerate(launches)
                       for q, address in enumerate(tails)]

    def link(self):
        for address, word in self._links:
            self.write(address, word)

    def unlink(self):
        for address, _ in self._links:
            self.write(address, tail.END)

    @property
    def nbytes(self):
        """Device bytes of the table (its allocation's)."""
        return int(getattr(self.table.allocation, "size", self.table.nbytes))

    def free(self):
        self.device.free(self.table)


def table_words(launches):
    """Words of a Chain's table: control list, records, pass streams."""
    n = max(count for count, _, _, _ in launches)
    return n * (CONTROL_ENTRY_WORDS + (len(launches) - 1) * tail.RECORD_WORDS + len(launches))


def chainable(recording, code_of, writer):
    """[(num_qpus, entries, chain word addresses, timeout)] of a packed recording's launches,
    or None if one of them cannot chain. ``code_of(address)``: the code bytes there;
    ``writer``: a WordWriter over the buffers the chain words may be in."""
    out = []
    for (num_qpus, _, timeout), lengths, entries in zip(recording.launches,
                                                         recording.stream_words,
                                                         recording.entries):
        if lengths is None or not all(tail.chains(code_of(code)) for _, code in entries):
            return None
        tails = [uniforms + 4 * (length - 1) for (uniforms, _), length in zip(entries, lengths)]
        if len(set(tails)) != len(tails) or not all(map(writer.holds, tails)):
            return None                 # QPUs sharing a stream would share its chain word
        out.append((num_qpus, entries, tails, timeout))
    return out


def chains_of(spans, steps, recordings, code_of, writer):
    """The runs of launches to chain: per span of steps, [(layer names, launches)] of two or
    more launches each, cut where a layer cannot chain and after a layer that took a workspace
    (its bytes are free for the layers after it)."""
    runs = []
    for start, end in spans:
        names, launches = [], []
        for node, call in steps[start:end + 1]:
            if call is None:
                continue                # a view: nothing launched
            recording = recordings.get(node.name)
            if recording is None or not recording.launches:
                names, launches = _close(runs, names, launches)    # called every run
                continue
            parts = chainable(recording, code_of, writer)
            if parts is None:
                names, launches = _close(runs, names, launches)
                continue
            names.append(node.name)
            launches += parts
            if recording.used_workspace:
                names, launches = _close(runs, names, launches)
        _close(runs, names, launches)
    return runs


def _close(runs, names, launches):
    if len(launches) > 1:
        runs.append((names, launches))
    return [], []


class WordWriter:
    """Writes 32-bit words into whichever of the device ``buffers`` holds the address."""

    def __init__(self, buffers):
        self.spans = sorted((int(b.address), int(b.address) + int(b.nbytes), b)
                            for b in buffers if getattr(b, "nbytes", 0))

    def find(self, address):
        for start, end, buf in self.spans:
            if start <= address <= end - 4:
                return np.asarray(buf).reshape(-1).view(np.uint8)[address - start:][:4]
        return None

    def holds(self, address):
        return self.find(address) is not None

    def __call__(self, address, word):
        self.find(address)[:] = np.array([word], "<u4").view(np.uint8)


def link_spans(device, code_pool, spans, steps, recordings, chains, fits=lambda: True):
    """Append to ``chains`` the linked Chains of the launch ``spans`` over ``steps`` [(node,
    call)], from their packed ``recordings`` (programs in ``code_pool``). A chain after which
    ``fits()`` is False (a memory budget) is dropped: its layers launch one by one."""
    code = {buf.address: key for key, buf in code_pool.programs.items()}
    write = WordWriter([b for r in recordings.values() for b in r.buffers()])
    for names, launches in chains_of(spans, steps, recordings, code.get, write):
        programs = len(code_pool.programs)
        chains.append(Chain(device, code_pool, launches, write, names))
        if fits():
            chains[-1].link()
        else:
            chains.pop().free()
            code_pool.keep_first(programs)      # the pass program, if this chain added it
