/* Instruction fetch: the lowered record at a code address, fetched once per run and address
 * (Machine.plan_at). A new address is looked up by its instruction word in the machine's record
 * cache (kept across launches, so a program loaded again, even at another address, is not
 * lowered again); a miss asks the glue, which reads memory, raises fetch faults and
 * unsupported-instruction errors, and lowers the word. Only a branch's record depends on its
 * address (target, link): it is cached by (address, word), the others by the word alone. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define CACHE_CAPSULE "vc4nn.emulator._ccore.RecordCache"

typedef struct {
    uint64_t word;
    uint32_t pc;                /* 0 for all but branches */
    int used;
    Record record;
} CachedRecord;

typedef struct RecordCache {
    CachedRecord *slots;
    Py_ssize_t nslots, nused;
} RecordCache;

static void cache_destroy(PyObject *capsule)
{
    RecordCache *c = PyCapsule_GetPointer(capsule, CACHE_CAPSULE);
    if (c)
        free(c->slots);
    free(c);
}

/* record_cache(): a new, empty record cache (a capsule a machine keeps across launches) */
PyObject *record_cache_new(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    RecordCache *c = calloc(1, sizeof(RecordCache));
    if (!c)
        return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(c, CACHE_CAPSULE, cache_destroy);
    if (!capsule)
        free(c);
    return capsule;
}

RecordCache *record_cache_of(PyObject *capsule)
{
    return PyCapsule_GetPointer(capsule, CACHE_CAPSULE);
}

static Py_ssize_t cache_slot(const RecordCache *c, uint64_t word, uint32_t pc)
{
    Py_ssize_t mask = c->nslots - 1;
    uint64_t h = (word ^ ((uint64_t)pc << 17)) * UINT64_C(0x9E3779B97F4A7C15);
    Py_ssize_t i = (Py_ssize_t)(h >> 32) & mask;
    while (c->slots[i].used && (c->slots[i].word != word || c->slots[i].pc != pc))
        i = (i + 1) & mask;
    return i;
}

/* Keeps at most RECORD_CACHE_LIMIT records (then starts again, as the Python cache did) */
static int cache_put(RecordCache *c, uint64_t word, uint32_t pc, const Record *record)
{
    if (c->nused >= RECORD_CACHE_LIMIT) {
        memset(c->slots, 0, (size_t)c->nslots * sizeof(CachedRecord));
        c->nused = 0;
    }
    if ((c->nused + 1) * 2 > c->nslots) {
        Py_ssize_t old_n = c->nslots, n = old_n ? old_n * 2 : 1024;
        CachedRecord *old = c->slots;
        c->slots = calloc((size_t)n, sizeof(CachedRecord));
        if (!c->slots) {
            c->slots = old;
            PyErr_NoMemory();
            return -1;
        }
        c->nslots = n;
        for (Py_ssize_t i = 0; i < old_n; i++)
            if (old[i].used)
                c->slots[cache_slot(c, old[i].word, old[i].pc)] = old[i];
        free(old);
    }
    CachedRecord *slot = &c->slots[cache_slot(c, word, pc)];
    slot->word = word;
    slot->pc = pc;
    slot->used = 1;
    slot->record = *record;
    c->nused++;
    return 0;
}

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

static Record *new_record(Machine *m)
{
    if (m->nrecords == m->records_cap) {
        Py_ssize_t cap = m->records_cap ? m->records_cap * 2 : 256;
        Record *r = realloc(m->records, (size_t)cap * sizeof(Record));
        if (!r) {
            PyErr_NoMemory();
            return NULL;
        }
        m->records = r;
        m->records_cap = cap;
    }
    return &m->records[m->nrecords];
}

static int record_from_list(PyObject *list, Record *rec)
{
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != RECORD_WORDS) {
        PyErr_SetString(PyExc_TypeError, "fetch must return a list of RECORD_WORDS ints");
        return -1;
    }
    for (int i = 0; i < RECORD_WORDS; i++) {
        rec->f[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (rec->f[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* The record of the instruction at pc: from the record cache, or lowered by the glue */
static int fetch(Machine *m, Qpu *q, uint32_t pc, Record *rec)
{
    const uint8_t *code = pc & 7 ? NULL : memory_at(m, pc, INSTRUCTION_BYTES);
    uint64_t word = 0;
    uint32_t key_pc = 0;
    if (code) {
        for (int i = INSTRUCTION_BYTES - 1; i >= 0; i--)
            word = word << 8 | code[i];
        key_pc = word >> SIG_SHIFT == SIG_BRANCH ? pc : 0;
        RecordCache *c = m->record_cache;
        if (c->nslots) {
            CachedRecord *slot = &c->slots[cache_slot(c, word, key_pc)];
            if (slot->used) {
                *rec = slot->record;
                return 0;
            }
        }
    }
    PyObject *list = PyObject_CallMethod(m->glue, "fetch", "Ii", (unsigned int)pc, q->index);
    if (!list)
        return -1;
    int rc = record_from_list(list, rec);
    Py_DECREF(list);
    if (rc == 0 && code)
        rc = cache_put(m->record_cache, word, key_pc, rec);
    return rc;
}

const Record *plan_at(Machine *m, Qpu *q, uint32_t pc)
{
    if (m->nslots) {
        Py_ssize_t i = slot_of(m, pc);
        if (m->slots[i].record >= 0)
            return &m->records[m->slots[i].record];
    }
    Record *rec = new_record(m);
    if (!rec || fetch(m, q, pc, rec) < 0)
        return NULL;
    int index = (int)m->nrecords++;
    if ((m->nused + 1) * 2 > m->nslots && grow(m) < 0)
        return NULL;
    Py_ssize_t i = slot_of(m, pc);
    m->slots[i].pc = pc;
    m->slots[i].record = index;
    m->nused++;
    return &m->records[index];
}
