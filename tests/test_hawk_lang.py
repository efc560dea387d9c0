"""The hawk language: tracing to IR, printing, the IR's structure, and every refusal."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hawk
from hawk import ir
from hawk import math as hm
from tests._hawk_kernels import contract, loop_branch

# -- the IR of the design's contraction ---------------------------------------------------


def test_contract_prints_readably() -> None:
    assert str(contract.ir) == textwrap.dedent(
        """\
        kernel contract(w: Table["row":16, "unit":8], f: Table["row":16, "sample":12], y: Mutable[Scalar]):
            sample = lane // 8
            unit = lane % 8
            acc = 0.0
            for r in range(0, 16, 1) carrying acc.1 = acc:
                acc.2 = acc.1 + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
                next acc.1 = acc.2
            y.1 = acc.1
            store y = y.1"""  # noqa: E501
    )


def _definitions(kernel_ir: ir.KernelIR) -> dict[ir.Var, ir.Expr]:
    return {s.var: s.value for s in ir.walk(kernel_ir) if isinstance(s, ir.Let)}


def test_accumulation_loop_is_visible_to_a_later_pass() -> None:
    kernel_ir = contract.ir
    defs = _definitions(kernel_ir)
    (loop,) = [s for s in kernel_ir.body if isinstance(s, ir.Loop)]
    assert (loop.start, loop.stop, loop.step, loop.trip_count) == (0, 16, 1, 16)
    (carry,) = loop.carries
    assert carry.init == ir.Ref(next(v for v in defs if v.name == "acc"))
    assert defs[carry.init.var] == ir.Const(0.0)
    fold = defs[carry.update.var]
    assert isinstance(fold, ir.Binary) and fold.op == "+"
    assert fold.left == ir.Ref(carry.var)
    product = fold.right
    assert isinstance(product, ir.Binary) and product.op == "*"
    w_read, f_read = product.left, product.right
    assert (w_read.plane.name, f_read.plane.name) == ("w", "f")
    assert w_read.address["row"] == ir.Ref(loop.index) == f_read.address["row"]
    assert defs[w_read.address["unit"].var] == ir.Binary("%", ir.Lane(), ir.Const(8))
    assert defs[f_read.address["sample"].var] == ir.Binary("//", ir.Lane(), ir.Const(8))
    (store,) = [s for s in kernel_ir.body if isinstance(s, ir.Store)]
    assert store.plane.name == "y" and defs[store.value.var] == ir.Ref(carry.var)
    assert kernel_ir.body[-1] is store


def test_walk_visits_every_node_in_program_order() -> None:
    nodes = list(ir.walk(contract.ir))
    reads = [n.plane.name for n in nodes if isinstance(n, ir.Read)]
    assert reads == ["w", "f"]
    kinds = [type(n).__name__ for n in nodes if isinstance(n, ir.Stmt)]
    assert kinds == ["Let", "Let", "Let", "Loop", "Let", "Let", "Store"]
    assert sum(isinstance(n, ir.Lane) for n in nodes) == 2


def test_lets_gives_the_value_of_every_let_nested_ones_too() -> None:
    lets = contract.ir.lets()
    assert sorted(var.name for var in lets) == ["acc", "acc.2", "sample", "unit", "y.1"]
    (loop,) = [s for s in contract.ir.body if isinstance(s, ir.Loop)]
    inner = loop.body[0]
    assert isinstance(inner, ir.Let) and lets[inner.var] == inner.value


def test_types_and_uniformity() -> None:
    nodes = list(ir.walk(loop_branch.ir))
    ifs = [n for n in nodes if isinstance(n, ir.If)]
    assert [i.cond.varying for i in ifs] == [True, False, True]  # v > best, k == 0, x > 0
    first_loop, _ = [n for n in nodes if isinstance(n, ir.Loop)]
    assert first_loop.index.type == "int" and not first_loop.index.varying
    carries = {c.var.name: (c.var.type, c.var.varying) for c in first_loop.carries}
    assert carries == {
        "best.1": ("real", True),
        "arg.1": ("int", True),
        "first.1": ("real", True),
    }
    assert all(n.varying for n in nodes if isinstance(n, ir.Read))


def _load(tmp_path: Path, body: str, params: str, future: bool = False) -> hawk.Kernel:
    header = "from __future__ import annotations\n" if future else ""
    header += textwrap.dedent(
        """\
        import math
        import numpy as np
        import hawk
        from hawk import math as hm
        R = 4
        G = "text"


        def helper(v):
            return v


        @hawk.kernel
        """
    )
    source = header + f"def k({params}):\n" + textwrap.indent(body, "    ") + "\n"
    path = tmp_path / f"kernel_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.k


LANES = "x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]"
DEF_LINE = 14  # the line of `def k` in the file _load writes; the body starts on 15


def test_a_power_of_one_or_minus_one_folds_whatever_its_exponent(tmp_path: Path) -> None:
    """1, 0 and -1 to a large constant power fit int64 (the size check before working a
    power out is for larger bases)."""
    k = _load(tmp_path, "y = x * (1 ** 5000 + (-1) ** 5001 + 0 ** 5000 + 4)", LANES)
    assert any(node == ir.Const(4.0) for node in ir.walk(k.ir))
    with pytest.raises(hawk.HawkError, match=r"2 \*\* 5000 is at least 2\*\*64 in size"):
        _load(tmp_path, "y = x * 2 ** 5000", LANES)


def test_loop_carry_is_widened_from_int_to_real(tmp_path: Path) -> None:
    k = _load(tmp_path, "s = 0\nfor i in range(3):\n    s = s + x\ny = s", LANES)
    (loop,) = [s for s in k.ir.body if isinstance(s, ir.Loop)]
    (carry,) = loop.carries
    assert (carry.var.type, carry.var.varying) == ("real", True)
    assert isinstance(carry.init, ir.Cast) and carry.init.to == "real"


def test_constant_conditions_and_expressions_fold(tmp_path: Path) -> None:
    body = "if R > 2:\n    y = x * (R * 2 + 1)\nelse:\n    y = hm.exp(x)\n"
    k = _load(tmp_path, body, LANES)
    assert not any(isinstance(n, ir.If | ir.Call) for n in ir.walk(k.ir))
    assert any(n == ir.Const(9.0) for n in ir.walk(k.ir))


def test_string_annotations_and_module_constants(tmp_path: Path) -> None:
    k = _load(tmp_path, "y = x * math.pi + hawk.math.sqrt(x)", LANES, future=True)
    assert [p.kind for p in k.planes] == ["input", "output"]
    assert ir.Const(np.pi) in list(ir.walk(k.ir))


def _module(tmp_path: Path, source: str):
    """The module of ``source`` (hawk reads a kernel's source, so it is a file)."""
    path = tmp_path / f"module_{abs(hash(source))}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_decorated_kernel_reads_the_names_its_own_body_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a functools.wraps decorator from another module, the closure and globals are
    the function's own, not the wrapper's (a global of the same name was read instead)."""
    (tmp_path / "decorators.py").write_text(
        "import functools\nEPS = 99.0\n\n\ndef logged(fn):\n    @functools.wraps(fn)\n"
        "    def wrapper(*args):\n        return fn(*args)\n\n    return wrapper\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(
        tmp_path,
        """\
        import hawk
        from decorators import logged

        GAIN = 1.0
        EPS = 0.25


        def build(GAIN):
            @hawk.kernel
            @logged
            def gained(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
                y = x * GAIN + EPS

            return gained
        """,
    )
    assert str(module.build(5.0).ir).splitlines()[1] == "    y.1 = x * 5.0 + 0.25"


def test_a_closure_variable_assigned_after_the_def_is_refused_by_name(tmp_path: Path) -> None:
    """It used to fall through to a module global of the same name."""
    module = _module(
        tmp_path,
        """\
        import hawk

        SCALE = 1.0


        def build(n):
            @hawk.kernel
            def scaled(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
                y = x * SCALE

            SCALE = 1.0 / n
            return scaled
        """,
    )
    with pytest.raises(hawk.HawkError, match=r"line 9: name 'SCALE' is a variable of the funct"):
        module.build(4)


def test_string_annotations_read_the_closure_the_body_reads(tmp_path: Path) -> None:
    module = _module(
        tmp_path,
        """\
        from __future__ import annotations

        import hawk

        N = 3


        def make(N):
            @hawk.kernel
            def total(t: hawk.Table["k":N], y: hawk.Mutable[hawk.Scalar]):
                acc = 0.0
                for i in range(N):
                    acc = acc + t.at(k=i)
                y = acc

            return total
        """,
    )
    assert module.make(5).planes[0].shape == (5,)


def test_an_indented_kernel_may_have_lines_at_column_0(tmp_path: Path) -> None:
    module = _module(
        tmp_path,
        """\
        import hawk


        class Layer:
            @hawk.kernel
            def twice(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
                \"\"\"Twice x.
        A docstring line at column 0.\"\"\"
        # a comment at column 0
                y = 2.0 * x
        """,
    )
    assert str(module.Layer.twice.ir).splitlines()[1] == "    y.1 = 2.0 * x"


@pytest.mark.parametrize(
    "body",
    [
        "y = float(int(x) // (R - 4)) if R != 4 else x",
        "y = x if R == 4 or int(x) % (R - 4) == 0 else 0.0",
        "y = -x if R != 4 and int(x) % (R - 4) == 0 else x",
    ],
)
def test_a_constant_condition_reads_only_the_side_it_takes(tmp_path: Path, body: str) -> None:
    """As an if statement on a constant does: the int division by the constant 0 on the
    side ruled out (R = 4) was refused."""
    k = _load(tmp_path, body, LANES)
    assert not any(isinstance(n, ir.Binary) and n.op in ("//", "%") for n in ir.walk(k.ir))


def test_the_body_is_never_executed(tmp_path: Path) -> None:
    # sample_index raises when called; tracing only reads the source
    k = _load(tmp_path, "i = hm.sample_index()\ny = x + i", LANES)
    assert any(isinstance(n, ir.Lane) for n in ir.walk(k.ir))
    assert repr(k) == "<hawk kernel k(x, y)>"


def test_tuple_assignment_evaluates_before_binding(tmp_path: Path) -> None:
    k = _load(tmp_path, "a = x\nb = 1.0\na, b = b, a\ny = a - b", LANES)
    (store,) = [s for s in k.ir.body if isinstance(s, ir.Store)]
    assert str(k.ir).splitlines()[-2] == "    y.1 = a.1 - b.1"
    assert store.value.type == "real"


ERRORS = [
    ("while x > 0:\n    y = x", LANES, 1, r"a while loop .* is not in hawk: while x > 0"),
    ("y = x * 2**70", LANES, 1, r"expression 2 \*\* 70 is 1180591620717411303424, which does not"),
    ("y = x * (2**62 + 2**62)", LANES, 1, r"is 9223372036854775808, which does not fit in 64"),
    ("y = x + 5 // 0", LANES, 1, r"5 // 0 divides an int by the constant 0"),
    ("y = x + 5 % 0", LANES, 1, r"5 % 0 divides an int by the constant 0"),
    ("i = hm.sample_index() % 0\ny = x", LANES, 1, r"lane % 0 divides an int by the constant"),
    ("y = helper(x)", LANES, 1, r"unknown call helper\(\.\.\.\)"),
    ("y = np.exp(x)", LANES, 1, r"unknown call np\.exp"),
    (
        "y = t.at(row=1)",
        "t: hawk.Table['row':2, 'col':3], y: hawk.Mutable[hawk.Scalar]",
        1,
        r"t\.at: partial address, axis 'col' is missing",
    ),
    (
        "y = t.at(row=1, cal=2)",
        "t: hawk.Table['row':2, 'col':3], y: hawk.Mutable[hawk.Scalar]",
        1,
        r"t\.at: unknown axis 'cal'; t has axes \['row', 'col'\]",
    ),
    (
        "y = t.at(row=1, col=2.0)",
        "t: hawk.Table['row':2, 'col':3], y: hawk.Mutable[hawk.Scalar]",
        1,
        r"axis 'col' is real .*convert with int",
    ),
    ("y = t.at(1, 2)", "t: hawk.Table, y: hawk.Mutable[hawk.Scalar]", 1, r"takes one flat index"),
    (
        "for i in range(n):\n    y = x",
        "x: hawk.Scalar, n: hawk.Param, y: hawk.Mutable[hawk.Scalar]",
        1,
        r"a loop bound must be a constant int, not n \(a uniform real value\)",
    ),
    ("for i in [1, 2]:\n    y = x", LANES, 1, r"loops are for x in range\(<constant>\)"),
    ("for i in range(0, R, 0):\n    y = x", LANES, 1, r"step must not be zero"),
    (  # the counter after the last pass: 2**63, past int64 (the device would loop forever)
        "for i in range(9223372036854775805, 9223372036854775807, 4):\n    y = x",
        LANES,
        1,
        r"range\(9223372036854775805, 9223372036854775807, 4\) steps its counter past",
    ),
    (  # the gradient's loop runs backwards from the last pass to -2**63 - 1
        "for i in range(-9223372036854775807 - 1, -9223372036854775805):\n    y = x",
        LANES,
        1,
        r"keep the range one step inside -9223372036854775808 \.\. 9223372036854775807",
    ),
    (  # more than 2**63 passes: refused for its first step back, not by len() overflowing
        "for i in range(-9223372036854775807 - 1, 0):\n    y = x",
        LANES,
        1,
        r"steps its counter past the int64 range",
    ),
    ("y = z\nz = 1.0", LANES, 1, r"name 'z' is used before assignment"),
    ("x = 1.0\ny = x", LANES, 1, r"'x' is a Scalar input; assign to a new name"),
    ("for i in range(R):\n    if i > 1:\n        break\ny = x", LANES, 3, r"break .* not in hawk"),
    ("for i in range(R):\n    continue\ny = x", LANES, 2, r"continue .* not in hawk"),
    ("y = x\nreturn y", LANES, 2, r"return .* is not in hawk"),
    ("def g():\n    pass\ny = x", LANES, 1, r"a nested function is not in hawk"),
    ("y = [x]", LANES, 1, r"a list is not in hawk"),
    ("y = x[0]", LANES, 1, r"indexing with \[\] \(read tables with \.at"),
    ("y = lambda: x", LANES, 1, r"lambda is not in hawk"),
    ("y = f'{x}'", LANES, 1, r"an f-string is not in hawk"),
    ("y = x\nassert x > 0", LANES, 2, r"assert is not in hawk"),
    ("y = x\nimport os", LANES, 2, r"import .* is not in hawk"),
    ("a = b = x\ny = a", LANES, 1, r"chained assignment"),
    ("y = x @ x", LANES, 1, r"operator in x @ x is not in hawk"),
    ("y = x.real", LANES, 1, r"attribute access x\.real is not in hawk"),
    (
        "if x > 0:\n    t = 1.0\ny = t",
        LANES,
        3,
        r"'t' is assigned in only one branch of the if at line 15",
    ),
    (
        "for i in range(R):\n    t = x\ny = t",
        LANES,
        3,
        r"'t' is assigned inside the loop at line 15 but not before it",
    ),
    (
        "for i in range(R):\n    y = x\ny = y + i",
        LANES,
        3,
        r"loop variable 'i' .* not defined after",
    ),
    (
        "for i in range(R):\n    i = 2\ny = x",
        LANES,
        1,
        r"loop variable 'i' is assigned in its loop",
    ),
    ("pass", LANES, 0, r"output 'y' is never assigned; declare it hawk\.Scalar"),
    (
        "for y in range(R):\n    pass",
        LANES,
        0,
        r"output 'y' has no value at the end of the kernel: the loop variable 'y' \(line 15\)",
    ),
    ("if x:\n    y = x", LANES, 1, r"a condition must be a comparison, not x \(real\)"),
    ("y = 1.0 if x else 2.0", LANES, 1, r"a condition must be a comparison"),
    ("y = G", LANES, 1, r"'G' is a str; a kernel uses .* int or float constants"),
    ("y = undefined_name", LANES, 1, r"name 'undefined_name' is not defined"),
    ("y = (x > 1) + 1.0", LANES, 1, r"\+ needs numbers, not a comparison"),
    ("y = -(x > 1.0)", LANES, 1, r"- needs a number, not a comparison: -\(x > 1\.0\)"),
    ("y = x + True", LANES, 1, r"\+ needs numbers, not the bool constant True: .* 1\.0 if FLAG"),
    ("y = x if True == 1 else x", LANES, 1, r"== compares numbers, not the bool constant True"),
    ("t = 1\nfor i in range(R):\n    t = x > 0\ny = x", LANES, 2, r"'t' holds a comparison"),
    ("y = int(x > 0)", LANES, 1, r"int\(\) of a comparison is not in hawk"),
    ("y = x\nhm.exp(x)", LANES, 2, r"this expression has no effect: hm\.exp\(x\)"),
    ("y = x\nyield x", LANES, 2, r"yield is not in hawk: \(yield x\)"),
    ("y = 'a'", LANES, 1, r"the constant 'a' is not a number \(write math\.inf or math\.nan"),
    ("y = x\nprint(x)", LANES, 2, r"print\(\) is not in hawk: call hm\.debug_print\(\.\.\.\)"),
    ("y = x\nbreakpoint()", LANES, 2, r"breakpoint\(\) is not in hawk: call hm\.breakpoint\(\)"),
    ("float = 2.0\ny = float(x)", LANES, 2, r"here 'float' is not the builtin"),
    ("y = hm.fooo(x)", LANES, 1, r"hawk\.math has no function 'fooo'"),
    ("hm = 2.0\ny = hm.exp(x)", LANES, 2, r"here 'hm' is not hawk\.math"),
    ("y = x * 2.0 ** 2000", LANES, 1, r"2\.0 \*\* 2000 is beyond the largest real"),
    ("a, b = hm.split_index(x)\ny = x", LANES, 1, r"split_index needs positive constant ints"),
    ("a, b = hm.split_index(4, 0)\ny = x", LANES, 1, r"split_index needs positive constant ints"),
    ("a, b = hm.split_index()\ny = x", LANES, 1, r"split_index takes constant ints"),
    ("a = hm.split_index(4)\ny = x", LANES, 1, r"split_index gives several values; unpack it"),
    ("a, b = hm.split_index(4, 5)\ny = x", LANES, 1, r"of 2 extent\(s\) gives 3 values, not 2"),
    ("a, b, c = hm.split_index(2**40, 2**30)\ny = x", LANES, 1, r"extents .* beyond int64"),
    ("y = hm.exp(x, x)", LANES, 1, r"exp\(\) takes 1 argument"),
    ("y = hm.sample_index(3)", LANES, 1, r"sample_index\(\) takes no arguments"),
    (
        "t.add(1, value=x)\ny = x",
        "t: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]",
        1,
        r"'t' is a Table, read-only; declare it hawk\.Mutable\[Table\]",
    ),
    (
        "y = t.at(0)",
        "t: hawk.Mutable[hawk.Table], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]",
        1,
        r"'t' is a Mutable\[Table\]: it is added to, not read",
    ),
    (
        "t.add(0, value=x, scale=2.0)\ny = x",
        "t: hawk.Mutable[hawk.Table], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]",
        1,
        r"t\.add: unknown keyword 'scale'; t is a flat Table, addressed by one index",
    ),
    (
        "y = t.at(**{'k': 1})",
        'x: hawk.Scalar, t: hawk.Table["k":3], y: hawk.Mutable[hawk.Scalar]',
        1,
        r"t\.at takes its axes as written keywords, not \*\*",
    ),
    (
        "t.add(0, x)\ny = x",
        "t: hawk.Mutable[hawk.Table], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]",
        1,
        r"t\.add\(\.\.\.\) takes the value as value=<expr>",
    ),
    (
        "y = x",
        "x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], h: hawk.Mutable[hawk.Table]",
        0,
        r"'h' is declared Mutable\[Table\] but never added to",
    ),
    ("y = x", f"{LANES}, z", 0, r"parameter 'z' has no declaration"),
    ("y = x", "x: float, y: hawk.Mutable[hawk.Scalar]", 0, r"parameter 'x' is declared float"),
    ("y = x", f"{LANES}, *rest", 0, r"plain names \(no \*args"),
    ("y = 1.0", "p: hawk.Param, t: hawk.Table", 0, r"a kernel needs a per-lane plane"),
]


@pytest.mark.parametrize(("body", "params", "line", "message"), ERRORS)
def test_refusals_name_the_line(
    tmp_path: Path, body: str, params: str, line: int, message: str
) -> None:
    with pytest.raises(hawk.HawkError, match=message) as caught:
        _load(tmp_path, body, params)
    assert caught.value.line == DEF_LINE + line
    assert str(caught.value).startswith(f"kernel 'k', line {DEF_LINE + line}: ")


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: hawk.Mutable[hawk.Param], r"hawk\.Mutable takes hawk\.Scalar or a hawk\.Table"),
        (lambda: hawk.Table["row":2.5], r"axis 'row' needs a positive int extent .*, not 2\.5"),
        (lambda: hawk.Table["row":0], r"axis 'row' needs a positive int extent .*, not 0"),
        (lambda: hawk.Table[()], r"Table\[\(\)\] declares a table with no axes; .* hawk.Param"),
        (lambda: hawk.Table["row":True], r"axis 'row' needs a positive int extent .*, not True"),
        (
            lambda: hawk.Table["row" : 2**63],
            r"axis 'row' needs a positive int extent below 2\*\*63",
        ),
        (lambda: hawk.Table["row":2, "row":3], r"axis 'row' is declared twice"),
        (lambda: hawk.Table["value":2], r"axis name 'value' is reserved"),
        (lambda: hawk.Table[2], r'axes are written "label":extent'),
        (
            lambda: hawk.Table["row" : 2**62, "col":4],
            r'Table\["row":4611686018427387904, "col":4\] holds 2\*\*63 values or more',
        ),
        (
            lambda: hawk.Mutable[hawk.Table]["k":4],
            r"give the table's axes inside Mutable\[...\], on the table, e\.g\. "
            r'hawk\.Mutable\[hawk\.Table\["k":4\]\]',
        ),
        (
            lambda: hawk.Mutable[hawk.Table["k":3]]["j":2],
            r'Mutable\[hawk\.Table\["k":3\]\]\[...\] declares axes twice',
        ),
        (lambda: hawk.Table["k":3]["j":2], r'hawk\.Table\["k":3\]\[...\] declares axes twice'),
        (lambda: hawk.Mutable[hawk.Scalar][3], r"Mutable\[hawk\.Scalar\] takes no \[...\]"),
    ],
)
def test_bad_declarations(declare, message: str) -> None:
    with pytest.raises(hawk.HawkError, match=message):
        declare()


def test_a_numpy_int_is_an_axis_extent() -> None:
    assert hawk.Table["row" : np.int64(12), "col":3].axes == (("row", 12), ("col", 3))
    assert type(hawk.Table["row" : np.int32(4)].axes[0][1]) is int


@pytest.mark.parametrize(
    ("item", "shown"),
    [(float, "not float$"), (hawk.Mutable[hawk.Scalar], r"not hawk\.Mutable\[hawk\.Scalar\]$")],
)
def test_a_mutable_of_something_else_says_what_it_takes(item: object, shown: str) -> None:
    with pytest.raises(hawk.HawkError, match=r"e\.g\. hawk\.Mutable\[hawk\.Scalar\], " + shown):
        hawk.Mutable[item]
    with pytest.raises(hawk.HawkError, match=r"not Param \(a Param is uniform"):
        hawk.Mutable[hawk.Param]


def test_declarations_are_annotations_only() -> None:
    with pytest.raises(TypeError, match="hawk.Scalar is a declaration"):
        hawk.Scalar()
    assert repr(hawk.Table["row":2, "col":3]) == 'hawk.Table["row":2, "col":3]'
    assert repr(hawk.Mutable[hawk.Scalar]) == "hawk.Mutable[hawk.Scalar]"


def test_decorating_something_else_is_refused() -> None:
    with pytest.raises(hawk.HawkError, match="takes a Python function, not int"):
        hawk.kernel(3)
    namespace: dict = {}
    exec("def f(x):\n    pass\n", namespace)  # a function without a source file
    with pytest.raises(hawk.HawkError, match="cannot read the source"):
        hawk.kernel(namespace["f"])
    with pytest.raises(hawk.HawkError, match=r"takes a def statement; .*<lambda> is a lambda"):
        hawk.kernel(lambda x: x)
    with pytest.raises(TypeError, match="write @hawk.kernel, without parentheses"):
        hawk.kernel()


def test_calling_a_kernel_says_how_to_run_it() -> None:
    @hawk.kernel
    def scaled(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = a * x  # noqa: F841 - a kernel assigns its output plane

    with pytest.raises(TypeError, match=r"eagle\.plan\.auto\(scaled\)\.run\(a=\.\.\., x=\.\.\., y"):
        scaled(2.0, np.zeros(2), np.zeros(2))


# -- the IR checks its own types ------------------------------------------------------------


def test_ir_nodes_refuse_ill_typed_operands() -> None:
    table = ir.Plane("t", "table", (("row", 2),))
    out = ir.Plane("y", "output")
    with pytest.raises(hawk.HawkError, match=r"operands of \+ differ in type"):
        ir.Binary("+", ir.Const(1), ir.Const(1.0))
    with pytest.raises(hawk.HawkError, match="/ divides reals"):
        ir.Binary("/", ir.Const(1), ir.Const(2))
    with pytest.raises(hawk.HawkError, match=r"axis 'row' of table 't' is real"):
        ir.Read(table, (ir.Const(1.0),))
    with pytest.raises(hawk.HawkError, match="takes 1 index"):
        ir.Read(table, (ir.Const(0), ir.Const(0)))
    with pytest.raises(hawk.HawkError, match="needs a real value"):
        ir.Store(out, ir.Const(1))
    with pytest.raises(hawk.HawkError, match="only a Mutable\\[Table\\] is added to"):
        ir.Accumulate(table, (ir.Const(0),), ir.Const(1.0))
    with pytest.raises(hawk.HawkError, match="a uniform variable given a varying value"):
        ir.Let(ir.Var("a", "int", False), ir.Lane())
    with pytest.raises(hawk.HawkError, match="exp takes reals"):
        ir.Call("exp", (ir.Const(1),))


def test_math_functions_work_outside_kernels_except_lane_indices() -> None:
    np.testing.assert_allclose(hm.exp(np.array([0.0, 1.0])), [1.0, np.e])
    assert hm.minimum(2, 3) == 2 and hm.pow(2.0, 3.0) == 8.0
    with pytest.raises(hawk.HawkError, match="only has a meaning inside a @hawk.kernel"):
        hm.sample_index()
    with pytest.raises(hawk.HawkError, match="only has a meaning inside a @hawk.kernel"):
        hm.split_index(4)
