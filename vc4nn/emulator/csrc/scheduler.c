/* The scheduler (mirror of Machine._schedule and _run_slice in machine.py): per-QPU clocks, a
 * heap in (clock, tie, QPU) order, run slices, blocked QPUs retried after sync events,
 * deadlock, timeout and instruction budget. The seeded scheduler's draws come from the
 * machine's random.Random through the glue, in the same order as the Python core. */
#include <math.h>

#include "core.h"

typedef struct {
    int64_t clock;
    double tie;
    int index;
} Entry;

static int before(const Entry *a, const Entry *b)
{
    if (a->clock != b->clock)
        return a->clock < b->clock;
    if (a->tie != b->tie)
        return a->tie < b->tie;
    return a->index < b->index;
}

typedef struct {
    Entry e[NUM_QPUS];
    int n;
} Heap;

static inline void heap_push(Heap *h, Entry x)
{
    int i = h->n++;
    while (i > 0 && before(&x, &h->e[(i - 1) / 2])) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i] = x;
}

/* put x at the root, in place of the smallest entry, and sift it down */
static inline void heap_replace_top(Heap *h, Entry x)
{
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->e[c + 1], &h->e[c]))
            c++;
        if (!before(&h->e[c], &x))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    h->e[i] = x;
}

static Entry heap_pop(Heap *h)
{
    Entry top = h->e[0], last = h->e[--h->n];
    if (h->n)
        heap_replace_top(h, last);
    return top;
}

static int tie_of(Machine *m, PyObject *rng, Qpu *q, double *tie)
{
    if (rng == Py_None) {
        *tie = q->index;
        return 0;
    }
    PyObject *r = PyObject_CallMethod(rng, "random", NULL);
    if (!r)
        return -1;
    *tie = PyFloat_AsDouble(r);
    Py_DECREF(r);
    (void)m;
    return PyErr_Occurred() ? -1 : 0;
}

/* Machine._run_slice: step until the QPU blocks, ends, reaches ``limit`` on its clock, uses
 * ``budget`` instructions or changes a semaphore or the mutex. -1 on error. */
static int64_t run_slice(Machine *m, Qpu *q, double limit, double budget)
{
    int64_t start = q->count;
    double count_limit = (double)start + budget;
    q->block_cause = -1;
    for (;;) {
        int rc = qpu_step(m, q);
        if (rc < 0) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb)
                PyException_SetTraceback(value, tb);
            PyObject *error = PyObject_CallMethod(m->glue, "slice_error", "OiI", value,
                                                  q->index, (unsigned int)q->pc);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            if (error) {
                PyErr_SetObject((PyObject *)Py_TYPE(error), error);
                Py_DECREF(error);
            }
            Py_DECREF(value);
            return -1;
        }
        if (rc == 0 || q->ended || (double)q->clock >= limit || (double)q->count >= count_limit
            || m->sync_event)
            break;
    }
    return q->count - start;
}

static PyObject *positions(Machine *m)
{
    PyObject *list = PyList_New(m->num_qpus);
    if (!list)
        return NULL;
    for (int i = 0; i < m->num_qpus; i++) {
        Qpu *q = &m->qpus[i];
        PyList_SET_ITEM(list, i, Py_BuildValue("(iIO)", q->index, (unsigned int)q->pc,
                                               q->ended ? Py_True : Py_False));
    }
    return list;
}

static PyObject *fail(Machine *m, const char *what, PyObject *detail)
{
    PyObject *where = positions(m);
    if (where && detail) {
        PyObject *error = PyObject_CallMethod(m->glue, what, "OO", detail, where);
        if (error) {
            PyErr_SetObject((PyObject *)Py_TYPE(error), error);
            Py_DECREF(error);
        }
    }
    Py_XDECREF(where);
    Py_XDECREF(detail);
    return NULL;
}

/* The semaphores and mutex as the Python Sync keeps them, for its end-of-run checks and the
 * deadlock message. */
static int sync_back(Machine *m)
{
    PyObject *state = sync_export(m);
    if (!state)
        return -1;
    PyObject *r = PyObject_CallMethod(m->glue, "sync_import", "(O)", state);
    Py_DECREF(state);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

PyObject *schedule(Machine *m, double deadline, double budget, PyObject *progress)
{
    PyObject *rng = PyObject_GetAttrString(m->glue, "rng");
    if (!rng)
        return NULL;
    Heap heap = {.n = 0};
    int blocked[NUM_QPUS], nblocked = 0;
    int64_t executed = 0, slices = 0;
    double clock_limit = deadline + 1;
    double next_report = progress != Py_None ? PROGRESS_INTERVAL : INFINITY;
    PyObject *result = NULL;
    for (int i = 0; i < m->num_qpus; i++) {
        Entry e = {m->qpus[i].clock, 0, i};
        if (tie_of(m, rng, &m->qpus[i], &e.tie) < 0)
            goto done;
        heap_push(&heap, e);
    }
    /* The QPU that runs stays at the heap's root during its slice; one that goes on running
     * takes its new place with a single sift (the entries' keys are all different, so the
     * order in which QPUs run is that of Machine._schedule's pop and push). */
    while (heap.n) {
        Entry top = heap.e[0];
        Qpu *q = &m->qpus[top.index];
        double limit = clock_limit;
        if (heap.n > 1) {
            const Entry *next = heap.n > 2 && before(&heap.e[2], &heap.e[1]) ? &heap.e[2]
                                                                              : &heap.e[1];
            double first_until = (double)next->clock + (top.tie > next->tie ? 0 : 1);
            if (rng != Py_None) {
                PyObject *r = PyObject_CallMethod(rng, "randrange", "i", JITTER_CLOCKS);
                if (!r)
                    goto done;
                first_until += (double)PyLong_AsLong(r);
                Py_DECREF(r);
            }
            if (first_until < limit)
                limit = first_until;
        }
        /* a slice stops at the next progress report, as in machine.py */
        int64_t ran = run_slice(m, q, limit,
                                (budget < next_report ? budget : next_report) - (double)executed);
        if (ran < 0)
            goto done;
        executed += ran;
        if ((double)executed >= next_report) {
            PyObject *r = PyObject_CallFunction(progress, "L", (long long)executed);
            if (!r)
                goto done;
            Py_DECREF(r);
            next_report += PROGRESS_INTERVAL;
        }
        if (++slices % 1024 == 0 && PyErr_CheckSignals() < 0)
            goto done;
        int goes_on = !m->sync_event && q->block_cause < 0 && !q->ended;
        if (!goes_on)
            heap_pop(&heap);
        if (m->sync_event) {
            m->sync_event = 0;
            for (int k = 0; k < nblocked; k++) {
                Qpu *b = &m->qpus[blocked[k]];
                qpu_wait(b, q->clock, b->block_cause);
                Entry e = {b->clock, 0, b->index};
                if (tie_of(m, rng, b, &e.tie) < 0)
                    goto done;
                heap_push(&heap, e);
            }
            nblocked = 0;
        }
        if (q->block_cause >= 0) {
            blocked[nblocked++] = q->index;
        } else if (!q->ended) {
            if ((double)q->clock > deadline) {
                fail(m, "timeout_error", Py_BuildValue("(sL)", "time", (long long)executed));
                goto done;
            }
            if ((double)executed >= budget) {
                fail(m, "timeout_error", Py_BuildValue("(sL)", "budget", (long long)executed));
                goto done;
            }
            top.clock = q->clock;
            if (goes_on)
                heap_replace_top(&heap, top);
            else
                heap_push(&heap, top);
        }
    }
    if (sync_back(m) < 0 || (!nblocked && tmu_export(m) < 0))
        goto done;
    if (nblocked) {
        PyObject *which = PyList_New(nblocked);
        if (!which)
            goto done;
        for (int k = 0; k < nblocked; k++)
            PyList_SET_ITEM(which, k, PyLong_FromLong(blocked[k]));
        fail(m, "deadlock_error", which);
        goto done;
    }
    result = PyLong_FromLongLong(executed);
done:
    Py_DECREF(rng);
    return result;
}
