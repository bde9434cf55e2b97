/* One QPU: registers, flags, uniforms, r4, and running one lowered instruction (mirror of
 * qpu.py and of the plans of plan.py: same order of reads, ALUs, writes, flags, signal). */
#include <string.h>

#include "core.h"

#define R(field) (rec->f[REC_##field])
#define TRY(x) do { if ((x) < 0) return -1; } while (0)

void qpu_init(Machine *m, Qpu *q, int index, uint32_t uniforms, uint32_t code)
{
    (void)m;
    memset(q, 0, sizeof(*q));
    q->index = index;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < REGFILE_SIZE; i++)
            q->rf_written[s][i] = NEVER_WRITTEN;
    q->pc = code;
    q->unif_addr = uniforms;
    q->unif_written = NEVER_WRITTEN;
    q->unif_line = -1;
    q->fetch_start = NO_LINE;
    q->sfu_written = NEVER_WRITTEN;
    q->r4_ready_count = NEVER_WRITTEN;
    q->block_cause = -1;
}

static void lanes(uint32_t value, uint32_t *out)
{
    for (int i = 0; i < LANES; i++)
        out[i] = value;
}

/* -- regfile, uniforms, r4 ------------------------------------------------------------------ */
static int regfile_read(Machine *m, Qpu *q, int side, int i, uint32_t *out)
{
    if (q->rf_written[side][i] == q->count - 1)
        TRY(core_report(m, q, RULE_REGFILE_RAW, side, i));
    memcpy(out, q->rf[side][i], sizeof(vec));
    return 0;
}

static int read_uniform(Machine *m, Qpu *q, uint32_t *out)
{
    if (q->count < q->unif_written + UNIF_ADDR_LATENCY)
        TRY(core_report(m, q, RULE_UNIFORM_EARLY, q->count - q->unif_written, 0));
    uint32_t address = q->unif_addr, bus = address & BUS_ADDRESS_MASK, word;
    uint8_t *p = (bus & 3) ? NULL : memory_at(m, address, 4);
    if (p) {
        memcpy(&word, p, 4);
    } else {    /* the fault, or a block that is not word aligned: as qpu.uniform_word says */
        PyObject *w = PyObject_CallMethod(m->glue, "uniform_word", "kiI", (unsigned long)address,
                                          q->index, (unsigned int)q->pc);
        if (!w)
            return -1;
        word = (uint32_t)PyLong_AsUnsignedLongMask(w);
        Py_DECREF(w);
        if (PyErr_Occurred())
            return -1;
    }
    int64_t line = bus / m->uniform_line_bytes;
    if (line != q->unif_line) {
        q->unif_line = line;
        TRY(unit_uniform_line(m, q, address));
    }
    q->unif_addr = address + 4;
    lanes(word, out);
    return 0;
}

static void set_uniforms_address(Qpu *q, const uint32_t *value, int relative)
{
    uint32_t v = value[0];
    if (relative)
        v = q->unif_addr + 4u * v;      /* modulo 2^32: the signed offset of qpu.py */
    q->unif_addr = v;
    q->unif_written = q->count;
    q->unif_line = -1;
}

static int read_r4(Machine *m, Qpu *q, uint32_t *out)
{
    if (q->count < q->r4_ready_count) {
        TRY(core_report(m, q, RULE_R4_EARLY, q->count - q->sfu_written, 0));
        qpu_wait(q, q->r4_ready_clock, STALL_SFU);
    }
    memcpy(out, q->acc[4], sizeof(vec));
    return 0;
}

/* what: SFU_* for an SFU write, 4 + unit for ldtmu */
static int r4_writer(Machine *m, Qpu *q, int what)
{
    if (q->sfu_written < q->count && q->count < q->r4_ready_count)
        return core_report(m, q, RULE_R4_OVERWRITTEN, q->count - q->sfu_written, what);
    return 0;
}

static void schedule_jump(Qpu *q, int after, int64_t target)
{
    int64_t at = q->count + 1 + after;
    int i = q->npending;
    if (i == MAX_PENDING)       /* more jumps in flight than any program can have */
        return;
    while (i > 0 && q->pending[i - 1].count > at) {
        q->pending[i] = q->pending[i - 1];
        i--;
    }
    q->pending[i].count = at;
    q->pending[i].target = target;
    q->npending++;
}

/* -- reads and operands -------------------------------------------------------------------- */
static int port_read(Machine *m, Qpu *q, int side, int kind, int addr, uint32_t *out)
{
    switch (kind) {
    case READ_REGFILE: TRY(regfile_read(m, q, side, addr, out)); break;
    case READ_UNIFORM: TRY(read_uniform(m, q, out)); break;
    case READ_ELEMENT_NUMBER: for (int i = 0; i < LANES; i++) out[i] = i; break;
    case READ_QPU_NUMBER: lanes(q->index, out); break;
    case READ_NOP: memcpy(out, q->port_last[side], sizeof(vec)); break;
    case READ_VPM: TRY(vpm_read(m, q, out)); break;
    case READ_VR_BUSY: TRY(dma_busy(m, q, DMA_LOAD, out)); break;
    case READ_VW_BUSY: TRY(dma_busy(m, q, DMA_STORE, out)); break;
    case READ_VR_WAIT: TRY(dma_wait(m, q, DMA_LOAD)); lanes(0, out); break;
    case READ_VW_WAIT: TRY(dma_wait(m, q, DMA_STORE)); lanes(0, out); break;
    default: lanes(0, out); break;     /* mutex_acquire: acquired before the reads */
    }
    memcpy(q->port_last[side], out, sizeof(vec));
    return 0;
}

static int operand(Machine *m, Qpu *q, const Record *rec, int which, const uint32_t *pa,
                   const uint32_t *pb, uint32_t *out)
{
    /* which: REC_add_x_src, REC_add_y_src, ... (src, unpack, float follow) */
    int src = (int)rec->f[which], code = (int)rec->f[which + 1];
    int as_float = (int)rec->f[which + 2];
    if (src == MUX_R4) {
        TRY(read_r4(m, q, out));
    } else if (src < MUX_A) {
        memcpy(out, q->acc[src], sizeof(vec));
        return 0;
    } else if (src == MUX_A) {
        memcpy(out, pa, sizeof(vec));
    } else if (src == MUX_B) {
        memcpy(out, pb, sizeof(vec));
        return 0;
    } else {
        lanes((uint32_t)R(imm), out);
        return 0;
    }
    if (code)
        unpack_vec(code, as_float, out, out);
    return 0;
}

static void rotate(Qpu *q, int amount, int full, uint32_t *v)
{
    vec x;
    memcpy(x, v, sizeof(vec));
    if (amount == ROTATE_R5)
        amount = (int)(q->acc[5][0] & (LANES - 1));
    for (int i = 0; i < LANES; i++)
        v[i] = full ? x[(i - amount) & (LANES - 1)] : x[(i & ~3) | ((i - amount) & 3)];
}

/* -- writes and flags ---------------------------------------------------------------------- */
static int holds(const Qpu *q, int cond, int lane)
{
    switch (cond) {
    case COND_ZS: return q->z[lane];
    case COND_ZC: return !q->z[lane];
    case COND_NS: return q->n[lane];
    case COND_NC: return !q->n[lane];
    case COND_CS: return q->c[lane];
    case COND_CC: return !q->c[lane];
    default: return 1;
    }
}

static void register_write(Qpu *q, uint32_t *reg, int cond, int packer, int code,
                           const uint32_t *value)
{
    vec v;
    if (packer != PACKER_NONE)
        pack_vec(packer, code, value, reg, v);
    else
        memcpy(v, value, sizeof(vec));
    if (cond == COND_ALWAYS) {
        memcpy(reg, v, sizeof(vec));
    } else {
        for (int i = 0; i < LANES; i++)
            if (holds(q, cond, i))
                reg[i] = v[i];
    }
}

static int io_write(Machine *m, Qpu *q, int dest, int index, const uint32_t *v)
{
    switch (dest) {
    case DEST_TMU_NOSWAP: return tmu_set_noswap(m, q, v);
    case DEST_HOST_INT: if (v[0]) q->host_interrupts++; return 0;
    case DEST_UNIF_ADDR: set_uniforms_address(q, v, 0); return 0;
    case DEST_UNIF_ADDR_REL: set_uniforms_address(q, v, 1); return 0;
    case DEST_VPM: return vpm_write(m, q, v);
    case DEST_VR_SETUP: return vpm_setup(m, q, 1, v[0]);
    case DEST_VW_SETUP: return vpm_setup(m, q, 0, v[0]);
    case DEST_VR_ADDR: return dma_load(m, q, v[0]);
    case DEST_VW_ADDR: return dma_store(m, q, v[0]);
    case DEST_MUTEX_RELEASE: return sync_mutex_release(m, q);
    case DEST_SFU:
        TRY(r4_writer(m, q, index));
        sfu_compute(index, v, q->acc[4]);
        q->sfu_written = q->count;
        q->r4_ready_count = q->count + SFU_RESULT_LATENCY;
        q->r4_ready_clock = q->clock + m->sfu_latency;
        return 0;
    default: return tmu_write(m, q, index, v);
    }
}

static const vec ZERO_VEC = {0};

static int write_dest(Machine *m, Qpu *q, int dest, int index, int cond, int packer, int code,
                 const uint32_t *value)
{
    vec spread;
    switch (dest) {
    case DEST_NONE: return 0;
    case DEST_RF_A: case DEST_RF_B: {
        int side = dest == DEST_RF_B;
        register_write(q, q->rf[side][index], cond, packer, code, value);
        q->rf_written[side][index] = q->count;
        return 0;
    }
    case DEST_ACC: register_write(q, q->acc[index], cond, packer, code, value); return 0;
    case DEST_R5QUAD: case DEST_R5REP:
        for (int i = 0; i < LANES; i++)
            spread[i] = value[dest == DEST_R5QUAD ? i & ~3 : 0];
        register_write(q, q->acc[5], cond, packer, code, spread);
        return 0;
    default:
        if (packer != PACKER_NONE) {
            pack_vec(packer, code, value, ZERO_VEC, spread);
            value = spread;
        }
        return io_write(m, q, dest, index, value);
    }
}

static void set_flags(Qpu *q, int cond, const uint32_t *result, const uint8_t *carry)
{
    for (int i = 0; i < LANES; i++) {
        if (cond != COND_ALWAYS && !holds(q, cond, i))
            continue;
        q->z[i] = result[i] == 0;
        q->n[i] = result[i] >= 0x80000000u;
        q->c[i] = carry ? carry[i] : 0;
    }
}

/* -- instructions -------------------------------------------------------------------------- */
static int run_alu(Machine *m, Qpu *q, const Record *rec)
{
    vec pa, pb, add_x, add_y, add_r, mul_x, mul_y, mul_r;
    if (R(acquire)) {
        int acquired = sync_mutex_acquire(m, q);
        if (acquired <= 0)
            return acquired;
    }
    if (R(read_a) != READ_NONE)
        TRY(port_read(m, q, 0, (int)R(read_a), (int)R(raddr_a), pa));
    if (R(read_b) != READ_NONE)
        TRY(port_read(m, q, 1, (int)R(read_b), (int)R(raddr_b), pb));
    int add_op = (int)R(add_op), mul_op = (int)R(mul_op);
    if (add_op >= 0) {
        TRY(operand(m, q, rec, REC_add_x_src, pa, pb, add_x));
        TRY(operand(m, q, rec, REC_add_y_src, pa, pb, add_y));
        alu_add(add_op, (int)R(add_sat), add_x, R(add_arity) == 1 ? add_x : add_y, add_r);
    }
    if (mul_op >= 0) {
        TRY(operand(m, q, rec, REC_mul_x_src, pa, pb, mul_x));
        TRY(operand(m, q, rec, REC_mul_y_src, pa, pb, mul_y));
        if (R(rotation) >= 0) {
            rotate(q, (int)R(rotation), (int)R(rot_x_full), mul_x);
            rotate(q, (int)R(rotation), (int)R(rot_y_full), mul_y);
        }
        alu_mul(mul_op, (int)R(mul_sat), mul_x, mul_y, mul_r);
        memcpy(q->last_mul, mul_r, sizeof(vec));
    } else if (R(mul_uses_last)) {
        memcpy(mul_r, q->last_mul, sizeof(vec));
    }
    TRY(write_dest(m, q, (int)R(add_dest), (int)R(add_index), (int)R(add_cond), (int)R(add_packer),
              (int)R(add_pack), add_r));
    TRY(write_dest(m, q, (int)R(mul_dest), (int)R(mul_index), (int)R(mul_cond), (int)R(mul_packer),
              (int)R(mul_pack), mul_r));
    if (R(flags_cond) >= 0) {
        uint8_t carry[LANES];
        int from_add = (int)R(flags_from_add);
        if (R(carry))
            alu_carry((int)R(carry), from_add ? add_x : mul_x,
                      from_add ? (R(add_arity) == 1 ? add_x : add_y) : mul_y,
                      from_add ? add_r : mul_r, carry);
        set_flags(q, (int)R(flags_cond), from_add ? add_r : mul_r, R(carry) ? carry : NULL);
    }
    switch (R(signal)) {
    case SIGNAL_LDTMU0: case SIGNAL_LDTMU1: {
        int unit = R(signal) == SIGNAL_LDTMU1;
        TRY(r4_writer(m, q, 4 + unit));
        TRY(tmu_load(m, q, unit));
        break;
    }
    case SIGNAL_THREND: schedule_jump(q, THREAD_END_DELAY_SLOTS, -1); break;
    default: break;
    }
    return 1;
}

static int run_load_imm(Machine *m, Qpu *q, const Record *rec)
{
    vec value;
    if (R(semaphore) >= 0 && !sync_semaphore(m, q, (int)R(semaphore), (int)R(sem_acquire)))
        return 0;
    for (int i = 0; i < LANES; i++)
        value[i] = (uint32_t)rec->f[REC_value0 + i];
    TRY(write_dest(m, q, (int)R(add_dest), (int)R(add_index), (int)R(add_cond), (int)R(add_packer),
              (int)R(add_pack), value));
    TRY(write_dest(m, q, (int)R(mul_dest), (int)R(mul_index), (int)R(mul_cond), (int)R(mul_packer),
              (int)R(mul_pack), value));
    if (R(flags_cond) >= 0)
        set_flags(q, (int)R(flags_cond), value, NULL);
    return 1;
}

static int any_of(const uint8_t *f) { for (int i = 0; i < LANES; i++) if (f[i]) return 1; return 0; }
static int all_of(const uint8_t *f) { for (int i = 0; i < LANES; i++) if (!f[i]) return 0; return 1; }

static int branch_taken(const Qpu *q, int cond)
{
    if (cond == BRANCH_COND_ALWAYS)
        return 1;
    const uint8_t *flag = cond < BRANCH_COND_ALL_NS ? q->z : cond < BRANCH_COND_ALL_CS ? q->n : q->c;
    switch ((cond - BRANCH_COND_ALL_ZS) % 4) {
    case 0: return all_of(flag);        /* all set */
    case 1: return !any_of(flag);       /* all clear */
    case 2: return any_of(flag);        /* any set */
    default: return !all_of(flag);      /* any clear */
    }
}

static int run_branch(Machine *m, Qpu *q, const Record *rec)
{
    if (!branch_taken(q, (int)R(cond_br)))
        return 1;
    int64_t target = R(base);
    if (R(branch_reg) >= 0) {
        vec reg;
        TRY(regfile_read(m, q, 0, (int)R(branch_reg), reg));
        target += reg[BRANCH_REGISTER_ELEMENT];
    }
    schedule_jump(q, BRANCH_DELAY_SLOTS, target & 0xFFFFFFFF);
    vec link;
    lanes((uint32_t)R(link), link);
    TRY(write_dest(m, q, (int)R(add_dest), (int)R(add_index), COND_ALWAYS, PACKER_NONE, 0, link));
    TRY(write_dest(m, q, (int)R(mul_dest), (int)R(mul_index), COND_ALWAYS, PACKER_NONE, 0, link));
    if (R(branch_flags))
        set_flags(q, COND_ALWAYS, link, NULL);
    return 1;
}

int qpu_step(Machine *m, Qpu *q)
{
    uint32_t pc = q->pc;
    /* a new line (Qpu.step's icache.line_number != the last): one compare, no division; a pc
     * before fetch_start wraps to a large distance */
    int64_t line = m->icache_state.line, at = pc & BUS_ADDRESS_MASK;
    if ((uint64_t)(at - q->fetch_start) >= (uint64_t)line) {
        q->fetch_start = at - at % line;
        TRY(icache_fetch(m, q, pc));
    }
    const Record *rec = plan_at(m, q, pc);
    if (!rec)
        return -1;
    int done;
    switch (R(kind)) {
    case KIND_ALU: done = run_alu(m, q, rec); break;
    case KIND_LOAD_IMM: done = run_load_imm(m, q, rec); break;
    default: done = run_branch(m, q, rec); break;
    }
    if (done <= 0)
        return done;
    int64_t count = ++q->count;
    q->clock += m->issue_clocks;
    q->pc = pc + INSTRUCTION_BYTES;
    while (q->npending && q->pending[0].count == count) {
        int64_t target = q->pending[0].target;
        memmove(q->pending, q->pending + 1, (size_t)(q->npending - 1) * sizeof(Pending));
        q->npending--;
        if (target < 0)
            q->ended = 1;
        else
            q->pc = (uint32_t)target;
    }
    return 1;
}
