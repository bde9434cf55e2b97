"""Instruction words packed from the fact sheet's field positions, not from asm.isa: the
independent reference of the encoding and disassembler tests. The bit positions are copied from
the table in facts section 1."""

# "ALU / ALU+small imm" column: field -> lsb
ALU_LSB = dict(sig=60, unpack=57, pm=56, pack=52, cond_add=49, cond_mul=46, sf=45, ws=44,
               waddr_add=38, waddr_mul=32, op_mul=29, op_add=24, raddr_a=18, raddr_b=12,
               add_a=9, add_b=6, mul_a=3, mul_b=0)
# "Load immediate / semaphore" column
LDI_LSB = dict(sig=60, mode=57, pm=56, pack=52, cond_add=49, cond_mul=46, sf=45, ws=44,
               waddr_add=38, waddr_mul=32, imm=0)
# "Branch" column (bits 59:56 unused, raddr_a is bits 49:45)
BRANCH_LSB = dict(sig=60, unused=56, cond_br=52, rel=51, reg=50, raddr_a=45, ws=44, waddr_add=38,
                  waddr_mul=32, imm=0)

NOP = 39            # register address 39 = nop, read or write
# Numbers from the fact sheet's lists
ALWAYS, ZS = 1, 2   # write conditions
MUX_A, MUX_B = 6, 7
OR, ADD, FADD, ITOF, V8ADDS_ADD = 21, 12, 1, 8, 30      # ADD ALU ops
FMUL, V8MIN, V8ADDS_MUL = 1, 4, 6                       # MUL ALU ops


def pack_fields(lsb, defaults, fields):
    values = {**defaults, **fields}
    return sum(value << lsb[name] for name, value in values.items())


def alu(**fields):
    """Canonical ALU word: sig 1 (none), nop writes and reads, everything else 0."""
    return pack_fields(ALU_LSB, dict(sig=1, waddr_add=NOP, waddr_mul=NOP, raddr_a=NOP, raddr_b=NOP),
                       fields)


def ldi(**fields):
    return pack_fields(LDI_LSB, dict(sig=14, waddr_add=NOP, waddr_mul=NOP), fields)


def branch(**fields):
    return pack_fields(BRANCH_LSB, dict(sig=15, waddr_add=NOP, waddr_mul=NOP), fields)
