"""VPM and DMA setup words (fact sheet section 3), and the assembler macros that load them.

The word functions take real quantities (counts 1..16 or 1..128, strides, byte pitches, VPM row
``y`` and column ``x``) and pack them with the field tables in ``asm.isa``; a count field whose
full range does not fit stores the maximum as 0 (NUM 16, STRIDE 64, UNITS/DEPTH 128...).
Out-of-range values raise AssemblerError naming the parameter and its range.

Element sizes are 32, 16 or 8 bits; ``offset`` picks the half-word (0..1) or byte (0..3) within a
32-bit word for the narrower sizes.
"""

import functools
import numbers

from . import isa
from . import registers as regs
from .builder import flag
from .errors import AssemblerError, with_caller_location

WORD = isa.WORD_BITS            # the default element size: whole 32-bit words
MAX_EXTENDED_PITCH = (1 << isa.VDR_EXTENDED["mpitchb"][1]) - 1     # bytes, vdr_pitch


MEMO_LIMIT = 4096


def _memoized(function):
    """A setup word is a pure function of its arguments, and uniform builders ask for the same
    few words again and again (hundreds of thousands of DMA pieces for one MobileNet), so good
    calls are remembered. The key holds each argument's type: True never answers for 1; an
    unhashable argument is not remembered; a call that raises is not either."""
    memo = {}

    @functools.wraps(function)
    def remembered(*args, **kwargs):
        try:
            key = (tuple((type(a), a) for a in args),
                   tuple(sorted((k, type(v), v) for k, v in kwargs.items())))
            return memo[key]
        except KeyError:
            pass
        except TypeError:
            return function(*args, **kwargs)
        word = function(*args, **kwargs)
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        memo[key] = word
        return word
    return remembered


def _check(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise AssemblerError(f"{name}={value!r} is not an int (it must be in {low}..{high})")
    if not low <= value <= high:
        raise AssemblerError(f"{name}={value!r} is out of range {low}..{high}")
    return int(value)


def _put(table, **values):
    word = 0
    for name, value in values.items():
        word |= isa.field_put(int(value), table[name])
    return word


def _count(name, value, table, field=None):
    """A count 1..2**width for a field that stores the maximum as 0."""
    width = table[field or name][1]
    return _check(name, value, 1, 1 << width) % (1 << width)


def _elements_per_word(size):
    if size not in isa.VPM_SIZES:
        raise AssemblerError(f"size={size!r}: element size is one of {', '.join(map(str, isa.VPM_SIZES))} bits")
    return isa.WORD_BITS // size


def _element_bytes(size):
    _elements_per_word(size)
    return size // 8


def _size_code(size):
    _elements_per_word(size)
    return isa.VPM_SIZES[size]


def _offset(size, offset):
    return _check("offset", offset, 0, _elements_per_word(size) - 1)


def _generic_addr(y, x, size, horizontal, offset):
    """ADDR of a generic VPM access: horizontal {Y, H/B}, vertical {Y[5:4], X, H/B}."""
    per_word = _elements_per_word(size)
    offset = _offset(size, offset)
    _check("y", y, 0, isa.VPM_ROWS - 1)
    if horizontal:
        if x != 0:
            raise AssemblerError(f"x={x!r}: a horizontal VPM access covers whole rows; give x=0")
        return y * per_word + offset
    if y % isa.SIMD_WIDTH:
        raise AssemblerError(f"y={y}: a vertical VPM access starts at a multiple of {isa.SIMD_WIDTH} rows")
    _check("x", x, 0, isa.SIMD_WIDTH - 1)
    return (y + x) * per_word + offset        # y is a multiple of 16: {Y[5:4], X[3:0]} = y + x


@with_caller_location
def vpm_read_setup(num, y, x=0, size=WORD, horizontal=True, laned=False, stride=1, offset=0):
    """vr_setup word for a generic VPM read of ``num`` (1..16) vectors."""
    table, horizontal = isa.VPM_GENERIC_READ, flag("horizontal", horizontal)
    return _put(table, id=isa.VPM_GENERIC_ID, num=_count("num", num, table),
                stride=_count("stride", stride, table), horizontal=horizontal, laned=flag("laned", laned),
                size=_size_code(size),
                addr=_generic_addr(y, x, size, horizontal, offset))


@with_caller_location
def vpm_write_setup(y, x=0, size=WORD, horizontal=True, laned=False, stride=1, offset=0):
    """vw_setup word for generic VPM writes."""
    table, horizontal = isa.VPM_GENERIC_WRITE, flag("horizontal", horizontal)
    return _put(table, id=isa.VPM_GENERIC_ID, stride=_count("stride", stride, table),
                horizontal=horizontal, laned=flag("laned", laned),
                size=_size_code(size),
                addr=_generic_addr(y, x, size, horizontal, offset))


def _modew(size, offset):
    _elements_per_word(size)
    return isa.DMA_MODEW[size] + _offset(size, offset)


def _dma_xy(y, x):
    """{Y[6:0], X[3:0]}: a VPM position as DMA addresses it."""
    return _check("y", y, 0, isa.VPM_DMA_ROWS - 1) * isa.SIMD_WIDTH + _check("x", x, 0, isa.SIMD_WIDTH - 1)


def _mpitch(pitch):
    """MPITCH for a memory pitch of VDR_MPITCH_BYTES * 2**MPITCH bytes; 0 selects the extended
    pitch word."""
    if pitch is None:
        return 0
    unit, codes = isa.VDR_MPITCH_BYTES, range(1, 1 << isa.VDR_SETUP["mpitch"][1])
    for mpitch in codes:
        if unit << mpitch == pitch:
            return mpitch
    raise AssemblerError(f"pitch={pitch!r}: the setup word holds pitches {unit}*2**n bytes "
                         f"({unit << codes[0]}..{unit << codes[-1]}); for others give pitch=None "
                         f"and load vdr_pitch({pitch!r})")


@_memoized
@with_caller_location
def vdr_setup(rows, rowlen, y, x=0, size=WORD, offset=0, horizontal=True, vpitch=None, pitch=None):
    """vr_setup word for a DMA load of ``rows`` (1..16) memory rows of ``rowlen`` (1..16)
    elements, ``pitch`` bytes apart (a power of two 16..262144, or None to use the pitch from
    ``vdr_pitch``), into the VPM at (y, x). Each row starts ``vpitch`` (1..16) steps of the VPM
    address after the previous one: steps of Y (32-bit), {Y, H} (16-bit) or {Y, B} (8-bit), so
    a narrow vpitch of 1 starts the next row one half-word or byte on. The default, None, puts
    each row in the next VPM row (1, 2 or 4 steps)."""
    table = isa.VDR_SETUP
    vpitch = _elements_per_word(size) if vpitch is None else vpitch
    return _put(table, id=isa.VDR_SETUP_ID, modew=_modew(size, offset), mpitch=_mpitch(pitch),
                rowlen=_count("rowlen", rowlen, table), nrows=_count("rows", rows, table, "nrows"),
                vpitch=_count("vpitch", vpitch, table),
                # VERT has the opposite sense to the HORIZ bit of VDW and generic setups.
                vertical=not flag("horizontal", horizontal), addrxy=_dma_xy(y, x))


@_memoized
@with_caller_location
def vdr_pitch(pitch):
    """Extended vr_setup word: memory pitch of a DMA load in bytes (0..16383), used when
    MPITCH is 0. 14 bits, wider than the guide's 13 (facts §5.18, see isa.VDR_EXTENDED); a
    power-of-two pitch of 16 KB or more goes in the setup word's MPITCH instead."""
    try:
        pitch = _check("pitch", pitch, 0, MAX_EXTENDED_PITCH)
    except AssemblerError as error:
        raise AssemblerError(f"{error.message}: the hardware honours a 14-bit extended pitch "
                             f"(facts §5.18); a power-of-two pitch goes in vdr_setup(pitch=...), "
                             f"other rows must be loaded one DMA at a time") from None
    return _put(isa.VDR_EXTENDED, id=isa.VDR_EXTENDED_ID, mpitchb=pitch)


@_memoized
@with_caller_location
def vdw_setup(units, depth, y, x=0, size=WORD, offset=0, horizontal=True, laned=False):
    """vw_setup word for a DMA store of ``units`` (1..128) rows of ``depth`` (1..128) elements
    from the VPM at (y, x)."""
    table = isa.VDW_SETUP
    return _put(table, id=isa.VDW_SETUP_ID, units=_count("units", units, table),
                depth=_count("depth", depth, table), laned=flag("laned", laned),
                horizontal=flag("horizontal", horizontal),
                vpmbase=_dma_xy(y, x), modew=_modew(size, offset))


@_memoized
@with_caller_location
def vdw_stride(stride, blockmode=False):
    """vw_setup stride word: bytes from the end of one memory row to the start of the next.
    16 bits wide, per the errata (fact sheet 5.14, see isa.VDW_STRIDE)."""
    width = isa.VDW_STRIDE["stride"][1]
    return _put(isa.VDW_STRIDE, id=isa.VDW_STRIDE_ID, blockmode=flag("blockmode", blockmode),
                stride=_check("stride", stride, 0, (1 << width) - 1))


class VpmMacros:
    """Instruction macros of the Assembler for the VPM and its DMA engines."""

    def setup_vpm_read(self, num, y, **options):
        """Queue a generic VPM read of ``num`` vectors (options as vpm_read_setup)."""
        self.ldi(regs.vr_setup, vpm_read_setup(num, y, **options))

    def setup_vpm_write(self, y, **options):
        self.ldi(regs.vw_setup, vpm_write_setup(y, **options))

    def setup_dma_load(self, rows, rowlen, y, pitch=None, **options):
        """Set up a DMA load (options as vdr_setup). ``pitch`` defaults to contiguous rows; a
        pitch the setup word cannot hold is loaded as an extended pitch word first."""
        if pitch is None:
            bits = options.get("size", WORD)
            rowlen_max = 1 << isa.VDR_SETUP["rowlen"][1]
            pitch = _check("rowlen", rowlen, 1, rowlen_max) * _element_bytes(bits)
        try:
            _mpitch(pitch)
        except AssemblerError:
            self.ldi(regs.vr_setup, vdr_pitch(pitch))
            pitch = None
        self.ldi(regs.vr_setup, vdr_setup(rows, rowlen, y, pitch=pitch, **options))

    def setup_dma_store(self, units, depth, y, stride=0, **options):
        """Set up a DMA store (options as vdw_setup). The stride word is sticky hardware state,
        so it is loaded too unless ``stride=None``."""
        self.ldi(regs.vw_setup, vdw_setup(units, depth, y, **options))
        if stride is not None:
            self.ldi(regs.vw_setup, vdw_stride(stride))

    def start_dma_load(self, address):
        """Start the DMA load: write the memory address (a register or uniform) to vr_addr."""
        return self.mov(regs.vr_addr, address)

    def start_dma_store(self, address):
        return self.mov(regs.vw_addr, address)

    def wait_dma_load(self):
        """Stall until the DMA load has finished (read vr_wait)."""
        return self.read(regs.vr_wait)

    def wait_dma_store(self):
        return self.read(regs.vw_wait)


MACROS = tuple(name for name in vars(VpmMacros) if not name.startswith("_"))
