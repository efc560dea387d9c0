"""The one table of element types: :data:`TABLE`, a :class:`DType` row per dtype.

A row says what every layer needs to know of a dtype: its numpy dtype, its
``cudaDataType`` code (what cuBLAS is told), its DLPack ``(code, bits)``, whether an
eagle Array may hold it, how a hawk plane of it is stored and computed on
(:class:`PlaneForm`: the C type of an element and the conversions a load and a store
make), and what a product of two factors of it writes and sums in
(:class:`ProductForm`). hawk's emitters, ``eagle.gemm``, ``eagle.arrays`` with the
DLPack bridge, and ``eagle.torch`` all read these rows, so a new dtype is a row here
plus what is truly new about it.

=========================  =====  ==========  ===================  ================
rows                       Array  hawk plane  product writes       product sums
=========================  =====  ==========  ===================  ================
bool, int8-64, uint8-64    yes    no          no
float16                    yes    hawk_f16    float16 or float32   fp32
bfloat16                   yes    hawk_bf16   bfloat16 or float32  fp32
float32                    yes    float       float32              fp32, tf32
float64                    yes    double      float64              fp64
float128, complex64/128    yes    no          no
float8_e4m3fn              yes    hawk_e4m3   bfloat16 or float32  fp32, fast_accum
float8_e5m2                yes    hawk_e5m2   bfloat16 or float32  fp32, fast_accum
=========================  =====  ==========  ===================  ================

The fp8 rows are storage types: a hawk plane of them is read and written (each value
rounded to nearest even when stored) and computed on in float32, but takes no adds
(a :class:`PlaneForm`'s ``adds``); their products are *scaled* (a :class:`ProductForm`'s
``scaled``): per-tensor scales, cuBLASLt, and a partner dtype (its ``pairs``: an
e4m3 factor pairs with e4m3 or e5m2, an e5m2 factor with e4m3 only, as cuBLASLt has
no e5m2 x e5m2 product).

Plain data, read by name: a row's numpy dtype (:attr:`DType.numpy`) is built on first
use, so ``ml_dtypes`` (which defines bfloat16 and the fp8 types for numpy) is
imported only when such a row is used. hawk imports nothing of eagle; eagle reads this
module.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "PLANE_DTYPES",
    "PRODUCT_DTYPES",
    "SCALED_DTYPES",
    "TABLE",
    "DType",
    "Float32Math",
    "PlaneForm",
    "ProductForm",
    "ProductMath",
    "by_dlpack",
    "find",
    "numpy_dtype",
    "plane_row",
    "storable",
    "through_float32",
]

ProductMath = Literal["fp32", "tf32", "fp64", "fast_accum"]
"""How a product sums (exact float32, float32 factors rounded to TF32 on tensor cores,
float64, or for fp8 factors the tensor cores' own accumulator, which cuBLASLt's
``FAST_ACCUM`` keeps instead of promoting partial sums to float32)."""

Float32Math = Literal["fp32", "tf32"]
"""How a product of float32 factors sums (the float32 row's maths), which a plan's
policy and a cuBLAS handle choose."""


@dataclass(frozen=True)
class PlaneForm:
    """How a hawk plane of a dtype is stored in emitted CUDA C.

    Attributes:
        c_type: the C type of one element (``"float"``, ``"hawk_bf16"``).
        load: the C expression that widens an element ``{}`` to float32, or None
            when the element is a C float type (a cast converts it).
        store: the C expression that rounds a compute-type value ``{}`` to an
            element, or None when a cast does.
        adds: a kernel may add into a table of it (``Mutable[Table]`` ``+=``, and
            so the gradients of hawk's adjoints); False for fp8, which has no atomic add.
        from_double: how a float64 value is rounded into an element: ``"once"``, or
            ``"through_float32"`` (bfloat16, as the device converts it: to float32
            first). Every layer that stores a float64 value into the dtype follows it.
    """

    c_type: str
    load: str | None = None
    store: str | None = None
    adds: bool = True
    from_double: Literal["once", "through_float32"] = "once"


@dataclass(frozen=True)
class ProductForm:
    """What a product of two factors of a dtype may write and how it sums.

    Attributes:
        out: the dtypes ``out`` may have, by name.
        math: how the sums may be done, the exact one first.
        pairs: the dtypes the other factor may have, by name; empty for its own only.
        scaled: each factor carries a per-tensor scale (fp8: a cuBLASLt product, which
            takes one layout only).
    """

    out: tuple[str, ...]
    math: tuple[ProductMath, ...]
    pairs: tuple[str, ...] = ()
    scaled: bool = False

    def partners(self, name: str) -> tuple[str, ...]:
        """The dtypes the other factor of a ``name`` factor may have."""
        return self.pairs or (name,)


@dataclass(frozen=True)
class DType:
    """One element type and what each layer makes of it.

    Attributes:
        name: numpy's name for it (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``).
        itemsize: bytes per element.
        cuda: its ``cudaDataType`` code (``library_types.h``), or None.
        dlpack: its DLPack ``(type code, bits)``, or None.
        compute: the dtype arithmetic on it runs in: itself, or float32 for a
            storage-only dtype (16-bit and 8-bit floats).
        array: an eagle Array may hold it.
        interface: the CUDA array interface can describe it (fp8 has no typestr there).
        plane: how a hawk plane of it is stored, or None (not a plane dtype).
        product: what a product over two factors of it does, or None (none does).
        module: ``"numpy"``, or ``"ml_dtypes"`` for the dtypes numpy lacks.
        note: why a layer refuses it, where that is not obvious.
    """

    name: str
    itemsize: int
    cuda: int | None
    dlpack: tuple[int, int] | None
    compute: str
    array: bool = True
    interface: bool = True
    plane: PlaneForm | None = None
    product: ProductForm | None = None
    module: Literal["numpy", "ml_dtypes"] = "numpy"
    note: str = ""

    @functools.cached_property
    def numpy(self) -> np.dtype:
        """Its numpy dtype (importing ``ml_dtypes`` first for the dtypes it defines)."""
        if self.module == "ml_dtypes":
            return np.dtype(getattr(importlib.import_module("ml_dtypes"), self.name))
        return np.dtype(self.name)

    @property
    def storage_only(self) -> bool:
        """True when arithmetic on it runs in a wider dtype (its ``compute``)."""
        return self.compute != self.name


def _integer(name: str, bits: int, code: int, cuda: int | None) -> DType:
    return DType(name, bits // 8, cuda, (code, bits), name)


_FP8_MATHS: tuple[ProductMath, ...] = ("fp32", "fast_accum")

TABLE: tuple[DType, ...] = (
    DType("bool", 1, None, (6, 8), "bool"),
    _integer("int8", 8, 0, 3),
    _integer("int16", 16, 0, 20),
    _integer("int32", 32, 0, 10),
    _integer("int64", 64, 0, 24),
    _integer("uint8", 8, 1, 8),
    _integer("uint16", 16, 1, 22),
    _integer("uint32", 32, 1, 12),
    _integer("uint64", 64, 1, 26),
    DType(
        "float16", 2, 2, (2, 16), "float32",
        plane=PlaneForm("hawk_f16", "hawk_widen({})", "hawk_round_f16({})"),
        product=ProductForm(("float16", "float32"), ("fp32",)),
    ),
    DType(
        "bfloat16", 2, 14, (4, 16), "float32",
        plane=PlaneForm(
            "hawk_bf16", "hawk_widen({})", "hawk_round_bf16({})", from_double="through_float32"
        ),
        product=ProductForm(("bfloat16", "float32"), ("fp32",)),
        module="ml_dtypes",
    ),
    DType(
        "float32", 4, 0, (2, 32), "float32",
        plane=PlaneForm("float"), product=ProductForm(("float32",), ("fp32", "tf32")),
    ),
    DType(
        "float64", 8, 1, (2, 64), "float64",
        plane=PlaneForm("double"), product=ProductForm(("float64",), ("fp64",)),
    ),
    DType("float128", 16, None, (2, 128), "float128"),  # numpy's long double on x86-64
    DType("complex64", 8, 4, (5, 64), "complex64"),
    DType("complex128", 16, 5, (5, 128), "complex128"),
    DType(
        "float8_e4m3fn", 1, 28, (10, 8), "float32",
        plane=PlaneForm("hawk_e4m3", "hawk_widen({})", "hawk_round_e4m3({})", adds=False),
        product=ProductForm(
            ("bfloat16", "float32"), _FP8_MATHS, ("float8_e4m3fn", "float8_e5m2"), scaled=True
        ),
        module="ml_dtypes", interface=False,
    ),
    DType(
        "float8_e5m2", 1, 29, (12, 8), "float32",
        plane=PlaneForm("hawk_e5m2", "hawk_widen({})", "hawk_round_e5m2({})", adds=False),
        product=ProductForm(("bfloat16", "float32"), _FP8_MATHS, ("float8_e4m3fn",), scaled=True),
        module="ml_dtypes", interface=False,
    ),
)  # fmt: skip
"""Every dtype eagle and hawk know, one row each."""

_BY_NAME = {row.name: row for row in TABLE}
_BY_DLPACK = {row.dlpack: row for row in TABLE if row.dlpack is not None}
# each numpy dtype met -> its row (None: the table has none); ``dtype.name`` is computed
# in Python on every access, so each dtype is looked up by name once
_BY_DTYPE: dict[np.dtype, DType | None] = {}
_DTYPES_KEPT = 256

PLANE_DTYPES = tuple(row.name for row in TABLE if row.plane is not None)
"""The names of the dtypes a hawk plane may have (float16, bfloat16, float32, float64)."""

PRODUCT_DTYPES = tuple(
    sorted(row.name for row in TABLE if row.product is not None and not row.product.scaled)
)
"""The names of the factor dtypes of a product of one dtype without scales (bfloat16,
float16, float32, float64): what a plan of products is lowered in."""

SCALED_DTYPES = tuple(row.name for row in TABLE if row.product is not None and row.product.scaled)
"""The names of the factor dtypes of scaled products (float8_e4m3fn, float8_e5m2)."""


def find(dtype: Any) -> DType | None:
    """The row of ``dtype`` (a name such as ``"bfloat16"``, a numpy dtype or type, or
    anything ``numpy.dtype`` takes), or None when the table has none. A name is read
    without numpy, so a row's name never imports ``ml_dtypes``."""
    if isinstance(dtype, str):
        row = _BY_NAME.get(dtype)
        if row is not None:
            return row
    if not isinstance(dtype, np.dtype):
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            return None
    return _row_of(dtype)


def _row_of(dtype: np.dtype) -> DType | None:
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        if len(_BY_DTYPE) >= _DTYPES_KEPT:
            _BY_DTYPE.clear()
        row = _BY_DTYPE[dtype] = _BY_NAME.get(dtype.name)
        return row


def numpy_dtype(dtype: Any) -> np.dtype:
    """``numpy.dtype(dtype)``, where the name of a row that ``ml_dtypes`` defines
    (``"bfloat16"``, ``"float8_e4m3fn"``) imports it first.

    Raises:
        TypeError: not a dtype.
    """
    if isinstance(dtype, str):
        row = _BY_NAME.get(dtype)
        if row is not None:
            return row.numpy
    return np.dtype(dtype)


def plane_row(dtype: np.dtype) -> DType | None:
    """The row of ``dtype`` when a hawk plane may have it (in native byte order), else None."""
    row = _row_of(dtype)
    if row is None or row.plane is None or dtype != row.numpy:
        return None
    return row


def storable(value: Any, dtype: Any) -> Any:
    """``value`` (a number, an array, or anything ``numpy.asarray`` takes) as a store into
    ``dtype`` takes it, by the row's :class:`PlaneForm` ``from_double``: a float64 (or
    wider) value bound for a dtype that rounds it through float32 (bfloat16, as the
    device converts it; ``ml_dtypes`` rounds float64 to bfloat16 directly or through
    float32, by its version) comes back in float32, to be rounded once more by the store;
    anything else comes back as it is."""
    source = value.dtype if isinstance(value, np.ndarray | np.generic) else np.asarray(value).dtype
    if source.kind == "f" and source.itemsize > 4 and through_float32(dtype):
        return np.asarray(value, np.float32)
    return value


def through_float32(dtype: Any) -> bool:
    """Whether a float64 value is rounded into ``dtype`` through float32 (its row's
    :class:`PlaneForm` ``from_double``)."""
    row = find(dtype)
    return row is not None and row.plane is not None and row.plane.from_double == "through_float32"


def by_dlpack(code: int, bits: int) -> DType | None:
    """The row of DLPack type ``code`` with ``bits`` bits, or None."""
    return _BY_DLPACK.get((code, bits))
