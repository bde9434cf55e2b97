"""The V3D registers the direct launch path uses: offsets and fields, written once.

Source: Broadcom, "VideoCore IV 3D Architecture Reference Guide" (VideoCoreIV-AG100-R, 2013),
section 10 "V3D Registers": the control (L2CACTL, SLCACTL), QPU scheduler (SRQPC, SRQUA, SRQUL,
SRQCS) and debug (DBCFG, DBQITE, DBQITC) register tables. The same offsets and fields appear in
Linux's drivers/gpu/drm/vc4/vc4_regs.h and in GPU_FFT's gpu_fft_base.c (hello_fft), which use
them on hardware. Offsets are from the V3D base: the peripheral base of the board + V3D_OFFSET
(bus address 0x7EC00000).
"""

V3D_OFFSET = 0xC00000
# Every register below lies in the first page of the V3D block.
WINDOW_BYTES = 0x1000

IDENT0 = 0x000      # identification: bits 23:0 "V3D" in ASCII, bits 31:24 the technology version
L2CACTL = 0x020     # L2 cache control
SLCACTL = 0x024     # slice cache control (instruction, uniforms, TMU0, TMU1 caches)
SRQPC = 0x430       # user program request: program address; writing it queues the request
SRQUA = 0x434       # user program request: uniforms address of the next request
SRQUL = 0x438       # user program request: uniforms length (max) of the next request
SRQCS = 0x43C       # user program request control and status
DBCFG = 0xE00       # debug configuration: bit 0 QITENA
DBQITE = 0xE2C      # QPU interrupt enables, one bit per QPU (15:0)
DBQITC = 0xE30      # QPU interrupt flags, one bit per QPU (15:0); write 1 to clear

# IDENT0 of a VideoCore IV V3D: technology version 2, "V3D" (Linux vc4_v3d.c checks the same).
IDENT0_VC4 = 0x02443356

L2CACTL_L2CCLR = 1 << 2          # write 1: clear the L2 cache
# SLCACTL: write 1s to clear, one bit per slice (4 slices): ICCS 3:0, UCCS 11:8, T0CCS 19:16,
# T1CCS 27:24.
SLCACTL_CLEAR_ALL = 0x0F0F0F0F

# SRQCS fields: QPURQL 5:0 requests queued (read only); QPURQERR 7 a request was made while
# the queue was full; QPURQCM 15:8 requests made, QPURQCC 23:16 programs completed (both
# modulo 256). Writing 1 to bit 7, 8 or 16 clears the error, the made count, the completed count.
SRQCS_QUEUE_MASK = 0x3F
SRQCS_ERROR = 1 << 7
SRQCS_MADE_SHIFT = 8
SRQCS_COMPLETED_SHIFT = 16
SRQCS_COUNT_MASK = 0xFF
SRQCS_RESET = SRQCS_ERROR | 1 << SRQCS_MADE_SHIFT | 1 << SRQCS_COMPLETED_SHIFT

# SRQUL's field QPURQUL is 11:0. A launch from a control list does not say how long each
# uniform stream is (execute_qpu's interface does not either), so the largest length is set:
# it never cuts a stream short.
SRQUL_MAX = 0xFFF

DBQITC_ALL = 0xFFFF


def decode_srqcs(value):
    """(queued, error, made, completed) from an SRQCS value."""
    return (value & SRQCS_QUEUE_MASK, bool(value & SRQCS_ERROR),
            value >> SRQCS_MADE_SHIFT & SRQCS_COUNT_MASK,
            value >> SRQCS_COMPLETED_SHIFT & SRQCS_COUNT_MASK)
