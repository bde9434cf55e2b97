/* Semaphores and the mutex (mirror of sync.py). The state lives here during a run; the glue
 * writes it back into the Python Sync at the end (Sync.finish, the deadlock message), and the
 * two reports go through the glue with sync.py's messages. */
#include "core.h"

static int64_t later(int64_t a, int64_t b) { return a > b ? a : b; }

static int report(Machine *m, int rule, int qpu)
{
    PyObject *r = PyObject_CallMethod(m->glue, "sync_report", "iii", rule, qpu,
                                      m->sync_state.holder);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Sync.try_semaphore: 1 done (wait booked), 0 blocked */
int sync_semaphore(Machine *m, Qpu *q, int number, int acquire)
{
    SyncState *s = &m->sync_state;
    int count = s->counts[number];
    if (acquire ? count == 0 : count == SEMAPHORE_MAX) {
        s->blocked[q->index] = (Blocked){BLOCKED_SEMAPHORE, number, acquire, count};
        q->block_cause = STALL_SEMAPHORE;
        return 0;
    }
    s->counts[number] = acquire ? count - 1 : count + 1;
    s->blocked[q->index].kind = BLOCKED_NONE;
    int64_t t = later(q->clock, s->changed_at[number]) + m->semaphore_clocks;
    s->changed_at[number] = t;
    qpu_wait(q, t, STALL_SEMAPHORE);
    m->sync_event = 1;
    return 1;
}

/* Sync.try_mutex_acquire: 1 acquired, 0 blocked, -1 error (a report in mode "error") */
int sync_mutex_acquire(Machine *m, Qpu *q)
{
    SyncState *s = &m->sync_state;
    if (s->holder == q->index) {
        if (report(m, 0, q->index) < 0)
            return -1;
    } else if (s->holder >= 0) {
        s->blocked[q->index] = (Blocked){BLOCKED_MUTEX, s->holder, 0, 0};
        q->block_cause = STALL_MUTEX;
        return 0;
    } else {
        s->holder = q->index;
        s->blocked[q->index].kind = BLOCKED_NONE;
    }
    qpu_wait(q, later(q->clock, s->mutex_free_at) + m->mutex_clocks, STALL_MUTEX);
    return 1;
}

int sync_mutex_release(Machine *m, Qpu *q)
{
    SyncState *s = &m->sync_state;
    m->sync_event = 1;      /* set after the Python release's wait, whatever it found */
    if (s->holder != q->index)
        return report(m, 1, q->index);
    s->holder = -1;
    s->mutex_free_at = q->clock;
    return 0;
}

/* The state as the Python Sync keeps it: (counts, changed_at, holder or None, mutex_free_at,
 * {qpu: (kind, a, b, c)} of blocked QPUs) */
PyObject *sync_export(const Machine *m)
{
    const SyncState *s = &m->sync_state;
    PyObject *counts = PyList_New(NUM_SEMAPHORES), *changed = PyList_New(NUM_SEMAPHORES);
    PyObject *blocked = PyDict_New();
    if (!counts || !changed || !blocked)
        goto fail;
    for (int i = 0; i < NUM_SEMAPHORES; i++) {
        PyList_SET_ITEM(counts, i, PyLong_FromLong(s->counts[i]));
        PyList_SET_ITEM(changed, i, PyLong_FromLongLong(s->changed_at[i]));
    }
    for (int i = 0; i < NUM_QPUS; i++) {
        const Blocked *b = &s->blocked[i];
        if (b->kind == BLOCKED_NONE)
            continue;
        PyObject *key = PyLong_FromLong(i);
        PyObject *value = Py_BuildValue("(iiii)", b->kind, b->a, b->b, b->c);
        int rc = key && value ? PyDict_SetItem(blocked, key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (rc < 0)
            goto fail;
    }
    PyObject *holder = s->holder >= 0 ? PyLong_FromLong(s->holder) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(NNNLN)", counts, changed, holder, (long long)s->mutex_free_at,
                         blocked);
fail:
    Py_XDECREF(counts);
    Py_XDECREF(changed);
    Py_XDECREF(blocked);
    return NULL;
}
