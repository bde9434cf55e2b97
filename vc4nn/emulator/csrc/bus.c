/* vpm.MemoryBus in C: the memory path the DMA engines, the TMUs and the uniform fetches share,
 * with the V3D L2 and the VideoCore L2 behind it. The C core's machines make one per launch
 * (ccore.memory_bus); the Python DMA engines and Tmu call its methods as they call the Python
 * bus's, and tmu.c and the uniform fetch call bus_read_line and bus_uniform_line directly. See
 * vpm.py for the why of every rule here. */
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "structmember.h"

static long long floor_div(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* a Timing method's integer answer for one argument (line_fill_clocks, vc_l2_fill_clocks) */
static long long timing_call(PyObject *timing, const char *method, long long argument)
{
    PyObject *v = PyObject_CallMethod(timing, method, "L", argument);
    if (!v)
        return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "the memory bus needs a non-negative %s", method);
    return x;
}

/* MemoryBus.use: the cycle model's parameters (board clock, L2 geometry and latency) */
static int bus_use(Bus *b, PyObject *timing)
{
    if (timing == b->timing)
        return 0;
    long long line = timing_int(timing, "l2_cache_line_bytes");
    long long values[] = {
        timing_int(timing, "l2_cache_bytes"), timing_int(timing, "l2_cache_ways"),
        timing_int(timing, "vc_l2_bytes"), timing_int(timing, "vc_l2_line_bytes"),
        timing_int(timing, "vc_l2_ways"),
        timing_call(timing, "line_fill_clocks", line),
        timing_call(timing, "vc_l2_fill_clocks", line),
        timing_int(timing, "l2_hit_latency"),
        timing_int(timing, "vc_l2_hit_latency"),
        timing_int(timing, "uniform_line_bytes"),
        timing_int(timing, "uniform_miss_latency"),
    };
    if (PyErr_Occurred())
        return -1;
    if (values[9] <= 0) {   /* the caches' line sizes are checked by lru_init */
        PyErr_SetString(PyExc_ValueError, "the memory bus needs a positive uniform_line_bytes");
        return -1;
    }
    if (lru_init(&b->l2, values[0], line, values[1], "l2_cache_line_bytes") < 0
        || lru_init(&b->vc_l2, values[2], values[3], values[4], "vc_l2_line_bytes") < 0)
        return -1;
    b->l2_fill = values[5];
    b->vc_l2_fill = values[6];
    b->l2_hit_latency = values[7];
    b->vc_l2_hit_latency = values[8];
    b->uniform_line_bytes = values[9];
    b->uniform_miss_latency = values[10];
    Py_INCREF(timing);
    Py_XSETREF(b->timing, timing);
    return 0;
}

static Py_ssize_t bisect_right(const int64_t *a, Py_ssize_t n, int64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static void remove_booking(Bus *b, Py_ssize_t i, Py_ssize_t count)
{
    Py_ssize_t rest = b->nbooked - i - count;
    memmove(b->starts + i, b->starts + i + count, (size_t)rest * sizeof(int64_t));
    memmove(b->ends + i, b->ends + i + count, (size_t)rest * sizeof(int64_t));
    b->nbooked -= count;
}

/* MemoryBus.reserve: the first idle stretch at or after ``now`` long enough for ``clocks``;
 * its start, or -1 with an exception when out of memory */
int64_t bus_reserve(Bus *b, int64_t now, int64_t clocks)
{
    if (b->nbooked > BUS_HISTORY_BOOKINGS)
        remove_booking(b, 0, bisect_right(b->ends, b->nbooked, now - BUS_HISTORY_CLOCKS));
    Py_ssize_t i = bisect_right(b->ends, b->nbooked, now);
    int64_t begin = now;
    while (i < b->nbooked && b->starts[i] < begin + clocks) {
        if (b->ends[i] > begin)
            begin = b->ends[i];
        i++;
    }
    int64_t end = begin + clocks;
    if (b->nbooked == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 64;
        int64_t *starts = realloc(b->starts, (size_t)cap * sizeof(int64_t));
        if (starts)
            b->starts = starts;
        int64_t *ends = starts ? realloc(b->ends, (size_t)cap * sizeof(int64_t)) : NULL;
        if (!ends) {
            PyErr_NoMemory();
            return -1;
        }
        b->ends = ends;
        b->cap = cap;
    }
    b->busy_clocks += clocks;
    if (i && b->ends[i - 1] == begin) {         /* join the booking before */
        i--;
        b->ends[i] = end;
    } else {
        Py_ssize_t rest = b->nbooked - i;
        memmove(b->starts + i + 1, b->starts + i, (size_t)rest * sizeof(int64_t));
        memmove(b->ends + i + 1, b->ends + i, (size_t)rest * sizeof(int64_t));
        b->starts[i] = begin;
        b->ends[i] = end;
        b->nbooked++;
    }
    if (i + 1 < b->nbooked && b->starts[i + 1] == end) {     /* and the one after */
        b->ends[i] = b->ends[i + 1];
        remove_booking(b, i + 1, 1);
    }
    return begin;
}

/* MemoryBus._fill: a V3D L2 line fill asked at ``now``; when the line arrives (-1: error) */
static int64_t bus_fill(Bus *b, int64_t now, int64_t bus_byte, uint64_t alias,
                        long long miss_latency)
{
    int64_t begin, end;
    if (alias < 64 && (VC_L2_CACHED_ALIAS_BITS >> alias & 1) && b->vc_l2.ways) {
        int64_t vc_line = bus_byte / b->vc_l2.line, unused;
        if (lru_get(&b->vc_l2, vc_line, &unused, &unused)) {
            b->vc_l2_hits++;
            if ((begin = bus_reserve(b, now, b->vc_l2_fill)) < 0)
                return -1;
            end = begin + b->vc_l2_fill;
            return now + b->vc_l2_hit_latency > end ? now + b->vc_l2_hit_latency : end;
        }
        if (VC_L2_ALLOCATING_ALIAS_BITS >> alias & 1)
            lru_put(&b->vc_l2, vc_line, 1, 0);
    }
    if ((begin = bus_reserve(b, now, b->l2_fill)) < 0)
        return -1;
    end = begin + b->l2_fill;
    return now + miss_latency > end ? now + miss_latency : end;
}

/* MemoryBus.read_line: when the line is there and the write epoch its data dates from */
int bus_read_line(Bus *b, int64_t now, uint32_t address, long long nbytes,
                  long long miss_latency, int64_t *ready, int64_t *epoch)
{
    long long line = b->l2.line, bus_address = address & BUS_ADDRESS_MASK;
    long long first = bus_address / line, last = floor_div(bus_address + nbytes - 1, line);
    *ready = now;
    *epoch = b->write_epoch;
    for (long long number = first; number <= last; number++) {
        int64_t arrives, filled;
        if (lru_get(&b->l2, number, &arrives, &filled)) {
            b->l2_hits++;
            if (now + b->l2_hit_latency > arrives)
                arrives = now + b->l2_hit_latency;
            if (filled < *epoch)
                *epoch = filled;
        } else {
            b->l2_misses++;
            arrives = bus_fill(b, now, number * line, address >> BUS_ALIAS_SHIFT, miss_latency);
            if (arrives < 0)
                return -1;
            lru_put(&b->l2, number, arrives, b->write_epoch);
        }
        if (arrives > *ready)
            *ready = arrives;
    }
    return 0;
}

/* MemoryBus.uniform_line: when the uniform stream's new line at ``address`` is there (-1: error) */
int64_t bus_uniform_line(Bus *b, int64_t now, uint32_t address)
{
    uint32_t size = (uint32_t)b->uniform_line_bytes;
    uint32_t start = (address & BUS_ADDRESS_MASK) / size * size | (address & BUS_ALIAS_MASK);
    int64_t ready, epoch;
    if (bus_read_line(b, now, start, size, b->uniform_miss_latency, &ready, &epoch) < 0)
        return -1;
    return ready;
}

/* -- the Python face: the methods and attributes of vpm.MemoryBus ------------------------- */

static int Bus_init(Bus *b, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"timing", NULL};
    PyObject *timing;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:MemoryBus", names, &timing))
        return -1;
    if (!b->written && !(b->written = PyDict_New()))
        return -1;
    return bus_use(b, timing);
}

static void Bus_dealloc(Bus *b)
{
    lru_free(&b->l2);
    lru_free(&b->vc_l2);
    free(b->starts);
    free(b->ends);
    Py_XDECREF(b->written);
    Py_XDECREF(b->timing);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *Bus_use(Bus *b, PyObject *timing)
{
    if (bus_use(b, timing) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Bus_reserve(Bus *b, PyObject *args)
{
    long long now, clocks;
    if (!PyArg_ParseTuple(args, "LL:reserve", &now, &clocks))
        return NULL;
    int64_t begin = bus_reserve(b, now, clocks);
    return begin < 0 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(begin);
}

static PyObject *Bus_transfer(Bus *b, PyObject *args)
{
    long long now, clocks;
    if (!PyArg_ParseTuple(args, "LL:transfer", &now, &clocks))
        return NULL;
    int64_t begin = bus_reserve(b, now, clocks);
    return begin < 0 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(begin + clocks);
}

/* MemoryBus.record_write: a DMA store wrote nbytes at bus address, behind the caches */
int bus_record_write(Bus *b, uint64_t address, long long nbytes)
{
    b->write_epoch++;
    long long bus_address = (long long)(address & BUS_ADDRESS_MASK);
    long long start = bus_address / WORD_BYTES;
    long long end = floor_div(bus_address + nbytes - 1, WORD_BYTES) + 1;
    PyObject *epoch = PyLong_FromLongLong(b->write_epoch);
    if (!epoch)
        return -1;
    for (long long word = start; word < end; word++) {
        PyObject *key = PyLong_FromLongLong(word);
        int rc = key ? PyDict_SetItem(b->written, key, epoch) : -1;
        Py_XDECREF(key);
        if (rc < 0) {
            Py_DECREF(epoch);
            return -1;
        }
    }
    Py_DECREF(epoch);
    return 0;
}

static PyObject *Bus_record_write(Bus *b, PyObject *args)
{
    unsigned long long address;
    long long nbytes;
    if (!PyArg_ParseTuple(args, "KL:record_write", &address, &nbytes))
        return NULL;
    if (bus_record_write(b, address, nbytes) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Bus_read_line(Bus *b, PyObject *args)
{
    long long now, nbytes, miss_latency;
    unsigned long address;
    int64_t ready, epoch;
    if (!PyArg_ParseTuple(args, "LkLL:read_line", &now, &address, &nbytes, &miss_latency)
        || bus_read_line(b, now, (uint32_t)address, nbytes, miss_latency, &ready, &epoch) < 0)
        return NULL;
    return Py_BuildValue("(LL)", (long long)ready, (long long)epoch);
}

static PyObject *Bus_uniform_line(Bus *b, PyObject *args)
{
    long long now;
    unsigned long address;
    if (!PyArg_ParseTuple(args, "Lk:uniform_line", &now, &address))
        return NULL;
    int64_t ready = bus_uniform_line(b, now, (uint32_t)address);
    return ready < 0 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(ready);
}

static PyMethodDef Bus_methods[] = {
    {"use", (PyCFunction)Bus_use, METH_O, "Take the cycle model's parameters."},
    {"reserve", (PyCFunction)Bus_reserve, METH_VARARGS, "Occupy the bus; returns the start."},
    {"transfer", (PyCFunction)Bus_transfer, METH_VARARGS, "Occupy the bus; returns the end."},
    {"record_write", (PyCFunction)Bus_record_write, METH_VARARGS,
     "A DMA store wrote nbytes at bus address, behind the caches."},
    {"read_line", (PyCFunction)Bus_read_line, METH_VARARGS,
     "A line fill through the L2s: (ready clock, write epoch)."},
    {"uniform_line", (PyCFunction)Bus_uniform_line, METH_VARARGS,
     "When the uniform stream's new line is there."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Bus_members[] = {
    {"write_epoch", T_LONGLONG, offsetof(Bus, write_epoch), READONLY, NULL},
    {"busy_clocks", T_LONGLONG, offsetof(Bus, busy_clocks), READONLY, NULL},
    {"l2_hits", T_LONGLONG, offsetof(Bus, l2_hits), READONLY, NULL},
    {"l2_misses", T_LONGLONG, offsetof(Bus, l2_misses), READONLY, NULL},
    {"vc_l2_hits", T_LONGLONG, offsetof(Bus, vc_l2_hits), READONLY, NULL},
    {"written", T_OBJECT, offsetof(Bus, written), READONLY, NULL},
    {"timing", T_OBJECT, offsetof(Bus, timing), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject BusType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vc4nn.emulator._ccore.MemoryBus",
    .tp_doc = "vc4nn.emulator.vpm.MemoryBus in C (the C core's memory bus).",
    .tp_basicsize = sizeof(Bus),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Bus_init,
    .tp_dealloc = (destructor)Bus_dealloc,
    .tp_methods = Bus_methods,
    .tp_members = Bus_members,
};
