/* vc4nn.emulator._ccore: the C core's entry point. The glue (vc4nn/emulator/ccore.py) builds
 * the units and the records and calls run(); see that module for the contract. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

static PyObject *final_state(const Qpu *q)
{
    return Py_BuildValue(
        "{s:y#,s:y#,s:y#,s:y#,s:y#,s:y#,s:y#,s:y#}",
        "acc", (const char *)q->acc, (Py_ssize_t)sizeof(q->acc),
        "ra", (const char *)q->rf[0], (Py_ssize_t)sizeof(q->rf[0]),
        "rb", (const char *)q->rf[1], (Py_ssize_t)sizeof(q->rf[1]),
        "z", (const char *)q->z, (Py_ssize_t)LANES,
        "n", (const char *)q->n, (Py_ssize_t)LANES,
        "c", (const char *)q->c, (Py_ssize_t)LANES,
        "last_mul", (const char *)q->last_mul, (Py_ssize_t)sizeof(vec),
        "port_last", (const char *)q->port_last, (Py_ssize_t)sizeof(q->port_last));
}

static PyObject *summary(const Qpu *q, int with_state)
{
    PyObject *stalls = PyTuple_New(NUM_STALL_CAUSES);
    if (!stalls)
        return NULL;
    for (int i = 0; i < NUM_STALL_CAUSES; i++)
        PyTuple_SET_ITEM(stalls, i, PyLong_FromLongLong(q->stalls[i]));
    PyObject *state = with_state ? final_state(q) : (Py_INCREF(Py_None), Py_None);
    if (!state) {
        Py_DECREF(stalls);
        return NULL;
    }
    return Py_BuildValue("{s:i,s:L,s:L,s:N,s:L,s:I,s:O,s:I,s:N}",
                         "index", q->index, "count", (long long)q->count,
                         "clock", (long long)q->clock, "stalls", stalls,
                         "host_interrupts", (long long)q->host_interrupts,
                         "pc", (unsigned int)q->pc, "ended", q->ended ? Py_True : Py_False,
                         "unif_addr", (unsigned int)q->unif_addr, "state", state);
}

static int get_unit(PyObject *glue, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(glue, name);
    return *out ? 0 : -1;
}

/* run(glue, control, deadline, budget, progress, timing, allocations, rules_off, with_state,
 *     record_cache)
 *   control: list of (uniforms address, code address), one per QPU
 *   timing: (issue_clocks, sfu_latency, uniform_line_bytes, semaphore_clocks, mutex_clocks)
 *   rules_off: 4 bools, the QPU core's rules in mode "off" (order of the RULE_* enum)
 * -> (instructions executed, [per-QPU summary dict]) */
static PyObject *run(PyObject *self, PyObject *args)
{
    PyObject *glue, *control, *progress, *allocations;
    double deadline, budget;
    long long issue, sfu, line, semaphore, mutex;
    int off[4], with_state;
    (void)self;
    PyObject *cache;
    if (!PyArg_ParseTuple(args, "OO!ddO(LLLLL)O!(pppp)pO", &glue, &PyList_Type, &control,
                          &deadline, &budget, &progress, &issue, &sfu, &line, &semaphore, &mutex,
                          &PyList_Type,
                          &allocations, &off[0], &off[1], &off[2], &off[3], &with_state, &cache))
        return NULL;
    struct RecordCache *records = record_cache_of(cache);
    if (!records)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(control);
    if (n < 1 || n > NUM_QPUS) {
        PyErr_Format(PyExc_ValueError, "control must list 1..%d QPUs", NUM_QPUS);
        return NULL;
    }
    Machine *m = calloc(1, sizeof(Machine));
    if (!m)
        return PyErr_NoMemory();
    PyObject *result = NULL, *executed = NULL;
    m->glue = glue;
    m->record_cache = records;
    m->num_qpus = (int)n;
    m->issue_clocks = issue;
    m->sfu_latency = sfu;
    m->uniform_line_bytes = line;
    m->semaphore_clocks = semaphore;
    m->mutex_clocks = mutex;
    m->sync_state.holder = -1;
    memcpy(m->rule_off, off, sizeof(off));
    if (get_unit(glue, "tmu", &m->tmu) || get_unit(glue, "vpm", &m->vpm)
        || get_unit(glue, "sync", &m->sync) || get_unit(glue, "bus", &m->bus)
        || get_unit(glue, "icache", &m->icache) || vpm_init(m) < 0 || tmu_init(m) < 0
        || icache_init(m) < 0 || memory_load(m, allocations) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long unif, code;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(control, i), "kk", &unif, &code))
            goto done;
        qpu_init(m, &m->qpus[i], (int)i, (uint32_t)unif, (uint32_t)code);
    }
    executed = schedule(m, deadline, budget, progress);
    /* the VPM's state (and the instruction caches' statistics) go back to Python whether the
     * run ended or failed, as the Python core leaves them in both cases */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int exported = vpm_export(m) < 0 || icache_export(m) < 0 ? -1 : 0;
    if (type) {
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    if (!executed || exported < 0)
        goto done;
    PyObject *qpus = PyList_New(n);
    if (!qpus)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = summary(&m->qpus[i], with_state);
        if (!s) {
            Py_DECREF(qpus);
            goto done;
        }
        PyList_SET_ITEM(qpus, i, s);
    }
    result = Py_BuildValue("(ON)", executed, qpus);
done:
    Py_XDECREF(executed);
    Py_XDECREF(m->tmu);
    Py_XDECREF(m->vpm);
    Py_XDECREF(m->sync);
    Py_XDECREF(m->bus);
    Py_XDECREF(m->icache);
    memory_release(m);
    icache_release(m);
    vpm_release(m);
    tmu_release(m);
    plans_clear(m);
    free(m);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "Run a launch on the C core (see vc4nn/emulator/ccore.py)."},
    {"record_cache", record_cache_new, METH_NOARGS,
     "A new cache of lowered instructions, for one machine's launches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ccore", "The C core of the vc4nn emulator.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ccore(void)
{
    if (PyType_Ready(&BusType) < 0)
        return NULL;
    Py_INCREF(&BusType);        /* the reference PyModule_AddObject takes */
    PyObject *mod = PyModule_Create(&module);
    if (mod && (PyModule_AddIntConstant(mod, "RECORD_WORDS", RECORD_WORDS) < 0
                || PyModule_AddObject(mod, "MemoryBus", (PyObject *)&BusType) < 0)) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
