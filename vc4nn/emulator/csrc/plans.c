/* Instruction fetch: the lowered record at a code address, fetched once per run and address
 * (Machine.plan_at); a miss asks the glue, which reads memory, raises fetch faults and
 * unsupported-instruction errors, and keeps records cached by (address, word). */
#include <stdlib.h>

#include "core.h"

void plans_clear(Machine *m)
{
    free(m->slots);
    free(m->records);
    m->slots = NULL;
    m->records = NULL;
    m->nslots = m->nused = m->nrecords = m->records_cap = 0;
}

static Py_ssize_t slot_of(const Machine *m, uint32_t pc)
{
    Py_ssize_t mask = m->nslots - 1, i = (Py_ssize_t)((pc >> 3) * 2654435761u) & mask;
    while (m->slots[i].record >= 0 && m->slots[i].pc != pc)
        i = (i + 1) & mask;
    return i;
}

static int grow(Machine *m)
{
    Py_ssize_t old_n = m->nslots, n = old_n ? old_n * 2 : 1024;
    PlanSlot *old = m->slots;
    m->slots = malloc((size_t)n * sizeof(PlanSlot));
    if (!m->slots) {
        m->slots = old;
        PyErr_NoMemory();
        return -1;
    }
    m->nslots = n;
    for (Py_ssize_t i = 0; i < n; i++)
        m->slots[i].record = -1;
    for (Py_ssize_t i = 0; i < old_n; i++)
        if (old[i].record >= 0)
            m->slots[slot_of(m, old[i].pc)] = old[i];
    free(old);
    return 0;
}

static int add_record(Machine *m, PyObject *list)
{
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != RECORD_WORDS) {
        PyErr_SetString(PyExc_TypeError, "fetch must return a list of RECORD_WORDS ints");
        return -1;
    }
    if (m->nrecords == m->records_cap) {
        Py_ssize_t cap = m->records_cap ? m->records_cap * 2 : 256;
        Record *r = realloc(m->records, (size_t)cap * sizeof(Record));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        m->records = r;
        m->records_cap = cap;
    }
    Record *rec = &m->records[m->nrecords];
    for (int i = 0; i < RECORD_WORDS; i++) {
        rec->f[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (rec->f[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return (int)m->nrecords++;
}

const Record *plan_at(Machine *m, Qpu *q, uint32_t pc)
{
    if (m->nslots) {
        Py_ssize_t i = slot_of(m, pc);
        if (m->slots[i].record >= 0)
            return &m->records[m->slots[i].record];
    }
    PyObject *list = PyObject_CallMethod(m->glue, "fetch", "Ii", (unsigned int)pc, q->index);
    if (!list)
        return NULL;
    int index = add_record(m, list);
    Py_DECREF(list);
    if (index < 0)
        return NULL;
    if ((m->nused + 1) * 2 > m->nslots && grow(m) < 0)
        return NULL;
    Py_ssize_t i = slot_of(m, pc);
    m->slots[i].pc = pc;
    m->slots[i].record = index;
    m->nused++;
    return &m->records[index];
}
