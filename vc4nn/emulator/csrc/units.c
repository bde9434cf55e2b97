/* The I/O units the C core still reaches in Python: the Python Tmu (when ccore.TMU_IN_C is off)
 * and a Python MemoryBus's line reads and uniform line fills, called with the arguments the
 * Python QPU passes (qpu.py); and the QPU core's own checks (reported through the glue, which
 * formats the message as qpu.py does). The VPM, DMA, semaphores and mutex run in C (vpm.c, dma.c, sync.c). */
#include <math.h>
#include <string.h>

#include "core.h"

static PyObject *frombuffer, *uint32_name;

static int numpy_ready(void)
{
    if (frombuffer)
        return 0;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return -1;
    frombuffer = PyObject_GetAttrString(np, "frombuffer");
    Py_DECREF(np);
    uint32_name = PyUnicode_InternFromString("<u4");
    return frombuffer && uint32_name ? 0 : -1;
}

PyObject *vec_to_array(const uint32_t *v)
{
    if (numpy_ready() < 0)
        return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)v, sizeof(vec));
    if (!bytes)
        return NULL;
    PyObject *array = PyObject_CallFunctionObjArgs(frombuffer, bytes, uint32_name, NULL);
    Py_DECREF(bytes);
    return array;
}

/* A 16-element vector from a unit's answer (a uint32 array, or anything numpy takes). */
int array_to_vec(PyObject *obj, uint32_t *out)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        int ok = view.len == (Py_ssize_t)sizeof(vec) && view.itemsize == 4;
        if (ok)
            memcpy(out, view.buf, sizeof(vec));
        PyBuffer_Release(&view);
        if (ok)
            return 0;
    } else {
        PyErr_Clear();
    }
    PyObject *list = PySequence_List(obj);
    if (!list)
        return -1;
    if (PyList_GET_SIZE(list) != LANES) {
        Py_DECREF(list);
        PyErr_SetString(PyExc_ValueError, "a unit returned a vector of the wrong size");
        return -1;
    }
    for (int i = 0; i < LANES; i++) {
        unsigned long long x = PyLong_AsUnsignedLongLongMask(PyList_GET_ITEM(list, i));
        if (x == (unsigned long long)-1 && PyErr_Occurred()) {
            Py_DECREF(list);
            return -1;
        }
        out[i] = (uint32_t)x;
    }
    Py_DECREF(list);
    return 0;
}

/* qpu.Qpu.wait */
void qpu_wait(Qpu *q, int64_t t, int cause)
{
    if (t > q->clock) {
        q->stalls[cause] += t - q->clock;
        q->clock = t;
    }
}

int qpu_wait_obj(Qpu *q, PyObject *t, int cause)
{
    if (PyLong_Check(t)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(t, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "a unit returned a clock beyond 64 bits");
            return -1;
        }
        qpu_wait(q, v, cause);
        return 0;
    }
    double d = PyFloat_AsDouble(t);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    if (d > (double)q->clock)
        qpu_wait(q, (int64_t)ceil(d), cause);
    return 0;
}

int core_report(Machine *m, Qpu *q, int rule, int64_t a, int64_t b)
{
    if (m->rule_off[rule])
        return 0;
    PyObject *r = PyObject_CallMethod(m->glue, "report", "iiILL", rule, q->index,
                                      (unsigned int)q->pc, (long long)a, (long long)b);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int wait_answer(Qpu *q, PyObject *answer, int cause, uint32_t *out)
{
    if (!answer)
        return -1;
    int rc;
    if (PyTuple_Check(answer) && PyTuple_GET_SIZE(answer) == 2) {
        rc = qpu_wait_obj(q, PyTuple_GET_ITEM(answer, 1), cause);
        if (rc == 0 && out)
            rc = array_to_vec(PyTuple_GET_ITEM(answer, 0), out);
    } else {
        rc = qpu_wait_obj(q, answer, cause);
    }
    Py_DECREF(answer);
    return rc;
}

/* An integer parameter of the cycle model (a Timing attribute); -1 with an exception set when
 * it is not a non-negative int */
long long timing_int(PyObject *timing, const char *name)
{
    PyObject *v = PyObject_GetAttrString(timing, name);
    if (!v)
        return -1;
    long long x = -1;
    if (PyLong_Check(v))
        x = PyLong_AsLongLong(v);
    else
        PyErr_Format(PyExc_TypeError, "the C core needs an integer timing parameter %s", name);
    Py_DECREF(v);
    if (x < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "the C core needs a non-negative timing parameter %s",
                     name);
    return x;
}

static const char *const TMU_COORD[] = {"s", "t", "r", "b"};

int unit_tmu_write(Machine *m, Qpu *q, int unit_coord, const uint32_t *v)
{
    PyObject *values = vec_to_array(v);
    if (!values)
        return -1;
    PyObject *t = PyObject_CallMethod(m->tmu, "write", "iisOL", q->index, unit_coord / 4,
                                      TMU_COORD[unit_coord % 4], values, (long long)q->clock);
    Py_DECREF(values);
    return wait_answer(q, t, STALL_TMU, NULL);
}

int unit_tmu_load(Machine *m, Qpu *q, int unit)
{
    return wait_answer(q, PyObject_CallMethod(m->tmu, "load", "iiL", q->index, unit,
                                              (long long)q->clock), STALL_TMU, q->acc[4]);
}

/* MemoryBus.read_line for the TMUs and the instruction caches: (arrives, epoch), in C when the
 * bus is the C one */
int unit_read_line(Machine *m, int64_t now, uint32_t address, long long nbytes,
                   long long miss_latency, int64_t *arrives, int64_t *epoch)
{
    if (PyObject_TypeCheck(m->bus, &BusType))
        return bus_read_line((Bus *)m->bus, now, address, nbytes, miss_latency, arrives, epoch);
    PyObject *r = PyObject_CallMethod(m->bus, "read_line", "LkLL", (long long)now,
                                      (unsigned long)address, nbytes, miss_latency);
    if (!r)
        return -1;
    long long a = -1, e = -1;
    int ok = PyArg_ParseTuple(r, "LL", &a, &e);
    Py_DECREF(r);
    if (!ok)
        return -1;
    *arrives = a;
    *epoch = e;
    return 0;
}

int unit_uniform_line(Machine *m, Qpu *q, uint32_t address)
{
    if (PyObject_TypeCheck(m->bus, &BusType)) {
        int64_t ready = bus_uniform_line((Bus *)m->bus, q->clock, address);
        if (ready < 0)
            return -1;
        qpu_wait(q, ready, STALL_UNIFORM);
        return 0;
    }
    return wait_answer(q, PyObject_CallMethod(m->bus, "uniform_line", "Lk",
                                              (long long)q->clock, (unsigned long)address),
                       STALL_UNIFORM, NULL);
}
