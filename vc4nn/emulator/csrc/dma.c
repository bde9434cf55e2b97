/* The VPM's DMA engines during a run (mirror of the VDR/VDW half of the Vpm class in vpm.py,
 * the specification): their setup registers, loads into and stores from the VPM, the waits,
 * the checks with the specification's rules and messages (vpm_report), and their timing: the
 * bus occupancy comes from the Timing object's dma_*_clocks (asked once per shape, then
 * remembered) and is booked on the memory bus (bus.c). A fault (a row outside every
 * allocation) is raised by the Python memory, which words it. */
#include <string.h>

#include "core.h"

#define VPM_BYTES (VPM_DMA_ROWS * ROW_BYTES)

static const char *const KIND_NAME[] = {"load", "store"};

/* dma_width: element bytes and sub-word index of a MODEW code; 0 bytes for an unused code */
static int dma_width(int modew, int *sel)
{
    static const int widths[] = DMA_MODEW_WIDTHS, bases[] = DMA_MODEW_BASES;
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++)
        if (bases[i] <= modew && modew < bases[i] + 8 * WORD_BYTES / widths[i]) {
            *sel = modew - bases[i];
            return widths[i] / 8;
        }
    return 0;
}

/* Timing.dma_load_clocks / dma_store_clocks (rows, row_bytes), remembered per shape */
static int64_t dma_clocks(Machine *m, int kind, long long rows, long long row_bytes)
{
    Vpm *v = &m->vpm_state;
    int64_t key = ((int64_t)kind << 40) | ((int64_t)rows << 20) | row_bytes;
    size_t slot = (size_t)((rows * 31 + row_bytes) * 2 + kind)
                  % (sizeof(v->clock_cache) / sizeof(v->clock_cache[0]));
    if (v->clock_cache[slot].key == key)
        return v->clock_cache[slot].clocks;
    PyObject *timing = PyObject_GetAttrString(m->vpm, "timing");
    PyObject *r = timing ? PyObject_CallMethod(timing, kind == DMA_LOAD ? "dma_load_clocks"
                                                                         : "dma_store_clocks",
                                               "LL", rows, row_bytes) : NULL;
    Py_XDECREF(timing);
    if (!r)
        return -1;
    long long clocks = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (clocks < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a DMA took a negative number of clocks");
        return -1;
    }
    v->clock_cache[slot].key = key;
    v->clock_cache[slot].clocks = clocks;
    return clocks;
}

/* MemoryBus.reserve and record_write, in C when the bus is the C one */
static int64_t bus_book(Machine *m, int64_t now, int64_t clocks)
{
    if (PyObject_TypeCheck(m->bus, &BusType))
        return bus_reserve((Bus *)m->bus, now, clocks);
    PyObject *r = PyObject_CallMethod(m->bus, "reserve", "LL", (long long)now, (long long)clocks);
    if (!r)
        return -1;
    long long begin = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return begin;
}

static int bus_written(Machine *m, long long address, long long nbytes)
{
    if (PyObject_TypeCheck(m->bus, &BusType))
        return bus_record_write((Bus *)m->bus, (uint64_t)address, nbytes);
    PyObject *r = PyObject_CallMethod(m->bus, "record_write", "LL", address, nbytes);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Vpm._retire: wait for this QPU's DMA of that kind; the QPU has now observed it */
static void retire(Machine *m, Qpu *q, int kind)
{
    Vpm *v = &m->vpm_state;
    Dma *d = &v->dmas[q->index][kind];
    if (!d->active || d->settled)
        return;
    d->settled = 1;
    for (int i = 0; i < d->nwords; i++)
        v->cover[kind][d->word_list[i]]--;
    int id = 2 * q->index + kind, k = 0;
    for (int i = 0; i < v->nunsettled; i++)
        if (v->unsettled[i] != id)
            v->unsettled[k++] = v->unsettled[i];
    v->nunsettled = k;
    qpu_wait(q, d->complete, STALL_DMA);
}

/* Vpm._transfer: book the DMA on the bus; it completes ``latency`` after its slot ends */
static int transfer(Machine *m, Qpu *q, int kind, int nwords, int64_t occupancy,
                    long long latency)
{
    Vpm *v = &m->vpm_state;
    int64_t begin = bus_book(m, q->clock, occupancy);
    if (begin < 0 && PyErr_Occurred())
        return -1;
    Dma *d = &v->dmas[q->index][kind];
    d->active = 1;
    d->settled = 0;
    d->complete = begin + occupancy + latency;
    memcpy(d->words, v->scratch.words, sizeof(v->scratch.words));
    d->nwords = nwords;
    for (int i = 0; i < nwords; i++) {
        d->word_list[i] = (uint16_t)v->scratch.word_list[i];
        v->cover[kind][d->word_list[i]]++;
    }
    v->unsettled[v->nunsettled++] = 2 * q->index + kind;
    return 0;
}

/* line_bytes: nbytes consecutive bytes along a line from word (y, x) plus offset bytes: along
 * row y (horizontal) or down column x (vertical); not yet wrapped */
static void line_bytes(int vertical, int y, int x, int offset, int nbytes, int *out)
{
    for (int i = 0; i < nbytes; i++) {
        int along = offset + i;
        if (vertical) {
            int at = WORD_BYTES * y + along;
            out[i] = ROW_BYTES * (at / WORD_BYTES) + WORD_BYTES * x + at % WORD_BYTES;
        } else {
            out[i] = ROW_BYTES * y + WORD_BYTES * x + along;
        }
    }
}

/* Vpm._wrap and _mask: range-check the indices (rows x row_bytes), wrap them into the VPM,
 * mark the words they touch; the number of words */
static int wrap(Machine *m, int qpu, int rows, int row_bytes, int vertical, int blockmode,
                const char *what, int *nwords)
{
    Vpm *v = &m->vpm_state;
    int n = rows * row_bytes, top = 0, past_row = 0;
    for (int i = 0; i < n; i++) {
        int row = v->scratch.index[i] / ROW_BYTES;
        if (row > top)
            top = row;
        if (row != v->scratch.index[i - i % row_bytes] / ROW_BYTES)
            past_row = 1;
    }
    if (top >= VPM_ROWS
        && vpm_report(m, qpu, "vpm_out_of_range", "dma_beyond_user_rows", "(si)", what, top) < 0)
        return -1;
    if (!vertical && !blockmode && past_row
        && vpm_report(m, qpu, "vpm_out_of_range", "dma_row_past_end", "(s)", what) < 0)
        return -1;
    memset(v->scratch.words, 0, sizeof(v->scratch.words));
    for (int i = 0; i < n; i++) {
        v->scratch.index[i] %= VPM_BYTES;
        v->scratch.words[v->scratch.index[i] / WORD_BYTES] = 1;
    }
    int k = 0;
    for (int w = 0; w < VPM_WORDS; w++)
        if (v->scratch.words[w])
            v->scratch.word_list[k++] = w;
    *nwords = k;
    return 0;
}

/* Vpm._dma_address: drop (and report) the bits below the element size */
static int dma_address(Machine *m, int qpu, uint32_t address, int width, int kind,
                       uint32_t *out)
{
    if (address % width
        && vpm_report(m, qpu, "dma_alignment", "dma_alignment", "(ski)", KIND_NAME[kind],
                      (unsigned long)address, width) < 0)
        return -1;
    *out = address - address % width;
    return 0;
}

static PyObject *memory_unit(Machine *m)
{
    return PyObject_GetAttrString(m->vpm, "memory");
}

/* Memory.read_bytes for a row outside every allocation: raises its fault (or, should the
 * Python memory find the row after all, copies what it read) */
static int python_read(Machine *m, int qpu, long long address, int nbytes, uint8_t *out)
{
    PyObject *memory = memory_unit(m);
    PyObject *r = memory ? PyObject_CallMethod(memory, "read_bytes", "Lisi", address, nbytes,
                                               "dma_load", qpu) : NULL;
    Py_XDECREF(memory);
    if (!r)
        return -1;
    Py_buffer view;
    int rc = PyObject_GetBuffer(r, &view, PyBUF_C_CONTIGUOUS);
    if (rc == 0) {
        if (view.len == nbytes)
            memcpy(out, view.buf, nbytes);
        else
            rc = -1, PyErr_SetString(PyExc_ValueError, "the memory read the wrong size");
        PyBuffer_Release(&view);
    }
    Py_DECREF(r);
    return rc;
}

/* Memory.write_bytes through Python (the fault path) */
static int python_write(Machine *m, int qpu, long long address, const uint8_t *data, int nbytes)
{
    PyObject *memory = memory_unit(m);
    PyObject *array = PyByteArray_FromStringAndSize((const char *)data, nbytes);
    PyObject *r = memory && array ? PyObject_CallMethod(memory, "write_bytes", "LOsi", address,
                                                        array, "dma_store", qpu) : NULL;
    Py_XDECREF(memory);
    Py_XDECREF(array);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

int dma_vdr_setup(Machine *m, Qpu *q, uint32_t word)
{
    Vpm *v = &m->vpm_state;
    if (FIELD(word, VDR_EXTENDED, ID) == DMA_VDR_EXTENDED_ID) {
        if ((word & VDR_EXTENDED_UNUSED_BITS)
            && vpm_report(m, q->index, "dma_pitch_out_of_range", "pitch_out_of_range", "(k)",
                          (unsigned long)word) < 0)
            return -1;
        v->vdr_pitch[q->index] = FIELD(word, VDR_EXTENDED, MPITCHB);
    } else if (FIELD(word, VDR_SETUP, ID) == DMA_VDR_SETUP_ID) {
        v->vdr[q->index] = word;
        v->has_vdr[q->index] = 1;
    } else {
        return vpm_report(m, q->index, "vpm_setup_invalid", "selects_no_setup", "(sk)",
                          "vr_setup", (unsigned long)word);
    }
    return 0;
}

int dma_vdw_setup(Machine *m, Qpu *q, uint32_t word)
{
    Vpm *v = &m->vpm_state;
    int kind = FIELD(word, VDW_SETUP, ID);
    if (kind == DMA_VDW_SETUP_ID) {
        v->vdw[q->index] = word;
        v->has_vdw[q->index] = 1;
    } else if (kind == DMA_VDW_STRIDE_ID) {
        if (vpm_unused_bits(m, q->index, word, VDW_STRIDE_UNUSED_BITS,
                            "DMA store stride setup") < 0)
            return -1;
        v->vdw_stride[q->index] = FIELD(word, VDW_STRIDE, STRIDE);
        v->vdw_blockmode[q->index] = FIELD(word, VDW_STRIDE, BLOCKMODE);
    } else {
        return vpm_report(m, q->index, "vpm_setup_invalid", "selects_no_setup", "(sk)",
                          "vw_setup", (unsigned long)word);
    }
    return 0;
}

/* Vpm.write_vr_addr: start a DMA load, after this QPU's previous load has finished */
int dma_load(Machine *m, Qpu *q, uint32_t value)
{
    Vpm *v = &m->vpm_state;
    int qpu = q->index;
    retire(m, q, DMA_LOAD);
    if (!v->has_vdr[qpu])
        return vpm_report(m, qpu, "vpm_missing_setup", "load_missing_setup", "()");
    uint32_t word = v->vdr[qpu];
    /* MODEW 1 cannot occur here: id bits 1001 make the word an extended-pitch setup */
    int sel = 0, width = dma_width(FIELD(word, VDR_SETUP, MODEW), &sel);
    int rowlen = COUNT(word, VDR_SETUP, ROWLEN), nrows = COUNT(word, VDR_SETUP, NROWS);
    int vpitch = COUNT(word, VDR_SETUP, VPITCH), vertical = FIELD(word, VDR_SETUP, VERTICAL);
    int y = FIELD(word, VDR_SETUP, ADDRXY) / LANES, x = FIELD(word, VDR_SETUP, ADDRXY) % LANES;
    int mpitch = FIELD(word, VDR_SETUP, MPITCH);
    long long pitch = mpitch ? (long long)DMA_VDR_MPITCH_BYTES << mpitch : v->vdr_pitch[qpu];
    uint32_t address;
    if (dma_address(m, qpu, value, width, DMA_LOAD, &address) < 0)
        return -1;
    int per_word = WORD_BYTES / width, row_bytes = rowlen * width, nwords;
    /* VPITCH is added to {Y, H} (16-bit), {Y, B} (8-bit) or Y (32-bit) after each row */
    for (int r = 0; r < nrows; r++) {
        int at = y * per_word + sel + r * vpitch;
        line_bytes(vertical, at / per_word, x, at % per_word * width, row_bytes,
                   v->scratch.index + r * row_bytes);
    }
    if (wrap(m, qpu, nrows, row_bytes, vertical, 0, "DMA load", &nwords) < 0)
        return -1;
    uint8_t *data = v->scratch.data;
    for (int r = 0; r < nrows; r++) {
        long long row_address = (long long)address + r * pitch;
        const uint8_t *src = memory_at(m, (uint32_t)row_address, row_bytes);
        if (src)
            memcpy(data + r * row_bytes, src, row_bytes);
        else if (python_read(m, qpu, row_address, row_bytes, data + r * row_bytes) < 0)
            return -1;
    }
    if (vpm_check_race(m, qpu, v->scratch.word_list, nwords, 1, "a DMA load into the VPM") < 0)
        return -1;
    for (int i = 0; i < nrows * row_bytes; i++)
        v->bytes[v->scratch.index[i]] = data[i];
    int64_t occupancy = dma_clocks(m, DMA_LOAD, nrows, row_bytes);
    if (occupancy < 0)
        return -1;
    return transfer(m, q, DMA_LOAD, nwords, occupancy, v->load_latency);
}

/* Vpm.write_vw_addr: start a DMA store, after this QPU's previous store has finished */
int dma_store(Machine *m, Qpu *q, uint32_t value)
{
    Vpm *v = &m->vpm_state;
    int qpu = q->index;
    retire(m, q, DMA_STORE);
    if (!v->has_vdw[qpu])
        return vpm_report(m, qpu, "vpm_missing_setup", "store_missing_setup", "()");
    uint32_t word = v->vdw[qpu];
    int sel = 0, width = dma_width(FIELD(word, VDW_SETUP, MODEW), &sel);
    if (!width)
        return vpm_report(m, qpu, "vpm_setup_invalid", "unused_modew", "(k)",
                          (unsigned long)word);
    if (FIELD(word, VDW_SETUP, LANED))
        return vpm_report(m, qpu, "dma_unsupported", "store_laned", "(k)", (unsigned long)word);
    int units = COUNT(word, VDW_SETUP, UNITS), depth = COUNT(word, VDW_SETUP, DEPTH);
    int vertical = !FIELD(word, VDW_SETUP, HORIZONTAL);
    int y = FIELD(word, VDW_SETUP, VPMBASE) / LANES, x = FIELD(word, VDW_SETUP, VPMBASE) % LANES;
    long long stride = v->vdw_stride[qpu];
    int blockmode = v->vdw_blockmode[qpu], nbytes = depth * width, nwords;
    if (blockmode && vertical)
        return vpm_report(m, qpu, "dma_unsupported", "store_vertical_blockmode", "()");
    if (blockmode) {        /* memory rows taken one after another from a linear VPM stream */
        line_bytes(0, y, x, sel * width, units * nbytes, v->scratch.index);
    } else if (vertical) {
        if (x + units > LANES
            && vpm_report(m, qpu, "vpm_out_of_range", "store_columns_past_row", "(ii)", units,
                          x) < 0)
            return -1;
        for (int u = 0; u < units; u++)
            line_bytes(1, y, (x + u) % LANES, sel * width, nbytes, v->scratch.index + u * nbytes);
    } else {
        for (int u = 0; u < units; u++)
            line_bytes(0, y + u, x, sel * width, nbytes, v->scratch.index + u * nbytes);
    }
    if (wrap(m, qpu, units, nbytes, vertical, blockmode, "DMA store", &nwords) < 0)
        return -1;
    uint32_t address;
    if (dma_address(m, qpu, value, width, DMA_STORE, &address) < 0
        || vpm_check_race(m, qpu, v->scratch.word_list, nwords, 0, "a DMA store from the VPM") < 0)
        return -1;
    uint8_t *data = v->scratch.data;
    for (int i = 0; i < units * nbytes; i++)
        data[i] = v->bytes[v->scratch.index[i]];
    long long pitch = nbytes + stride;
    /* without a stride the rows are one contiguous write (one fault check, as in vpm.py) */
    int pieces = stride == 0 ? 1 : units, piece_bytes = stride == 0 ? units * nbytes : nbytes;
    for (int p = 0; p < pieces; p++) {
        long long at = (long long)address + p * pitch;
        uint8_t *dst = memory_at(m, (uint32_t)at, piece_bytes);
        if (dst)
            memcpy(dst, data + p * piece_bytes, piece_bytes);
        else if (python_write(m, qpu, at, data + p * piece_bytes, piece_bytes) < 0)
            return -1;
    }
    for (int u = 0; u < units; u++)
        if (bus_written(m, (long long)address + u * pitch, nbytes) < 0)
            return -1;
    int64_t occupancy = dma_clocks(m, DMA_STORE, units, nbytes);
    if (occupancy < 0)
        return -1;
    return transfer(m, q, DMA_STORE, nwords, occupancy, v->store_latency);
}

/* Vpm.read_vr_wait / read_vw_wait (the value read is 0) */
int dma_wait(Machine *m, Qpu *q, int kind)
{
    retire(m, q, kind);
    return 0;
}

/* Vpm.read_vr_busy / read_vw_busy */
int dma_busy(Machine *m, Qpu *q, int kind, uint32_t *out)
{
    const Dma *d = &m->vpm_state.dmas[q->index][kind];
    int busy = d->active && !d->settled && d->complete > q->clock;
    if (!busy)          /* it has finished: observed now, without a wait */
        retire(m, q, kind);
    for (int i = 0; i < LANES; i++)
        out[i] = (uint32_t)busy;
    return 0;
}
