/* The C core of the emulator: shared types. Mirrors the Python modules (qpu.py, alu.py, pack.py,
 * sfu.py, machine.py); the Python core is the specification. */
#ifndef VC4NN_CORE_H
#define VC4NN_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "isa_gen.h"

#define LANES SIMD_WIDTH
typedef uint32_t vec[LANES];
typedef uint8_t flagvec[LANES];

#define NEVER_WRITTEN (-(INT64_C(1) << 30))
/* Qpu.fetch_start before the first line: more than a line below every 32-bit pc */
#define NO_LINE (-(INT64_C(1) << 32))

/* One lowered instruction (lowering.py RECORD_FIELDS), indexed by REC_* */
typedef struct {
    int64_t f[RECORD_WORDS];
} Record;

typedef struct {
    int64_t count;
    int64_t target;     /* -1: end the program */
} Pending;

#define MAX_PENDING 16

typedef struct Machine Machine;

/* cache.c */
typedef struct {
    int sets, ways;
    long long line;             /* bytes */
    int *used;                  /* lines in each set */
    int64_t *lines;             /* sets x ways line numbers, least recently used first */
    int64_t *values;            /* the pair of values stored with each line */
} Lru;

/* -1 with a ValueError naming line_name (the timing parameter) when line is not positive */
int lru_init(Lru *c, long long size, long long line, long long ways, const char *line_name);
void lru_free(Lru *c);
int lru_get(Lru *c, int64_t line, int64_t *first, int64_t *second);
int lru_peek(const Lru *c, int64_t line);
void lru_put(Lru *c, int64_t line, int64_t first, int64_t second);

/* bus.c: vpm.MemoryBus as the type _ccore.MemoryBus (the C core's bus) */
typedef struct {
    PyObject_HEAD
    int64_t *starts, *ends;     /* booked stretches [start, end), sorted, disjoint */
    Py_ssize_t nbooked, cap;
    long long write_epoch, busy_clocks, l2_hits, l2_misses, vc_l2_hits;
    PyObject *written;          /* dict: bus word address -> epoch of the store that wrote it */
    PyObject *timing;
    Lru l2, vc_l2;
    long long l2_fill, vc_l2_fill, l2_hit_latency, vc_l2_hit_latency;
    long long uniform_line_bytes, uniform_miss_latency;
} Bus;

extern PyTypeObject BusType;
int bus_read_line(Bus *b, int64_t now, uint32_t address, long long nbytes,
                  long long miss_latency, int64_t *ready, int64_t *epoch);
int64_t bus_uniform_line(Bus *b, int64_t now, uint32_t address);
int64_t bus_reserve(Bus *b, int64_t now, int64_t clocks);
int bus_record_write(Bus *b, uint64_t address, long long nbytes);

/* tmu.c */

typedef struct {
    vec values;
    int64_t ready;
} TmuRequest;

typedef struct {
    TmuRequest *items;
    int head, count, cap;
} TmuFifo;

typedef struct {
    Lru caches[NUM_SLICES][2];
    int64_t free_at[NUM_SLICES][2];
    int noswap[NUM_QPUS];
    TmuFifo fifos[NUM_QPUS][2];
    long long fifo_depth, request_clocks, hit_latency, miss_latency;
    int in_c;                   /* 0: every TMU operation goes to the Python Tmu */
} Tmu;

/* icache.c: the slices' instruction caches (icache.InstructionCaches) */
typedef struct {
    Lru caches[NUM_SLICES];
    long long line, miss_latency, prefetch;
    long long hits, misses;
} Icache;

/* sync.c: what a blocked QPU waits on (Sync._blocked; BLOCKED_* codes) */
typedef struct {
    int kind, a, b, c;          /* semaphore: number, acquire, count; mutex: holder */
} Blocked;

typedef struct {
    int counts[NUM_SEMAPHORES];
    int64_t changed_at[NUM_SEMAPHORES];
    int holder;                 /* -1: free */
    int64_t mutex_free_at;
    Blocked blocked[NUM_QPUS];
} SyncState;

typedef struct {
    int index;
    vec acc[6];
    vec rf[2][REGFILE_SIZE];
    int64_t rf_written[2][REGFILE_SIZE];
    vec port_last[2];
    flagvec z, n, c;
    vec last_mul;
    uint32_t pc, unif_addr;
    int64_t unif_written;
    int64_t unif_line;          /* -1: none */
    int64_t fetch_start;        /* the code line it runs from (instruction cache), or NO_LINE */
    int64_t sfu_written, r4_ready_count, r4_ready_clock;
    int64_t clock, count;
    int64_t stalls[NUM_STALL_CAUSES];
    Pending pending[MAX_PENDING];
    int npending;
    int ended;
    int block_cause;            /* -1 none, STALL_SEMAPHORE or STALL_MUTEX */
    int64_t host_interrupts;
} Qpu;

/* vpm.c and dma.c: the VPM (mirror of vpm.py), its state held here during a run */
#define VPM_WORDS (VPM_DMA_ROWS * SIMD_WIDTH)
#define MAX_DMA_BYTES ((1 << VDW_SETUP_UNITS_BITS) * (1 << VDW_SETUP_DEPTH_BITS) * WORD_BYTES)
#define ROW_BYTES (LANES * WORD_BYTES)
/* a bit field of a setup word, by its isa_gen.h name: FIELD(word, VDW_SETUP, UNITS) */
#define FIELD(word, table, name) \
    (((word) >> table##_##name##_LSB) & ((1u << table##_##name##_BITS) - 1))
/* vpm.field_count: a count field whose maximum is stored as 0 */
#define COUNT(word, table, name) \
    (FIELD(word, table, name) ? (int)FIELD(word, table, name) : 1 << table##_##name##_BITS)

typedef struct {
    int horizontal, laned, width, stride, addr;
    int64_t remaining;          /* vectors left to read (read setups) */
    int64_t ready;              /* clock at which its first vector can be read */
} GenericSetup;

typedef struct {
    GenericSetup *items;
    int head, count, cap;
} SetupQueue;

enum { DMA_LOAD, DMA_STORE };

typedef struct {
    int active, settled;        /* active: issued this run; settled: its issuer observed the end */
    int64_t complete;
    uint8_t words[VPM_WORDS];   /* the VPM words it touches, as a mask */
    uint16_t word_list[VPM_WORDS];      /* ... and as a list */
    int nwords;
} Dma;

typedef struct {
    uint8_t *bytes;             /* the Python Vpm's storage (VPM_DMA_ROWS rows of 64 bytes) */
    Py_buffer view;
    SetupQueue reads[NUM_QPUS];
    GenericSetup last_read[NUM_QPUS], write[NUM_QPUS];
    int has_last_read[NUM_QPUS], has_write[NUM_QPUS];
    uint32_t vdr[NUM_QPUS], vdw[NUM_QPUS];
    int has_vdr[NUM_QPUS], has_vdw[NUM_QPUS];
    int64_t vdr_pitch[NUM_QPUS], vdw_stride[NUM_QPUS];
    int vdw_blockmode[NUM_QPUS];
    Dma dmas[NUM_QPUS][2];      /* each QPU's latest load and store */
    int unsettled[2 * NUM_QPUS], nunsettled;    /* 2 * qpu + kind, oldest first */
    uint8_t cover[2][VPM_WORDS];    /* per kind, how many unsettled DMAs touch each word */
    long long read_queue, read_latency, load_latency, store_latency;
    struct { int64_t key, clocks; } clock_cache[256];   /* timing.dma_*_clocks answers */
    struct {                    /* of one DMA: the VPM byte of each memory byte, row after row */
        int index[MAX_DMA_BYTES];
        uint8_t data[MAX_DMA_BYTES];
        uint8_t words[VPM_WORDS];           /* the VPM words it touches, as a mask */
        int word_list[VPM_WORDS];           /* ... and as a list */
    } scratch;
} Vpm;

typedef struct {
    uint32_t start, size;
    uint8_t *data;
} Block;

typedef struct {
    uint32_t pc;
    int32_t record;             /* index into the record array, -1: empty slot */
} PlanSlot;

struct Machine {
    Qpu qpus[NUM_QPUS];
    int num_qpus;
    int sync_event;
    int64_t issue_clocks, sfu_latency, uniform_line_bytes, semaphore_clocks, mutex_clocks;
    SyncState sync_state;
    Tmu tmu_state;
    Icache icache_state;
    /* memory: the allocations, sorted by start */
    Block *blocks;
    Py_ssize_t nblocks;
    /* plans of this run: open-addressing map pc -> record */
    PlanSlot *slots;
    Py_ssize_t nslots, nused;
    Record *records;
    Py_ssize_t nrecords, records_cap;
    struct RecordCache *record_cache;   /* the machine's, across launches (plans.c) */
    /* Python side: the glue object (fetch, units, checks, rng) */
    PyObject *glue;
    PyObject *tmu, *vpm, *sync, *bus, *icache, *checks;
    int rule_off[4];            /* the QPU core's own rules in mode "off" */
    Vpm vpm_state;
};

/* alu.c */
void alu_add(int op, int saturating, const uint32_t *a, const uint32_t *b, uint32_t *out);
void alu_mul(int op, int saturating, const uint32_t *a, const uint32_t *b, uint32_t *out);
void alu_carry(int carry, const uint32_t *a, const uint32_t *b, const uint32_t *r, uint8_t *out);
uint32_t float_in_bits(uint32_t x);
uint32_t float_out_bits(uint32_t x);

/* pack.c */
void unpack_vec(int code, int as_float, const uint32_t *in, uint32_t *out);
void pack_vec(int packer, int code, const uint32_t *value, const uint32_t *old, uint32_t *out);

/* sfu.c */
void sfu_compute(int function, const uint32_t *in, uint32_t *out);

/* memory.c */
uint8_t *memory_at(Machine *m, uint32_t address, uint32_t nbytes);
int memory_load(Machine *m, PyObject *allocations);
void memory_release(Machine *m);

/* units.c: the Python units (TMU, VPM, sync, bus) and the checks */
PyObject *vec_to_array(const uint32_t *v);
int array_to_vec(PyObject *obj, uint32_t *out);
int qpu_wait_obj(Qpu *q, PyObject *t, int cause);
void qpu_wait(Qpu *q, int64_t t, int cause);
int core_report(Machine *m, Qpu *q, int rule, int64_t a, int64_t b);
int unit_tmu_write(Machine *m, Qpu *q, int unit_coord, const uint32_t *v);
int unit_tmu_load(Machine *m, Qpu *q, int unit);
int unit_uniform_line(Machine *m, Qpu *q, uint32_t address);
int unit_read_line(Machine *m, int64_t now, uint32_t address, long long nbytes,
                   long long miss_latency, int64_t *arrives, int64_t *epoch);
long long timing_int(PyObject *timing, const char *name);

/* vpm.c */
int vpm_init(Machine *m);
void vpm_release(Machine *m);
int vpm_export(Machine *m);
int vpm_read(Machine *m, Qpu *q, uint32_t *out);
int vpm_write(Machine *m, Qpu *q, const uint32_t *values);
int vpm_setup(Machine *m, Qpu *q, int is_read, uint32_t word);
int vpm_report(Machine *m, int qpu, const char *rule, const char *key, const char *format, ...);
int vpm_check_race(Machine *m, int qpu, const int *words, int nwords, int writes_vpm,
                   const char *what);
int vpm_unused_bits(Machine *m, int qpu, uint32_t word, uint32_t unused_mask, const char *what);

/* dma.c */
int dma_vdr_setup(Machine *m, Qpu *q, uint32_t word);
int dma_vdw_setup(Machine *m, Qpu *q, uint32_t word);
int dma_load(Machine *m, Qpu *q, uint32_t address);
int dma_store(Machine *m, Qpu *q, uint32_t address);
int dma_wait(Machine *m, Qpu *q, int kind);
int dma_busy(Machine *m, Qpu *q, int kind, uint32_t *out);

/* tmu.c */
int tmu_init(Machine *m);
void tmu_release(Machine *m);
int tmu_set_noswap(Machine *m, Qpu *q, const uint32_t *v);
int tmu_write(Machine *m, Qpu *q, int unit_coord, const uint32_t *v);
int tmu_load(Machine *m, Qpu *q, int unit);
int tmu_export(Machine *m);

/* icache.c */
int icache_init(Machine *m);
void icache_release(Machine *m);
int icache_fetch(Machine *m, Qpu *q, uint32_t pc);
int icache_export(Machine *m);

/* sync.c */
int sync_semaphore(Machine *m, Qpu *q, int number, int acquire);
int sync_mutex_acquire(Machine *m, Qpu *q);
int sync_mutex_release(Machine *m, Qpu *q);
PyObject *sync_export(const Machine *m);

/* the QPU core's rules, for core_report */
enum { RULE_REGFILE_RAW, RULE_R4_EARLY, RULE_R4_OVERWRITTEN, RULE_UNIFORM_EARLY };

/* qpu.c */
void qpu_init(Machine *m, Qpu *q, int index, uint32_t uniforms, uint32_t code);
int qpu_step(Machine *m, Qpu *q);      /* 1 done, 0 blocked, -1 error (Python exception set) */

/* plans.c */
const Record *plan_at(Machine *m, Qpu *q, uint32_t pc);
PyObject *record_cache_new(PyObject *self, PyObject *unused);
struct RecordCache *record_cache_of(PyObject *capsule);
void plans_clear(Machine *m);

/* scheduler.c */
PyObject *schedule(Machine *m, double deadline, double budget, PyObject *progress);

#endif
