"""Option vocabularies: each is a Literal type with the same string values as before,
checked in one place with a message naming every valid value, so that mypy catches a
misspelt option (and a misspelt CUDA binding call) before anything runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args

import pytest

import eagle.gemm.steps
import hawk.diff
from eagle.cuda import _capture_state
from eagle.errors import EagleValueError, check_option
from eagle.gemm import lowering
from hawk import dtypes, records
from hawk.emit import policy
from hawk.kinds import check_option as hawk_check_option

ROOT = Path(hawk.__file__).parents[1]


def test_the_public_tuples_are_their_vocabularies():
    assert policy.CONTRACTIONS == get_args(policy.Contraction) == ("loop", "gemm")
    assert policy.MATH == get_args(dtypes.Float32Math) == dtypes.find("float32").product.math
    assert get_args(policy.TableAdds) == policy.TABLE_ADDS
    assert hawk.diff.LANE_GRADIENTS == get_args(hawk.diff.LaneGradients) == ("add", "store")
    assert eagle.gemm.steps.BACKENDS == get_args(eagle.gemm.steps.Side) == ("host", "device")
    assert get_args(eagle.gemm.steps.StepKind) == eagle.gemm.steps.STEP_KINDS
    assert get_args(lowering.Direction) == ("forward", "adjoint")
    assert get_args(records.OperandClass) == ("gemm", "gemv")
    assert tuple(_capture_state.MODES) == get_args(_capture_state.CaptureMode)
    assert {m for row in dtypes.TABLE if row.product for m in row.product.math} == set(
        get_args(dtypes.ProductMath)
    )


@pytest.mark.parametrize("check", [check_option, hawk_check_option])
def test_an_option_outside_its_vocabulary_is_refused_naming_every_value(check):
    assert check("gemm", policy.Contraction, "contraction") == "gemm"
    with pytest.raises(
        ValueError, match=r"^contraction must be 'loop' or 'gemm', not 'gemn' \(did you mean 'gemm'"
    ):
        check("gemn", policy.Contraction, "contraction")
    with pytest.raises(ValueError, match=r"^contraction must be 'loop' or 'gemm', not 'fast'$"):
        check("fast", policy.Contraction, "contraction")  # nothing close: no suggestion
    with pytest.raises(ValueError, match=r"not an object of type list$"):
        check(["gemm"] * 30, policy.Contraction, "contraction")
    with pytest.raises(ValueError, match=r"mode must be 'thread_local', 'global' or 'relaxed'"):
        check(None, _capture_state.CaptureMode, "mode")


def test_each_package_refuses_with_its_own_root():
    with pytest.raises(EagleValueError):
        check_option("up", lowering.Direction, "direction")
    with pytest.raises(hawk.HawkError):
        hawk_check_option("up", lowering.Direction, "direction")


def test_mypy_catches_a_misspelt_option_and_a_misspelt_binding_call(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import eagle.gemm.plan
            import eagle.plan
            from eagle.cuda._runtime import cudart
            from hawk.emit import policy

            eagle.gemm.plan.lower_dense_gemm(None, direction="adjiont")
            policy.using(contraction="gemn")
            cudart.cudaStreamSyncronize(0)
            """
        )
    )
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--ignore-missing-imports", "--no-error-summary", str(probe)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    errors = found.stdout.splitlines()
    assert len(errors) == 3, found.stdout + found.stderr
    assert "'adjiont'" in errors[0] and "'gemn'" in errors[1]
    assert 'has no attribute "cudaStreamSyncronize"' in errors[2]
