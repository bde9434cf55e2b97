"""The static schedule of a sliding-window plan (vc4nn/kernels/window_plan.py): which chunks
an input row loads, which rows a loop iteration covers, which accumulator set an output row
uses, the order of the uniform reads. Both the code generator (window.py) and the uniform
streams (window_streams.py) follow it."""

from asm import vdw_stride


class WindowSchedule:
    """Mixed into WindowPlan: needs its shape, tiling fields and ``variants``."""

    def chunks(self, variant):
        """(first local column, pixels) of each DMA load of one input row."""
        return [(c, min(self.in_chunk, variant.hi - c))
                for c in range(variant.lo, variant.hi, self.in_chunk)]

    def body_rows(self, variant):
        """Input rows per loop iteration: a period (``rolled``: a stride, one output row),
        doubled if that makes the store count odd with two store buffers (they must be in the
        same roles at the start of every iteration). An odd chunk count swaps the load buffers'
        registers instead (``flips_buffers``)."""
        rows = self.stride_h if self.rolled else self.period
        stores = rows // self.stride_h * len(self.store_chunks(variant))
        return rows * (2 if stores % self.store_buffers else 1)

    def flips_buffers(self, variant):
        """Whether an iteration ends with the load buffers in swapped roles (an odd number of
        chunks): the kernel then swaps the registers that name them."""
        return self.body_rows(variant) * len(self.chunks(variant)) % 2 == 1

    def store_chunks(self, variant):
        """(first output column, pixels) of each DMA store of one output row."""
        return [(j, min(self.out_chunk, variant.cols - j))
                for j in range(0, variant.cols, self.out_chunk)]

    def taps(self, row):
        """(kh, output row relative to the iteration) of every window row ``row`` (in the body)
        feeds."""
        return [(kh, (row - kh) // self.stride_h) for kh in range(self.kernel_h)
                if (row - kh) % self.stride_h == 0]

    def acc_set(self, out_row, shifts):
        """The accumulator set of relative output row ``out_row`` after ``shifts`` shifts in
        this iteration. Unrolled: the sets take turns over a period (``out_row`` modulo the
        sets). Rolled: set 0 holds the oldest row a body row feeds (relative row
        1 - acc_sets), and after each stored row the sets move down one (``shift_sets``)."""
        if self.rolled:
            return out_row + self.acc_sets - 1 - shifts
        return out_row % self.acc_sets

    def finished(self, row):
        """The relative output row completed by body row ``row``, or None."""
        last = row - (self.kernel_h - 1)
        return last // self.stride_h if last % self.stride_h == 0 else None

    def events(self, variant):
        """The uniform reads of one loop iteration in code order: ("row", r) is the address of
        body row r (r == body_rows: the next iteration's first row), ("store", o) the address of
        relative output row o; avg_pool adds ("scale", o) before each store."""
        out = []
        rows, chunks = self.body_rows(variant), self.chunks(variant)
        for r in range(rows):
            for k in range(len(chunks)):
                if k == len(chunks) - 1:
                    out.append(("row", r + 1))
            o = self.finished(r)
            if o is not None:
                if self.op == "avg_pool":
                    out.append(("scale", o))
                out.append(("store", o))
        return out

    def iterations(self, tile):
        needed = (tile.rows - 1) * self.stride_h + self.kernel_h
        return -(-needed // self.body_rows(self.variants[tile.variant]))

    def out_pixel_bytes(self):
        """Bytes between neighbouring pixels of a channel in the result."""
        return self.out_bytes if self.out_layout == "chw" else self.channels * self.out_bytes

    def store_stride(self, pixels):
        """The VDW stride of a "chw" store of ``pixels``: one channel's row to the next."""
        return vdw_stride((self.out_h * self.out_w - pixels) * self.out_bytes)

    def cols_in_window(self, variant, j):
        first = j * self.stride_w
        return min(first + self.kernel_w, variant.hi) - max(first, variant.lo)
