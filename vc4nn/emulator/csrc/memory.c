/* The bus memory as C sees it: the numpy arrays of BusMemory's allocations (mirror of
 * memory.py; faults are raised by the Python side, which C asks when a lookup misses). */
#include <stdlib.h>

#include "core.h"

/* allocations: a list of (bus start without alias bits, size, data pointer as int), sorted */
int memory_load(Machine *m, PyObject *allocations)
{
    Py_ssize_t n = PyList_Size(allocations);
    if (n < 0)
        return -1;
    memory_release(m);
    m->blocks = calloc(n ? n : 1, sizeof(Block));
    if (!m->blocks) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long start, size;
        unsigned long long pointer;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(allocations, i), "kkK", &start, &size, &pointer))
            return -1;
        m->blocks[i].start = (uint32_t)start;
        m->blocks[i].size = (uint32_t)size;
        m->blocks[i].data = (uint8_t *)(uintptr_t)pointer;
    }
    m->nblocks = n;
    return 0;
}

void memory_release(Machine *m)
{
    free(m->blocks);
    m->blocks = NULL;
    m->nblocks = 0;
}

/* [address, address + nbytes) inside one allocation, or NULL (the caller asks Python for the
 * fault). */
uint8_t *memory_at(Machine *m, uint32_t address, uint32_t nbytes)
{
    uint32_t addr = address & BUS_ADDRESS_MASK;
    Py_ssize_t lo = 0, hi = m->nblocks;
    while (lo < hi) {           /* the last block starting at or before addr */
        Py_ssize_t mid = (lo + hi) / 2;
        if (m->blocks[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    Block *b = &m->blocks[lo - 1];
    uint64_t offset = (uint64_t)addr - b->start;
    if (offset + nbytes > b->size)
        return NULL;
    return b->data + offset;
}
