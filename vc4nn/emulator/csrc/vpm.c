/* The VPM during a run (mirror of the Vpm class in vpm.py, the specification): the storage
 * (the Python Vpm's byte array, shared), the generic read and write setups with their read
 * queues, the race check against unsettled DMAs, and the reports, whose messages the glue
 * formats with vpm.MESSAGES. The DMA engines are in dma.c. The launch's Vpm is new (Machine
 * makes one per launch), so the run starts from an empty state; at the end the state goes back
 * to the Python Vpm (vpm_export), whose finish makes the end-of-run checks. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define GENERIC_ADDR_SPAN (1 << VPM_GENERIC_READ_ADDR_BITS)

int vpm_init(Machine *m)
{
    Vpm *v = &m->vpm_state;
    PyObject *timing = PyObject_GetAttrString(m->vpm, "timing");
    if (!timing)
        return -1;
    v->read_queue = timing_int(timing, "vpm_read_queue");
    v->read_latency = timing_int(timing, "vpm_read_latency");
    v->load_latency = timing_int(timing, "dma_load_latency");
    v->store_latency = timing_int(timing, "dma_store_latency");
    Py_DECREF(timing);
    if (PyErr_Occurred())
        return -1;
    for (size_t i = 0; i < sizeof(v->clock_cache) / sizeof(v->clock_cache[0]); i++)
        v->clock_cache[i].key = -1;
    PyObject *bytes = PyObject_GetAttrString(m->vpm, "bytes");
    if (!bytes)
        return -1;
    int rc = PyObject_GetBuffer(bytes, &v->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    Py_DECREF(bytes);
    if (rc < 0)
        return -1;
    if (v->view.len != VPM_DMA_ROWS * ROW_BYTES) {
        PyBuffer_Release(&v->view);
        PyErr_SetString(PyExc_ValueError, "the VPM storage has the wrong size");
        return -1;
    }
    v->bytes = v->view.buf;
    return 0;
}

void vpm_release(Machine *m)
{
    Vpm *v = &m->vpm_state;
    if (v->bytes)
        PyBuffer_Release(&v->view);
    v->bytes = NULL;
    for (int q = 0; q < NUM_QPUS; q++) {
        free(v->reads[q].items);
        v->reads[q].items = NULL;
    }
}

/* Vpm._report: the glue formats MESSAGES[key](*args) and reports it under ``rule`` */
int vpm_report(Machine *m, int qpu, const char *rule, const char *key, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyObject *args = Py_VaBuildValue(format, va);
    va_end(va);
    if (!args)
        return -1;
    PyObject *r = PyObject_CallMethod(m->glue, "vpm_report", "sisO", rule, qpu, key, args);
    Py_DECREF(args);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Vpm._check_race: ``words`` lists the VPM words the access touches */
int vpm_check_race(Machine *m, int qpu, const int *words, int nwords, int writes_vpm,
                   const char *what)
{
    Vpm *v = &m->vpm_state;
    int touched = 0;        /* by an unsettled DMA it races with: then find the first one */
    for (int w = 0; w < nwords && !touched; w++)
        touched = v->cover[DMA_LOAD][words[w]] || (writes_vpm && v->cover[DMA_STORE][words[w]]);
    if (!touched)
        return 0;
    for (int i = 0; i < v->nunsettled; i++) {
        int issuer = v->unsettled[i] / 2, kind = v->unsettled[i] % 2;
        if (!writes_vpm && kind != DMA_LOAD)
            continue;
        const uint8_t *mask = v->dmas[issuer][kind].words;
        for (int w = 0; w < nwords; w++)
            if (mask[words[w]])
                return vpm_report(m, qpu, "vpm_dma_race", "dma_race", "(siis)", what, issuer, qpu,
                                  kind == DMA_LOAD ? "load" : "store");
    }
    return 0;
}

/* GenericSetup(word, table); width 0 for the reserved SIZE */
static GenericSetup generic_setup(uint32_t word, int is_read)
{
    GenericSetup s;
    int size = is_read ? FIELD(word, VPM_GENERIC_READ, SIZE) : FIELD(word, VPM_GENERIC_WRITE, SIZE);
    s.width = size == VPM_SIZE_BYTES1 ? 1 : size == VPM_SIZE_BYTES2 ? 2
              : size == VPM_SIZE_BYTES4 ? 4 : 0;
    if (is_read) {
        s.horizontal = FIELD(word, VPM_GENERIC_READ, HORIZONTAL);
        s.laned = FIELD(word, VPM_GENERIC_READ, LANED);
        s.stride = COUNT(word, VPM_GENERIC_READ, STRIDE);
        s.addr = FIELD(word, VPM_GENERIC_READ, ADDR);
        s.remaining = COUNT(word, VPM_GENERIC_READ, NUM);
    } else {
        s.horizontal = FIELD(word, VPM_GENERIC_WRITE, HORIZONTAL);
        s.laned = FIELD(word, VPM_GENERIC_WRITE, LANED);
        s.stride = COUNT(word, VPM_GENERIC_WRITE, STRIDE);
        s.addr = FIELD(word, VPM_GENERIC_WRITE, ADDR);
        s.remaining = -1;
    }
    s.ready = 0;
    return s;
}

/* generic_positions: the VPM byte where each of the 16 elements starts (its width bytes follow
 * it in one VPM word), and that word; reports an ADDR past row 63 */
static int positions(Machine *m, int qpu, const GenericSetup *s, const char *what, int *first,
                     int *words)
{
    int per_word = WORD_BYTES / s->width, sel = s->addr % per_word, line = s->addr / per_word;
    if (line >= VPM_ROWS
        && vpm_report(m, qpu, "vpm_out_of_range", "generic_out_of_range", "(si)", what, s->addr) < 0)
        return -1;
    /* the line is Y (horizontal) or {Y[5:4], X} (vertical), wrapped into the generic rows */
    int row = ROW_BYTES * (line % VPM_ROWS), column = WORD_BYTES * (line % LANES);
    int base = LANES * ((line / LANES) % (VPM_ROWS / LANES));
    /* element i starts at byte start + step * i along the line: 32-bit, line word i; laned,
     * sub-word sel of line word i; packed, consecutive sub-words from group sel of 16 */
    int start = s->width == WORD_BYTES ? 0 : s->laned ? s->width * sel : LANES * s->width * sel;
    int step = s->width == WORD_BYTES || s->laned ? WORD_BYTES : s->width;
    for (int i = 0; i < LANES; i++) {
        int along = start + step * i;
        first[i] = s->horizontal ? row + along
                                 : ROW_BYTES * (base + along / WORD_BYTES) + column
                                   + along % WORD_BYTES;
        words[i] = first[i] / WORD_BYTES;
    }
    return 0;
}

static void advance(GenericSetup *s)
{
    s->addr = (s->addr + s->stride) % GENERIC_ADDR_SPAN;
}

/* Vpm.read */
int vpm_read(Machine *m, Qpu *q, uint32_t *out)
{
    Vpm *v = &m->vpm_state;
    SetupQueue *queue = &v->reads[q->index];
    GenericSetup *s;
    if (queue->count) {
        s = &queue->items[queue->head];
        if (!--s->remaining) {
            v->last_read[q->index] = *s;
            v->has_last_read[q->index] = 1;
            queue->head = (queue->head + 1) % queue->cap;
            queue->count--;
            s = &v->last_read[q->index];
        }
    } else {
        memset(out, 0, sizeof(vec));
        if (!v->has_last_read[q->index])
            return vpm_report(m, q->index, "vpm_missing_setup", "read_missing_setup", "()");
        if (vpm_report(m, q->index, "vpm_read_past_setup", "read_past_setup", "()") < 0)
            return -1;
        s = &v->last_read[q->index];
    }
    int first[LANES], words[LANES];
    if (positions(m, q->index, s, "read", first, words) < 0
        || vpm_check_race(m, q->index, words, LANES, 0, "a generic VPM read") < 0)
        return -1;
    const uint8_t *b = v->bytes;
    switch (s->width) {     /* little-endian elements; 8/16-bit reads are zero-extended */
    case 4:
        for (int i = 0; i < LANES; i++)
            out[i] = b[first[i]] | b[first[i] + 1] << 8 | b[first[i] + 2] << 16
                     | (uint32_t)b[first[i] + 3] << 24;
        break;
    case 2:
        for (int i = 0; i < LANES; i++)
            out[i] = b[first[i]] | b[first[i] + 1] << 8;
        break;
    default:
        for (int i = 0; i < LANES; i++)
            out[i] = b[first[i]];
    }
    advance(s);
    qpu_wait(q, s->ready, STALL_VPM);
    return 0;
}

/* Vpm.write */
int vpm_write(Machine *m, Qpu *q, const uint32_t *values)
{
    Vpm *v = &m->vpm_state;
    if (!v->has_write[q->index])
        return vpm_report(m, q->index, "vpm_missing_setup", "write_missing_setup", "()");
    GenericSetup *s = &v->write[q->index];
    int first[LANES], words[LANES];
    if (positions(m, q->index, s, "write", first, words) < 0
        || vpm_check_race(m, q->index, words, LANES, 1, "a generic VPM write") < 0)
        return -1;
    uint8_t *b = v->bytes;
    switch (s->width) {     /* the low bytes of each value, little-endian */
    case 4:
        for (int i = 0; i < LANES; i++) {
            b[first[i]] = (uint8_t)values[i];
            b[first[i] + 1] = (uint8_t)(values[i] >> 8);
            b[first[i] + 2] = (uint8_t)(values[i] >> 16);
            b[first[i] + 3] = (uint8_t)(values[i] >> 24);
        }
        break;
    case 2:
        for (int i = 0; i < LANES; i++) {
            b[first[i]] = (uint8_t)values[i];
            b[first[i] + 1] = (uint8_t)(values[i] >> 8);
        }
        break;
    default:
        for (int i = 0; i < LANES; i++)
            b[first[i]] = (uint8_t)values[i];
    }
    advance(s);
    return 0;
}

static int push_read(SetupQueue *queue, const GenericSetup *s)
{
    if (queue->count == queue->cap) {       /* grow, keeping the order */
        int cap = queue->cap ? 2 * queue->cap : 4;
        GenericSetup *items = malloc(sizeof(GenericSetup) * cap);
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < queue->count; i++)
            items[i] = queue->items[(queue->head + i) % queue->cap];
        free(queue->items);
        queue->items = items;
        queue->head = 0;
        queue->cap = cap;
    }
    queue->items[(queue->head + queue->count++) % queue->cap] = *s;
    return 0;
}

/* Vpm._unused_bits */
int vpm_unused_bits(Machine *m, int qpu, uint32_t word, uint32_t unused_mask, const char *what)
{
    uint32_t unused = word & unused_mask;
    if (!unused)
        return 0;
    return vpm_report(m, qpu, "vpm_setup_unused_bits", "setup_unused_bits", "(skk)", what,
                      (unsigned long)word, (unsigned long)unused);
}

/* Vpm._queue_read */
static int queue_read(Machine *m, Qpu *q, uint32_t word)
{
    Vpm *v = &m->vpm_state;
    GenericSetup s = generic_setup(word, 1);
    if (!s.width)
        return vpm_report(m, q->index, "vpm_setup_invalid", "reserved_size", "(sk)", "vr_setup",
                          (unsigned long)word);
    SetupQueue *queue = &v->reads[q->index];
    if (queue->count >= v->read_queue) {
        long long unread = 0;
        for (int i = 0; i < queue->count; i++)
            unread += queue->items[(queue->head + i) % queue->cap].remaining;
        if (vpm_report(m, q->index, "vpm_read_queue_overflow", "read_queue_overflow", "(iLL)",
                       queue->count, unread, v->read_queue) < 0)
            return -1;
    }
    s.ready = q->clock + v->read_latency;
    return push_read(queue, &s);
}

/* Vpm.write_vr_setup / write_vw_setup: generic setups here, DMA setups in dma.c */
int vpm_setup(Machine *m, Qpu *q, int is_read, uint32_t word)
{
    if (is_read) {
        if (FIELD(word, VPM_GENERIC_READ, ID) != VPM_GENERIC_ID)
            return dma_vdr_setup(m, q, word);
        if (vpm_unused_bits(m, q->index, word, VPM_GENERIC_READ_UNUSED_BITS,
                            "generic VPM read setup") < 0)
            return -1;
        return queue_read(m, q, word);
    }
    if (FIELD(word, VPM_GENERIC_WRITE, ID) != VPM_GENERIC_ID)
        return dma_vdw_setup(m, q, word);
    if (vpm_unused_bits(m, q->index, word, VPM_GENERIC_WRITE_UNUSED_BITS,
                        "generic VPM write setup") < 0)
        return -1;
    GenericSetup s = generic_setup(word, 0);
    if (!s.width)
        return vpm_report(m, q->index, "vpm_setup_invalid", "reserved_size", "(sk)", "vw_setup",
                          (unsigned long)word);
    m->vpm_state.write[q->index] = s;
    m->vpm_state.has_write[q->index] = 1;
    return 0;
}

static PyObject *none(void)
{
    Py_INCREF(Py_None);
    return Py_None;
}

static PyObject *setup_tuple(const GenericSetup *s)
{
    return Py_BuildValue("(NNiiiLL)", PyBool_FromLong(s->horizontal), PyBool_FromLong(s->laned),
                         s->width, s->stride, s->addr, (long long)s->remaining,
                         (long long)s->ready);
}

static PyObject *dma_tuple(const Dma *d)
{
    if (!d->active)
        Py_RETURN_NONE;
    return Py_BuildValue("(LNy#)", (long long)d->complete, PyBool_FromLong(d->settled),
                         (const char *)d->words, (Py_ssize_t)VPM_WORDS);
}

/* The state back to the Python Vpm (ccore._Glue.vpm_import), for its finish and for anyone
 * who looks at the machine's Vpm after the run */
int vpm_export(Machine *m)
{
    Vpm *v = &m->vpm_state;
    PyObject *qpus = PyList_New(m->num_qpus), *unsettled = PyList_New(v->nunsettled);
    if (!qpus || !unsettled)
        goto fail;
    for (int i = 0; i < v->nunsettled; i++) {
        PyObject *t = Py_BuildValue("(ii)", v->unsettled[i] / 2, v->unsettled[i] % 2);
        if (!t)
            goto fail;
        PyList_SET_ITEM(unsettled, i, t);
    }
    for (int q = 0; q < m->num_qpus; q++) {
        SetupQueue *queue = &v->reads[q];
        PyObject *reads = PyList_New(queue->count);
        if (!reads)
            goto fail;
        for (int i = 0; i < queue->count; i++) {
            PyObject *t = setup_tuple(&queue->items[(queue->head + i) % queue->cap]);
            if (!t) {
                Py_DECREF(reads);
                goto fail;
            }
            PyList_SET_ITEM(reads, i, t);
        }
        PyObject *last = v->has_last_read[q] ? setup_tuple(&v->last_read[q]) : none();
        PyObject *write = v->has_write[q] ? setup_tuple(&v->write[q]) : none();
        PyObject *vdr = v->has_vdr[q] ? PyLong_FromUnsignedLong(v->vdr[q]) : none();
        PyObject *vdw = v->has_vdw[q] ? PyLong_FromUnsignedLong(v->vdw[q]) : none();
        PyObject *entry = Py_BuildValue("(NNNNLN(LN)NN)", reads, last, write, vdr,
                                        (long long)v->vdr_pitch[q], vdw,
                                        (long long)v->vdw_stride[q],
                                        PyBool_FromLong(v->vdw_blockmode[q]),
                                        dma_tuple(&v->dmas[q][DMA_LOAD]),
                                        dma_tuple(&v->dmas[q][DMA_STORE]));
        if (!entry)
            goto fail;
        PyList_SET_ITEM(qpus, q, entry);
    }
    PyObject *r = PyObject_CallMethod(m->glue, "vpm_import", "OO", qpus, unsettled);
    Py_DECREF(qpus);
    Py_DECREF(unsettled);
    Py_XDECREF(r);
    return r ? 0 : -1;
fail:
    Py_XDECREF(qpus);
    Py_XDECREF(unsettled);
    return -1;
}
