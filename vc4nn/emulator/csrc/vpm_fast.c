/* Generic VPM reads and writes without a Python call in the common case (mirror of
 * Vpm.read / Vpm.write and generic_positions in vpm.py). The state stays in the Python Vpm (its
 * read queues, setups and unsettled DMAs), which these functions read and update in place;
 * anything out of the ordinary (no setup, a read past its setup, a race to report) goes to the
 * Python methods, so checks and messages are the specification's. */
#include <string.h>

#include "core.h"

#define WORD_BYTES 4
#define ROW_BYTES (LANES * WORD_BYTES)
#define GENERIC_ADDR_SPAN (1 << VPM_GENERIC_READ_ADDR_BITS)
#define FIELD(word, table, name) \
    (((word) >> table##_##name##_LSB) & ((1u << table##_##name##_BITS) - 1))

static PyObject *s_remaining, *s_horizontal, *s_laned, *s_width, *s_addr, *s_stride, *s_ready,
    *s_kind, *s_words, *s_load, *s_popleft, *s_append, *s_new;

static int intern_names(void)
{
    static const struct { PyObject **slot; const char *text; } names[] = {
        {&s_remaining, "remaining"}, {&s_horizontal, "horizontal"}, {&s_laned, "laned"},
        {&s_width, "width"}, {&s_addr, "addr"}, {&s_stride, "stride"}, {&s_ready, "ready"},
        {&s_kind, "kind"}, {&s_words, "words"}, {&s_load, "load"}, {&s_popleft, "popleft"},
        {&s_append, "append"}, {&s_new, "__new__"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!*names[i].slot && !(*names[i].slot = PyUnicode_InternFromString(names[i].text)))
            return -1;
    return 0;
}

int vpm_fast_init(Machine *m)
{
    if (intern_names() < 0)
        return -1;
    PyObject *timing = PyObject_GetAttrString(m->vpm, "timing");
    if (!timing)
        return -1;
    PyObject *queue = PyObject_GetAttrString(timing, "vpm_read_queue");
    PyObject *latency = PyObject_GetAttrString(timing, "vpm_read_latency");
    Py_DECREF(timing);
    if (!queue || !latency) {
        Py_XDECREF(queue);
        Py_XDECREF(latency);
        return -1;
    }
    /* setups are made in C only when these are ints (else Python makes them) */
    m->vpm_fast_setups = PyLong_Check(queue) && PyLong_Check(latency);
    if (m->vpm_fast_setups) {
        m->vpm_read_queue = PyLong_AsLongLong(queue);
        m->vpm_read_latency = PyLong_AsLongLong(latency);
    }
    Py_DECREF(queue);
    Py_DECREF(latency);
    m->vpm_setup_class = PyObject_GetAttrString(m->glue, "generic_setup_class");
    if (!m->vpm_setup_class)
        return -1;
    PyObject *bytes = PyObject_GetAttrString(m->vpm, "bytes");
    if (!bytes)
        return -1;
    int rc = PyObject_GetBuffer(bytes, &m->vpm_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    Py_DECREF(bytes);
    if (rc < 0)
        return -1;
    m->vpm_bytes = m->vpm_view.buf;
    m->vpm_size = m->vpm_view.len;
    m->vpm_reads = PyObject_GetAttrString(m->vpm, "_reads");
    m->vpm_last_read = PyObject_GetAttrString(m->vpm, "_last_read");
    m->vpm_write = PyObject_GetAttrString(m->vpm, "_write");
    m->vpm_unsettled = PyObject_GetAttrString(m->vpm, "_unsettled");
    return m->vpm_reads && m->vpm_last_read && m->vpm_write && m->vpm_unsettled ? 0 : -1;
}

void vpm_fast_release(Machine *m)
{
    if (m->vpm_bytes)
        PyBuffer_Release(&m->vpm_view);
    m->vpm_bytes = NULL;
    Py_CLEAR(m->vpm_reads);
    Py_CLEAR(m->vpm_last_read);
    Py_CLEAR(m->vpm_write);
    Py_CLEAR(m->vpm_unsettled);
    Py_CLEAR(m->vpm_setup_class);
}

/* 0 and the value of an int attribute (bools included); nonzero when it is not an int (the
 * caller takes the Python path) or on an error (an exception is set) */
static int get_long(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v)
        return -1;
    int ok = PyLong_Check(v);
    if (ok)
        *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return ok && !PyErr_Occurred() ? 0 : 1;
}

/* generic_positions: the VPM byte of each byte of the 16 elements (width bytes each) */
typedef struct {
    int width;
    int32_t index[LANES * WORD_BYTES];
} Positions;

static int positions(PyObject *setup, Positions *p, long long *addr_out)
{
    long long horizontal, laned, width, addr;
    if (get_long(setup, s_horizontal, &horizontal) || get_long(setup, s_laned, &laned)
        || get_long(setup, s_width, &width) || get_long(setup, s_addr, &addr))
        return -1;
    int per_word = WORD_BYTES / (int)width, sel = (int)(addr % per_word);
    int line = (int)(addr / per_word);
    p->width = (int)width;
    *addr_out = addr;
    for (int i = 0; i < LANES; i++) {
        int start;
        if (width == WORD_BYTES)
            start = WORD_BYTES * i;
        else if (laned)
            start = WORD_BYTES * i + (int)width * sel;
        else
            start = LANES * (int)width * sel + (int)width * i;
        for (int k = 0; k < width; k++) {
            int along = start + k, index;
            if (horizontal) {
                index = ROW_BYTES * (line % VPM_ROWS) + along;
            } else {
                int column = line % LANES, base = LANES * ((line / LANES) % (VPM_ROWS / LANES));
                index = ROW_BYTES * (base + along / WORD_BYTES) + WORD_BYTES * column
                        + along % WORD_BYTES;
            }
            p->index[i * width + k] = index;
        }
    }
    return 0;
}

/* Vpm._check_race without the report: 1 if an unsettled DMA overlaps (Python then reports) */
static int races(Machine *m, const Positions *p, int writes_vpm)
{
    Py_ssize_t n = PyList_GET_SIZE(m->vpm_unsettled);
    for (Py_ssize_t d = 0; d < n; d++) {
        PyObject *dma = PyList_GET_ITEM(m->vpm_unsettled, d);
        if (!writes_vpm) {
            PyObject *kind = PyObject_GetAttr(dma, s_kind);
            if (!kind)
                return -1;
            int load = PyUnicode_Compare(kind, s_load) == 0;
            Py_DECREF(kind);
            if (!load)
                continue;
        }
        PyObject *words = PyObject_GetAttr(dma, s_words);
        if (!words)
            return -1;
        Py_buffer view;
        if (PyObject_GetBuffer(words, &view, PyBUF_C_CONTIGUOUS) < 0) {
            Py_DECREF(words);
            return -1;
        }
        int hit = 0;
        /* an element's bytes lie in one VPM word: its first byte names the word */
        for (int i = 0; i < LANES * p->width && !hit; i += p->width) {
            Py_ssize_t w = p->index[i] / WORD_BYTES;
            hit = w < view.len && ((const uint8_t *)view.buf)[w];
        }
        PyBuffer_Release(&view);
        Py_DECREF(words);
        if (hit)
            return 1;
    }
    return 0;
}

static int advance(PyObject *setup, long long addr)
{
    long long stride;
    if (get_long(setup, s_stride, &stride)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a VPM setup's stride is not an int");
        return -1;
    }
    PyObject *v = PyLong_FromLongLong((addr + stride) % GENERIC_ADDR_SPAN);
    if (!v)
        return -1;
    int rc = PyObject_SetAttr(setup, s_addr, v);
    Py_DECREF(v);
    return rc;
}

/* 1: done, 0: take the Python path, -1: error */
int vpm_fast_read(Machine *m, Qpu *q, uint32_t *out)
{
    PyObject *queue = PyList_GET_ITEM(m->vpm_reads, q->index);
    if (PyObject_Length(queue) < 1)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *setup = PySequence_GetItem(queue, 0);
    if (!setup)
        return -1;
    Positions p;
    long long addr, remaining, ready;
    int rc = -1, race;
    if (positions(setup, &p, &addr) || get_long(setup, s_remaining, &remaining)
        || get_long(setup, s_ready, &ready)) {
        rc = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    race = races(m, &p, 0);
    if (race) {
        rc = race < 0 ? -1 : 0;
        goto done;
    }
    PyObject *left = PyLong_FromLongLong(remaining - 1);
    if (!left || PyObject_SetAttr(setup, s_remaining, left) < 0) {
        Py_XDECREF(left);
        goto done;
    }
    Py_DECREF(left);
    if (remaining - 1 == 0) {
        PyObject *popped = PyObject_CallMethodObjArgs(queue, s_popleft, NULL);
        if (!popped)
            goto done;
        if (PyList_SetItem(m->vpm_last_read, q->index, popped) < 0)
            goto done;
    }
    for (int i = 0; i < LANES; i++) {
        uint32_t v = 0;     /* 8/16-bit reads are zero-extended */
        for (int k = 0; k < p.width; k++)
            v |= (uint32_t)m->vpm_bytes[p.index[i * p.width + k]] << (8 * k);
        out[i] = v;
    }
    if (advance(setup, addr) < 0)
        goto done;
    qpu_wait(q, ready > q->clock ? ready : q->clock, STALL_VPM);
    rc = 1;
done:
    Py_DECREF(setup);
    return rc;
}

int vpm_fast_write(Machine *m, Qpu *q, const uint32_t *values)
{
    PyObject *setup = PyList_GET_ITEM(m->vpm_write, q->index);
    if (setup == Py_None)
        return 0;
    Positions p;
    long long addr;
    if (positions(setup, &p, &addr))
        return PyErr_Occurred() ? -1 : 0;
    int race = races(m, &p, 1);
    if (race)
        return race < 0 ? -1 : 0;
    for (int i = 0; i < LANES; i++)
        for (int k = 0; k < p.width; k++)
            m->vpm_bytes[p.index[i * p.width + k]] = (uint8_t)(values[i] >> (8 * k));
    return advance(setup, addr) < 0 ? -1 : 1;
}

static int set_long(PyObject *obj, const char *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (!v)
        return -1;
    int rc = PyObject_SetAttrString(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* vpm.GenericSetup(word, table) for a valid word; NULL without an exception when SIZE is the
 * reserved 3 (Python reports it) */
static PyObject *new_setup(Machine *m, uint32_t word, int is_read)
{
    int size = is_read ? FIELD(word, VPM_GENERIC_READ, SIZE) : FIELD(word, VPM_GENERIC_WRITE, SIZE);
    int width = size == VPM_SIZE_BYTES1 ? 1 : size == VPM_SIZE_BYTES2 ? 2 : size == VPM_SIZE_BYTES4 ? 4 : 0;
    if (!width)
        return NULL;
    long long stride = is_read ? FIELD(word, VPM_GENERIC_READ, STRIDE) : FIELD(word, VPM_GENERIC_WRITE, STRIDE);
    long long num = FIELD(word, VPM_GENERIC_READ, NUM);
    int horizontal = is_read ? FIELD(word, VPM_GENERIC_READ, HORIZONTAL) : FIELD(word, VPM_GENERIC_WRITE, HORIZONTAL);
    int laned = is_read ? FIELD(word, VPM_GENERIC_READ, LANED) : FIELD(word, VPM_GENERIC_WRITE, LANED);
    long long addr = is_read ? FIELD(word, VPM_GENERIC_READ, ADDR) : FIELD(word, VPM_GENERIC_WRITE, ADDR);
    PyObject *setup = PyObject_CallMethodObjArgs(m->vpm_setup_class, s_new, m->vpm_setup_class, NULL);
    if (!setup)
        return NULL;
    /* field_count: a count whose maximum is stored as 0 */
    if (PyObject_SetAttr(setup, s_horizontal, horizontal ? Py_True : Py_False) < 0
        || PyObject_SetAttr(setup, s_laned, laned ? Py_True : Py_False) < 0
        || set_long(setup, "width", width) < 0
        || set_long(setup, "stride", stride ? stride : 1LL << (is_read ? VPM_GENERIC_READ_STRIDE_BITS : VPM_GENERIC_WRITE_STRIDE_BITS)) < 0
        || set_long(setup, "addr", addr) < 0
        || (is_read ? set_long(setup, "remaining", num ? num : 1LL << VPM_GENERIC_READ_NUM_BITS)
                    : PyObject_SetAttr(setup, s_remaining, Py_None)) < 0
        || set_long(setup, "ready", 0) < 0) {
        Py_DECREF(setup);
        return NULL;
    }
    return setup;
}

/* Vpm.write_vr_setup / write_vw_setup for a valid generic setup: 1 done, 0 take the Python
 * path (another kind of setup, unused bits set, a reserved SIZE, a full read queue: checks
 * to report), -1 */
int vpm_fast_setup(Machine *m, Qpu *q, int is_read, const uint32_t *value)
{
    uint32_t word = value[0];
    if (!m->vpm_fast_setups)
        return 0;
    if ((is_read ? FIELD(word, VPM_GENERIC_READ, ID) : FIELD(word, VPM_GENERIC_WRITE, ID)) != VPM_GENERIC_ID)
        return 0;
    if (word & (is_read ? VPM_GENERIC_READ_UNUSED_BITS : VPM_GENERIC_WRITE_UNUSED_BITS))
        return 0;   /* the Python path reports vpm_setup_unused_bits */
    PyObject *queue = NULL;
    if (is_read) {
        queue = PyList_GET_ITEM(m->vpm_reads, q->index);
        Py_ssize_t n = PyObject_Length(queue);
        if (n < 0)
            return -1;
        if (n >= m->vpm_read_queue)
            return 0;
    }
    PyObject *setup = new_setup(m, word, is_read);
    if (!setup)
        return PyErr_Occurred() ? -1 : 0;
    int rc;
    if (is_read) {
        rc = set_long(setup, "ready", q->clock + m->vpm_read_latency);
        if (rc == 0) {
            PyObject *r = PyObject_CallMethodObjArgs(queue, s_append, setup, NULL);
            rc = r ? 0 : -1;
            Py_XDECREF(r);
        }
        Py_DECREF(setup);
    } else {
        rc = PyList_SetItem(m->vpm_write, q->index, setup);     /* steals setup */
    }
    return rc < 0 ? -1 : 1;
}
