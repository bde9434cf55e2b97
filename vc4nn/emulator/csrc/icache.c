/* icache.InstructionCaches in C: one instruction cache per slice, shared by its QPUs, whose lines
 * keep the clock their fill arrives; misses go through the bus's L2 (unit_read_line). The
 * statistics go back to the Python object at the end of a run. */
#include "core.h"

int icache_init(Machine *m)
{
    Icache *c = &m->icache_state;
    PyObject *timing = PyObject_GetAttrString(m->icache, "timing");
    if (!timing)
        return -1;
    long long bytes = timing_int(timing, "icache_bytes");
    long long ways = timing_int(timing, "icache_ways");
    c->line = timing_int(timing, "icache_line_bytes");
    c->miss_latency = timing_int(timing, "icache_miss_latency");
    c->prefetch = timing_int(timing, "icache_prefetch_lines");
    Py_DECREF(timing);
    if (PyErr_Occurred())
        return -1;
    for (int s = 0; s < NUM_SLICES; s++)
        if (lru_init(&c->caches[s], bytes, c->line, ways, "icache_line_bytes") < 0)
            return -1;
    return 0;
}

void icache_release(Machine *m)
{
    for (int s = 0; s < NUM_SLICES; s++)
        lru_free(&m->icache_state.caches[s]);
}

/* InstructionCaches._fill: line ``number`` into ``cache`` through the L2; -1 on error */
static int fill(Machine *m, Lru *cache, int64_t number, uint32_t alias, int64_t now,
                int64_t *arrives)
{
    Icache *c = &m->icache_state;
    uint32_t start = (uint32_t)(number * c->line) | alias;
    int64_t unused;
    if (unit_read_line(m, now, start, c->line, c->miss_latency, arrives, &unused) < 0)
        return -1;
    lru_put(cache, number, *arrives, 0);
    return 0;
}

/* InstructionCaches.fetch, and the QPU's wait for the line (Qpu.step) */
int icache_fetch(Machine *m, Qpu *q, uint32_t pc)
{
    Icache *c = &m->icache_state;
    Lru *cache = &c->caches[q->index / QPUS_PER_SLICE];
    int64_t number = (int64_t)((pc & BUS_ADDRESS_MASK) / (uint64_t)c->line), arrives, unused;
    uint32_t alias = pc & BUS_ALIAS_MASK;
    if (lru_get(cache, number, &arrives, &unused)) {
        c->hits++;
    } else {
        c->misses++;
        if (fill(m, cache, number, alias, q->clock, &arrives) < 0)
            return -1;
    }
    for (int64_t ahead = number + 1; ahead <= number + c->prefetch; ahead++) {
        int64_t ignored;
        if (!lru_peek(cache, ahead) && fill(m, cache, ahead, alias, q->clock, &ignored) < 0)
            return -1;
    }
    qpu_wait(q, arrives, STALL_ICACHE);
    return 0;
}

int icache_export(Machine *m)
{
    PyObject *hits = PyLong_FromLongLong(m->icache_state.hits);
    PyObject *misses = PyLong_FromLongLong(m->icache_state.misses);
    int rc = hits && misses && PyObject_SetAttrString(m->icache, "hits", hits) == 0
             && PyObject_SetAttrString(m->icache, "misses", misses) == 0 ? 0 : -1;
    Py_XDECREF(hits);
    Py_XDECREF(misses);
    return rc;
}
