"""The uniform streams of the sliding-window kernels: per QPU, the words its program reads, in
the order the code generator (vc4nn/kernels/window.py) reads them, from the static schedule of
the plan (vc4nn/kernels/window_plan.py)."""

from asm import vdr_pitch, vdw_stride

from . import chain
from . import dma


def uniform_streams(plan, x_addr, y_addr, weights_addr):
    """Per QPU: [its first VPM row as a generic read and as a generic write setup offset,
    tile records..., 0]."""
    streams = []
    per_qpu = plan.vpm_rows_per_qpu(plan.qpus)
    for q, tiles in enumerate(plan.qpu_tiles()):
        words = [dma.generic_row_offset(q * per_qpu, plan.in_access_bits),
                 dma.generic_row_offset(q * per_qpu, plan.stage_bits)]
        for tile in tiles:
            words += tile_header(plan, tile, q * per_qpu, weights_addr)
            words += row_and_store_words(plan, tile, x_addr, y_addr)
        streams.append(words + [0])
    return chain.with_tail(streams)


def tile_header(plan, tile, vpm_row, weights_addr):
    """[1, load setup base, load pitch, store setup base, store stride ("hwc" only: a "chw"
    store sets its own), (weights), loop count, variant]: the order the kernel reads them
    (window.tile_setup)."""
    channels = min(plan.block_channels, plan.channels - tile.block * plan.block_channels)
    depth = -(-channels // plan.lane_channels)          # elements of a pixel's DMA row
    pitch = plan.channels * plan.in_bytes
    words = [1, dma.load_setup_base(depth, vpm_row, plan.in_access_bits), vdr_pitch(pitch),
             dma.store_setup_base(depth, vpm_row, plan.out_access_bits,
                                  plan.out_layout == "hwc")]
    if plan.out_layout == "hwc":
        words.append(vdw_stride((plan.channels - channels) * plan.out_bytes))
    if plan.op == "depthwise":
        words.append(weights_addr + tile.block * plan.block_channels * plan.w_bytes)
    return words + [plan.iterations(tile), tile.variant]


def row_and_store_words(plan, tile, x_addr, y_addr):
    """The first input row's address, then per loop iteration the words of its events
    (``WindowPlan.events``): input row addresses, avg_pool's row scales, store addresses."""
    variant = plan.variants[tile.variant]
    c = plan.channels
    rows = plan.body_rows(variant)
    out_per_iter = rows // plan.stride_h
    needed = (tile.rows - 1) * plan.stride_h + plan.kernel_h
    top = tile.row0 * plan.stride_h - plan.pads[0]          # global row of local row 0
    left = tile.col0 * plan.stride_w - plan.pads[2] + variant.lo
    channel = tile.block * plan.block_channels

    def row_address(i):
        """0 for a padding row and a row past the last one the tile needs: the kernel fills
        its buffer with zeros instead of loading it."""
        g = top + i
        if i >= needed or not 0 <= g < plan.in_h:
            return 0
        return x_addr + ((g * plan.in_w + left) * c + channel) * plan.in_bytes

    def output_row(o):
        return o if 0 <= o < tile.rows else None

    words = [row_address(0)]
    for m in range(plan.iterations(tile)):
        for kind, r in plan.events(variant):
            if kind == "row":
                words.append(row_address(m * rows + r))
                continue
            o = output_row(m * out_per_iter + r)
            if kind == "scale":
                words.append(0.0 if o is None else 1.0 / rows_in_window(plan, tile.row0 + o))
            elif o is None:
                words.append(0)
            else:
                words.append(y_addr + out_offset(plan, tile.row0 + o, tile.col0, channel))
    return words


def out_offset(plan, row, col, channel):
    """Byte offset of output (row, col, channel) in the result's layout."""
    pixel = row * plan.out_w + col
    if plan.out_layout == "chw":
        return (channel * plan.out_h * plan.out_w + pixel) * plan.out_bytes
    return (pixel * plan.channels + channel) * plan.out_bytes


def rows_in_window(plan, out_row):
    """Input rows in the window of output row ``out_row`` (avg_pool's divisor, with columns)."""
    first = out_row * plan.stride_h - plan.pads[0]
    return min(first + plan.kernel_h, plan.in_h) - max(first, 0)
