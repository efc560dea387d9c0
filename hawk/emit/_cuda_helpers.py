"""The device helpers the CUDA emitter pastes into a kernel, and the C types of planes.

Text only: C types per plane dtype, read from the dtype table (:data:`hawk.dtypes.TABLE`;
16-bit and 8-bit storage types are hawk's own structs, so no CUDA header is needed),
the definitions of those storage types, the helper functions the adds and the
checks call (emitted once each, when used), and the vector type lane planes
are moved with. :mod:`hawk.emit.cuda` reads them; the helpers of operators and
math functions live in their registry entries (:mod:`hawk._registry`).
"""

from __future__ import annotations

import re

from hawk._registry import BUILTINS, integers
from hawk.dtypes import TABLE, PlaneForm
from hawk.emit.checks import INT_INVALID

__all__ = [
    "CHECK_HELPERS",
    "CLAMP_HELPER",
    "C_TYPES",
    "FP8_C_TYPES",
    "HALF_C_TYPES",
    "HELPERS",
    "PACK",
    "PLANE_FORMS",
    "RESERVED",
    "SUM_PREFIX",
    "fp8_type",
    "half_type",
    "storage_types",
]

PLANE_FORMS: dict[str, PlaneForm] = {row.name: row.plane for row in TABLE if row.plane}
"""How a plane of each dtype is stored, by dtype name: its C type, load and store."""

C_TYPES = {name: form.c_type for name, form in PLANE_FORMS.items()}
"""The C type of a plane element, by dtype name (``"bfloat16"`` -> ``"hawk_bf16"``)."""

HALF_C_TYPES = tuple(
    sorted(
        row.plane.c_type
        for row in TABLE
        if row.plane is not None and row.storage_only and row.itemsize == 2
    )
)
"""The 16-bit storage-only C types (``hawk_bf16``, ``hawk_f16``), whose definitions
:func:`half_type` gives."""

FP8_C_TYPES = tuple(
    sorted(
        row.plane.c_type
        for row in TABLE
        if row.plane is not None and row.storage_only and row.itemsize == 1
    )
)
"""The 8-bit storage-only C types (``hawk_e4m3``, ``hawk_e5m2``), whose definitions
:func:`fp8_type` gives."""

# The 16-bit storage types, emitted when a plane has one: a two-byte struct, ``hawk_widen``
# (a load) and ``hawk_round_<t>`` (a store, from float or double; an add into a 16-bit
# table sums in the compute type and rounds once, hawk.emit.cuda).
_HALF_CONVERSIONS = {
    "f16": """\
__device__ __forceinline__ float hawk_widen(hawk_f16 x)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}
__device__ __forceinline__ hawk_f16 hawk_round_f16(float v)
{
    hawk_f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}
__device__ __forceinline__ hawk_f16 hawk_round_f16(double v)
{
    hawk_f16 r;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(r.bits) : "d"(v));
    return r;
}""",
    "bf16": """\
__device__ __forceinline__ float hawk_widen(hawk_bf16 x)
{
    return __uint_as_float(((unsigned)x.bits) << 16);
}
__device__ __forceinline__ hawk_bf16 hawk_round_bf16(float v)
{
    // to nearest even; a NaN stays a (quiet) NaN
    const unsigned u = __float_as_uint(v);
    hawk_bf16 r;
    r.bits = (u & 0x7fffffffu) > 0x7f800000u
        ? (unsigned short)((u >> 16) | 0x40u)
        : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
__device__ __forceinline__ hawk_bf16 hawk_round_bf16(double v)
{
    return hawk_round_bf16((float)v);  // through float32, as the host rounds it
}""",
}

_HALF_TYPE = """\
struct __align__(2) hawk_$t { unsigned short bits; };
$conversions"""


def half_type(ctype: str) -> str:
    """The definitions of 16-bit storage type ``ctype`` (``hawk_f16`` or ``hawk_bf16``)."""
    short = ctype.removeprefix("hawk_")
    return _HALF_TYPE.replace("$conversions", _HALF_CONVERSIONS[short]).replace("$t", short)


# The 8-bit storage types (fp8), emitted when a plane has one: a one-byte struct,
# ``hawk_widen`` (a load, exact) and ``hawk_round_<t>`` (a store, from float or double,
# to nearest even, as ml_dtypes rounds on the host: from the value itself, never through
# float32; a value beyond the largest finite one rounds to e4m3's NaN or e5m2's infinity,
# and a NaN keeps its sign). No atomic add: fp8 planes take no adds. The rounding works on
# the bits of a double (in which every float is exact), so it needs no fp8 hardware.
_FP8_ROUND = """\
__device__ __forceinline__ unsigned hawk_round_fp8(
    double v, int mbits, int bias, int emax, unsigned largest, unsigned beyond, unsigned nan)
{
    // the fp8 bits nearest v (to even) for mbits mantissa bits and exponent bias `bias`:
    // `largest` the largest finite one, `beyond` what a larger magnitude gives
    const unsigned long long u = (unsigned long long)__double_as_longlong(v);
    const unsigned sign = (unsigned)(u >> 56) & 0x80u;
    const unsigned long long a = u & 0x7fffffffffffffffULL;
    if (a > 0x7ff0000000000000ULL) return sign | nan;
    const int e = (int)(a >> 52) - 1023;
    if (e > emax) return sign | beyond;
    if ((a >> 52) == 0ULL) return sign;  // zero, or a double far below fp8's least
    const int emin = 1 - bias;
    const unsigned long long f = (a & 0xfffffffffffffULL) | 0x10000000000000ULL;
    const int shift = 52 - mbits + (e < emin ? emin - e : 0);
    if (shift > 53) return sign;  // below half the least subnormal
    unsigned long long q = f >> shift;  // whole quanta of v, then rounded to nearest even
    const unsigned long long rest = f & ((1ULL << shift) - 1ULL), half = 1ULL << (shift - 1);
    if (rest > half || (rest == half && (q & 1ULL))) ++q;
    // a normal's exponent field, less one, under its mantissa with the implicit bit (a
    // carry into the exponent is a correct rounding up); a subnormal is q itself
    const unsigned long long bits = (e < emin ? 0ULL : (unsigned long long)(e + bias - 1)) << mbits;
    const unsigned long long r = bits + q;
    return r > largest ? sign | beyond : sign | (unsigned)r;
}"""

_FP8_CONVERSIONS = {
    "e4m3": """\
__device__ __forceinline__ float hawk_widen(hawk_e4m3 x)
{
    // 4 exponent bits (bias 7), 3 mantissa bits, no infinities: S.1111.111 is NaN
    const unsigned s = ((unsigned)x.bits & 0x80u) << 24;
    const unsigned e = ((unsigned)x.bits >> 3) & 0xfu, m = (unsigned)x.bits & 0x7u;
    if (e == 0xfu && m == 0x7u) return __uint_as_float(s | 0x7fc00000u);
    if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 0.001953125f) | s);
    return __uint_as_float(s | ((e + 120u) << 23) | (m << 20));
}
__device__ __forceinline__ hawk_e4m3 hawk_round_e4m3(double v)
{
    hawk_e4m3 r;
    r.bits = (unsigned char)hawk_round_fp8(v, 3, 7, 8, 0x7eu, 0x7fu, 0x7fu);
    return r;
}
__device__ __forceinline__ hawk_e4m3 hawk_round_e4m3(float v)
{
    return hawk_round_e4m3((double)v);
}""",
    "e5m2": """\
__device__ __forceinline__ float hawk_widen(hawk_e5m2 x)
{
    // the top byte of an IEEE half: 5 exponent bits (bias 15), 2 mantissa bits
    const unsigned s = ((unsigned)x.bits & 0x80u) << 24;
    const unsigned e = ((unsigned)x.bits >> 2) & 0x1fu, m = (unsigned)x.bits & 0x3u;
    if (e == 0x1fu) return __uint_as_float(s | 0x7f800000u | (m << 21));
    if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 1.52587890625e-05f) | s);
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 21));
}
__device__ __forceinline__ hawk_e5m2 hawk_round_e5m2(double v)
{
    hawk_e5m2 r;
    r.bits = (unsigned char)hawk_round_fp8(v, 2, 15, 15, 0x7bu, 0x7cu, 0x7eu);
    return r;
}
__device__ __forceinline__ hawk_e5m2 hawk_round_e5m2(float v)
{
    return hawk_round_e5m2((double)v);
}""",
}


def fp8_type(ctype: str) -> str:
    """The definitions of 8-bit storage type ``ctype`` (``hawk_e4m3`` or ``hawk_e5m2``);
    they call ``hawk_round_fp8``, which :func:`storage_types` emits before them."""
    short = ctype.removeprefix("hawk_")
    return f"struct __align__(1) {ctype} {{ unsigned char bits; }};\n{_FP8_CONVERSIONS[short]}"


def storage_types(ctypes: set[str]) -> list[str]:
    """The definitions of the storage types among ``ctypes`` (C types of planes), in
    order: the 16-bit ones, then what the 8-bit ones share, then the 8-bit ones."""
    used = sorted(ctypes)
    texts = [half_type(ctype) for ctype in used if ctype in HALF_C_TYPES]
    fp8 = [fp8_type(ctype) for ctype in used if ctype in FP8_C_TYPES]
    return texts + ([_FP8_ROUND, *fp8] if fp8 else [])


# Device helpers of the adds, emitted when used. Those of operators and functions are in
# their registry entries (hawk._registry).
HELPERS = {
    ("add", "ordered"): """\
template <typename T>
__device__ __forceinline__ void hawk_add_ordered(T* target, T value, bool ok, unsigned lanes)
{
    // The lanes of `lanes` (this warp's, every one at this add) add into the warp's own
    // copy of a table in lane order: lanes at one address take turns by lane, lanes at
    // distinct addresses add at once; a lane whose index failed its check adds nothing.
    const unsigned me = threadIdx.x & 31;
    const unsigned peers = __match_any_sync(lanes, (unsigned long long)target);
    const unsigned turn = __popc(peers & ((1u << me) - 1u));
    for (unsigned t = 0; __any_sync(lanes, t <= turn); ++t) {
        if (ok && t == turn) *target += value;
        __syncwarp(lanes);
    }
}""",
    ("add", "uniform"): """\
template <typename T>
__device__ __forceinline__ void hawk_add_uniform(T* target, T value)
{
    // Every lane adds into this one address (a param's gradient, say): a full warp sums
    // its values with shuffles and adds once; a partial warp adds lane by lane.
    const unsigned mask = __activemask();
    if (mask != 0xffffffffu) {
        atomicAdd(target, value);
        return;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(mask, value, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(target, value);
}""",
    ("add", "warp"): """\
template <typename T>
__device__ __forceinline__ void hawk_add_warp(T* target, T value)
{
    // The emitter proved that the 32 lanes of a warp add into one address (it depends on
    // the lane only through lane // K, K a multiple of 32): a full warp whose lanes agree
    // sums its values with shuffles and adds once; any other warp adds lane by lane.
    const unsigned mask = __activemask();
    const unsigned long long address = (unsigned long long)target;
    if (mask != 0xffffffffu || !__all_sync(mask, __shfl_sync(mask, address, 0) == address)) {
        atomicAdd(target, value);
        return;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(mask, value, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(target, value);
}""",
}

CHECK_HELPERS = f"""\
__device__ __noinline__ void hawk_fail(
    unsigned long long* rec, long long site, long long lane, long long value, long long extent)
{{
    // the first failing thread of the record's epoch (rec[5]) raises the device word at
    // rec[6] to it, fills the record and sets rec[0] last
    volatile unsigned long long* out = rec;
    const unsigned long long epoch = out[5];
    if (atomicMax((unsigned long long*)out[6], epoch) < epoch) {{
        out[1] = site;
        out[2] = lane;
        out[3] = value;
        out[4] = extent;
        __threadfence_system();
        out[0] = 1ULL;
    }}
}}
__device__ __forceinline__ bool hawk_in(
    long long index, long long extent, unsigned long long* rec, long long site, long long lane)
{{
    if ((unsigned long long)index < (unsigned long long)extent) return true;
    hawk_fail(rec, site, lane, index, extent);
    return false;
}}
__device__ __forceinline__ long long hawk_divisor(
    long long b, unsigned long long* rec, long long site, long long lane)
{{
    if (b != 0) return b;
    hawk_fail(rec, site, lane, 0, 0);
    return 1;
}}
__device__ __forceinline__ long long hawk_to_int(
    $R x, unsigned long long* rec, long long site, long long lane)
{{
    // int(): toward zero; NaN, +-inf and reals beyond int64 are recorded (the real's
    // bits as a double) and give {INT_INVALID}, which no table accepts
    if (x >= ($R)-9.223372036854775808e18 && x < ($R)9.223372036854775808e18)
        return (long long)x;
    hawk_fail(rec, site, lane, __double_as_longlong((double)x), 0);
    return {INT_INVALID + 1}LL - 1;
}}"""

# A checked read's index: emitted after CHECK_HELPERS when a kernel has a checked read. The
# load at the clamped index never waits on the check; a failing index calls hawk_fail at once
# (out of line, so the lane loop keeps no failure state: the H200 measured a gather at +30%
# this way against +78% with the first failure kept in registers until after the loop).
CLAMP_HELPER = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, unsigned long long* rec, long long site, long long lane)
{
    // index when it is in 0 .. extent - 1, else 0 (and the failure recorded)
    const bool in = (unsigned long long)index < (unsigned long long)extent;
    if (__builtin_expect(!in, 0)) hawk_fail(rec, site, lane, index, extent);
    return in ? index : 0LL;
}"""

# V lanes of one plane, loaded or stored as one (16-byte at most) vector access
PACK = """\
template <typename T, int V>
struct alignas(sizeof(T) * V) hawk_pack {
    T v[V];
};"""


#: the prefix of a 16-bit table's scratch sums (``hawk_s_<plane>``): reserved as a family
SUM_PREFIX = "hawk_s_"

RESERVED = (
    frozenset(
        re.findall(
            r"\bhawk_\w+",
            "\n".join(
                [
                    *storage_types(set(C_TYPES.values())),
                    *HELPERS.values(),
                    CHECK_HELPERS,
                    CLAMP_HELPER,
                    PACK,
                    "hawk_rec",  # the error record's parameter
                    "hawk_done hawk_last",  # the 16-bit adds' finishing block's
                ]
            ),
        )
    )
    | {f"hawk_{name}" for name in BUILTINS}
    | integers.c_identifiers()
    | {"hawk_floor_int"}
)
"""Every identifier hawk's CUDA C may use besides the kernel's own: the storage types,
the helpers (``hawk_<entry>`` for a registry entry's) and the error record's parameter.
A kernel whose ``hawk_<name>`` is one of them gets another symbol
(:func:`hawk.emit.cuda.symbol`)."""
