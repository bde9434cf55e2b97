/* The TMUs as general memory lookup units (mirror of tmu.py and cache.py): per-slice TMU
 * caches whose lines keep the write epoch their data dates from, request queues in order per
 * TMU, the swap of QPUs 2 and 3 of a slice. The state lives here during a run. The Python Tmu
 * still does what reports or faults (texture writes, FIFO overflow, ldtmu with nothing
 * outstanding, a gather outside memory, the stale-read check when a line dates from before the
 * latest DMA store); line fills go through the bus and its L2s (bus.c, or the Python bus);
 * at the end of a run the queues' lengths go back to the Python Tmu for its end-of-run check. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

int tmu_init(Machine *m)
{
    Tmu *t = &m->tmu_state;
    PyObject *in_c = PyObject_GetAttrString(m->glue, "tmu_in_c");
    if (!in_c)
        return -1;
    t->in_c = PyObject_IsTrue(in_c);
    Py_DECREF(in_c);
    if (!t->in_c)
        return 0;
    PyObject *timing = PyObject_GetAttrString(m->tmu, "timing");
    if (!timing)
        return -1;
    long long bytes = timing_int(timing, "tmu_cache_bytes");
    long long line = timing_int(timing, "tmu_cache_line_bytes");
    long long ways = timing_int(timing, "tmu_cache_ways");
    t->fifo_depth = timing_int(timing, "tmu_fifo_depth");
    t->request_clocks = timing_int(timing, "tmu_request_clocks");
    t->hit_latency = timing_int(timing, "tmu_hit_latency");
    t->miss_latency = timing_int(timing, "tmu_miss_latency");
    Py_DECREF(timing);
    if (PyErr_Occurred())
        return -1;
    for (int s = 0; s < NUM_SLICES; s++)
        for (int u = 0; u < TMU_UNITS; u++)
            if (lru_init(&t->caches[s][u], bytes, line, ways, "tmu_cache_line_bytes") < 0)
                return -1;
    return 0;
}

void tmu_release(Machine *m)
{
    Tmu *t = &m->tmu_state;
    for (int s = 0; s < NUM_SLICES; s++)
        for (int u = 0; u < TMU_UNITS; u++)
            lru_free(&t->caches[s][u]);
    for (int q = 0; q < NUM_QPUS; q++)
        for (int u = 0; u < TMU_UNITS; u++)
            free(t->fifos[q][u].items);
    memset(t, 0, sizeof(*t));
}

static int physical_unit(const Tmu *t, int qpu, int unit)
{
    int swapped = qpu % QPUS_PER_SLICE >= QPUS_PER_SLICE / 2 && !t->noswap[qpu];
    return unit ^ swapped;
}

int tmu_set_noswap(Machine *m, Qpu *q, const uint32_t *v)
{
    if (!m->tmu_state.in_c) {
        PyObject *r = PyObject_CallMethod(m->tmu, "set_noswap", "ik", q->index,
                                          (unsigned long)v[0]);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    m->tmu_state.noswap[q->index] = v[0] != 0;
    return 0;
}

static int fifo_push(TmuFifo *f, const uint32_t *values, int64_t ready)
{
    if (f->count == f->cap) {
        int cap = f->cap ? 2 * f->cap : 8;
        TmuRequest *items = malloc((size_t)cap * sizeof(TmuRequest));
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < f->count; i++)
            items[i] = f->items[(f->head + i) % f->cap];
        free(f->items);
        f->items = items;
        f->head = 0;
        f->cap = cap;
    }
    TmuRequest *r = &f->items[(f->head + f->count) % f->cap];
    memcpy(r->values, values, sizeof(vec));
    r->ready = ready;
    f->count++;
    return 0;
}

/* (line, bus alias, index into the request) of one element, for Tmu._lookup's line order */
typedef struct {
    uint32_t line, alias, lane;
} LineOf;

static int cmp_line(const void *a, const void *b)
{
    const LineOf *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->lane < y->lane ? -1 : x->lane > y->lane;
}

/* MemoryBus.write_epoch: how many DMA stores wrote memory so far */
static int write_epoch(Machine *m, long long *epoch)
{
    if (PyObject_TypeCheck(m->bus, &BusType)) {
        *epoch = ((Bus *)m->bus)->write_epoch;
        return 0;
    }
    PyObject *latest = PyObject_GetAttrString(m->bus, "write_epoch");
    if (!latest)
        return -1;
    *epoch = PyLong_AsLongLong(latest);
    Py_DECREF(latest);
    return *epoch == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Tmu._check_stale, called only when a line the request read dates from before the latest DMA
 * store (no word can be newer than its line otherwise) */
static int check_stale(Machine *m, int qpu, const uint32_t *bus_addresses, const LineOf *order,
                       const int64_t *epochs, long long line_bytes)
{
    uint32_t lines[LANES];
    for (int i = 0; i < LANES; i++)
        lines[i] = (uint32_t)(bus_addresses[i] / (uint64_t)line_bytes);
    PyObject *addresses = vec_to_array(bus_addresses), *line_array = vec_to_array(lines);
    PyObject *by_line = PyDict_New(), *r = NULL;
    int ok = addresses && line_array && by_line;
    for (int i = 0, k = 0; ok && i < LANES; i++) {
        if (i && order[i].line == order[i - 1].line)
            continue;
        PyObject *key = PyLong_FromUnsignedLong(order[i].line);
        PyObject *value = PyLong_FromLongLong(epochs[k++]);
        ok = key && value && PyDict_SetItem(by_line, key, value) == 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
    }
    if (ok)
        r = PyObject_CallMethod(m->tmu, "_check_stale", "iOOO", qpu, addresses, line_array,
                                by_line);
    Py_XDECREF(addresses);
    Py_XDECREF(line_array);
    Py_XDECREF(by_line);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Tmu._lookup: when the request is ready; each cached line keeps the write epoch its data dates
 * from, so a word a DMA store wrote after that is read stale */
static int lookup(Machine *m, int qpu, int physical, const uint32_t *addresses, int64_t now,
                  int64_t *ready)
{
    Tmu *t = &m->tmu_state;
    int slice = qpu / QPUS_PER_SLICE;
    Lru *cache = &t->caches[slice][physical];
    int64_t begin = now > t->free_at[slice][physical] ? now : t->free_at[slice][physical];
    t->free_at[slice][physical] = begin + t->request_clocks;
    uint32_t bus_addresses[LANES];
    LineOf order[LANES];
    for (int i = 0; i < LANES; i++) {
        bus_addresses[i] = addresses[i] & BUS_ADDRESS_MASK;
        order[i].line = (uint32_t)(bus_addresses[i] / (uint64_t)cache->line);
        order[i].alias = addresses[i] & BUS_ALIAS_MASK;
        order[i].lane = (uint32_t)i;
    }
    qsort(order, LANES, sizeof(LineOf), cmp_line);   /* a line's first element comes first */
    *ready = begin + t->hit_latency;
    int64_t epochs[LANES], oldest = INT64_MAX;
    int nlines = 0;
    for (int i = 0; i < LANES; i++) {
        if (i && order[i].line == order[i - 1].line)
            continue;
        int64_t epoch, unused;
        if (!lru_get(cache, order[i].line, &epoch, &unused)) {
            int64_t arrives;
            uint32_t address = (uint32_t)((uint64_t)order[i].line * cache->line) | order[i].alias;
            if (unit_read_line(m, begin, address, cache->line, t->miss_latency, &arrives,
                              &epoch) < 0)
                return -1;
            lru_put(cache, order[i].line, epoch, 0);
            if (arrives > *ready)
                *ready = arrives;
        }
        epochs[nlines++] = epoch;
        if (epoch < oldest)
            oldest = epoch;
    }
    long long latest;
    if (write_epoch(m, &latest) < 0)
        return -1;
    if (oldest < latest)
        return check_stale(m, qpu, bus_addresses, order, epochs, cache->line);
    return 0;
}

/* Tmu.write for a tmuN_s write (unit_coord = 4 * unit + coordinate index) */
int tmu_write(Machine *m, Qpu *q, int unit_coord, const uint32_t *v)
{
    Tmu *t = &m->tmu_state;
    int unit = unit_coord / 4, qpu = q->index;
    if (unit_coord % 4 || !t->in_c)  /* a texture coordinate: Python reports it */
        return unit_tmu_write(m, q, unit_coord, v);
    int outstanding = t->fifos[qpu][0].count + t->fifos[qpu][1].count;
    if (outstanding >= t->fifo_depth) {
        PyObject *r = PyObject_CallMethod(m->tmu, "report_overflow", "ii", qpu, outstanding);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    int physical = physical_unit(t, qpu, unit);
    uint32_t addresses[LANES], data[LANES];
    int outside = 0;
    for (int i = 0; i < LANES; i++) {
        addresses[i] = v[i] & ~3u;
        uint8_t *p = memory_at(m, addresses[i], 4);
        if (p)
            memcpy(&data[i], p, 4);
        else
            outside = 1;
    }
    if (outside) {                  /* Tmu._gather raises the fault of the first bad element */
        PyObject *array = vec_to_array(addresses);
        PyObject *r = array ? PyObject_CallMethod(m->tmu, "_gather", "Oi", array, qpu) : NULL;
        Py_XDECREF(array);
        if (!r)
            return -1;
        int rc = array_to_vec(r, data);
        Py_DECREF(r);
        if (rc < 0)
            return -1;
    }
    int64_t ready;
    if (lookup(m, qpu, physical, addresses, q->clock, &ready) < 0)
        return -1;
    TmuFifo *fifo = &t->fifos[qpu][physical];
    if (fifo->count) {              /* results come back in order */
        int64_t last = fifo->items[(fifo->head + fifo->count - 1) % fifo->cap].ready;
        if (last > ready)
            ready = last;
    }
    return fifo_push(fifo, data, ready);
}

/* Tmu.load: the oldest result of that TMU into r4, waiting for it */
int tmu_load(Machine *m, Qpu *q, int unit)
{
    TmuFifo *fifo = &m->tmu_state.fifos[q->index][physical_unit(&m->tmu_state, q->index, unit)];
    if (!fifo->count || !m->tmu_state.in_c)    /* nothing outstanding: Python reports it */
        return unit_tmu_load(m, q, unit);
    TmuRequest *r = &fifo->items[fifo->head];
    memcpy(q->acc[4], r->values, sizeof(vec));
    qpu_wait(q, r->ready, STALL_TMU);
    fifo->head = (fifo->head + 1) % fifo->cap;
    fifo->count--;
    return 0;
}

/* Unread results go back to the Python Tmu, whose finish counts them. */
int tmu_export(Machine *m)
{
    if (!m->tmu_state.in_c)
        return 0;
    PyObject *fifos = PyObject_GetAttrString(m->tmu, "_fifos");
    if (!fifos)
        return -1;
    int rc = 0;
    for (int q = 0; q < m->num_qpus && rc == 0; q++)
        for (int u = 0; u < TMU_UNITS && rc == 0; u++) {
            int n = m->tmu_state.fifos[q][u].count;
            if (!n)
                continue;
            PyObject *row = PySequence_GetItem(fifos, q);
            PyObject *fifo = row ? PySequence_GetItem(row, u) : NULL;
            for (int i = 0; fifo && i < n && rc == 0; i++) {
                PyObject *r = PyObject_CallMethod(fifo, "append", "O", Py_None);
                rc = r ? 0 : -1;
                Py_XDECREF(r);
            }
            if (!fifo)
                rc = -1;
            Py_XDECREF(fifo);
            Py_XDECREF(row);
        }
    Py_DECREF(fifos);
    return rc;
}
