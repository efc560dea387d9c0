"""Importing eagle or hawk never loads a CUDA driver or library, nor torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_import_loads_no_driver_and_no_torch():
    script = textwrap.dedent(
        """
        import sys
        import eagle, eagle.arrays, eagle.cuda, eagle.gemm, eagle.plan, eagle.diff
        import hawk, hawk.contraction, hawk.diff, hawk.emit.cuda, hawk.emit.host
        maps = open("/proc/self/maps").read()
        loaded = [lib for lib in ("libcuda.so", "libcudart", "libcublas", "libnvrtc")
                  if lib in maps]
        bindings = [m for m in sys.modules if m.startswith("cuda.bindings.")]
        torch = "torch" in sys.modules  # only eagle.torch (and its runner) import it
        print(loaded, bindings, torch)
        sys.exit(1 if loaded or bindings or torch else 0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_loads_no_ml_dtypes_until_a_dtype_needs_it():
    script = textwrap.dedent(
        """
        import sys
        import eagle, eagle.arrays, eagle.gemm, eagle.plan, eagle.diff
        import hawk, hawk.dtypes, hawk.emit.cuda, hawk.emit.host
        from hawk.dtypes import find, numpy_dtype
        assert "ml_dtypes" not in sys.modules, "imported"
        assert find("bfloat16").cuda == 14 and find("float8_e4m3fn").itemsize == 1
        eagle.arrays.zeros(3, "float32")
        assert "ml_dtypes" not in sys.modules, "loaded by a table lookup or a float32 array"
        assert numpy_dtype("bfloat16").name == "bfloat16"
        assert "ml_dtypes" in sys.modules, "not loaded for bfloat16"
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dir_shows_the_public_names_not_the_modules_imports():
    import eagle
    import eagle.gemm
    import eagle.gemm.capture

    shown = [name for name in dir(eagle) if not name.startswith("__")]
    assert shown == ["Array", "EagleError", "arrays", "clear_caches", "cuda", "diff", "errors",
                     "gemm", "plan"]  # fmt: skip
    names = dir(eagle.gemm)
    assert {"CublasCaptureHandle", "matmul_step", "capture"} <= set(names)
    assert not {"Any", "annotations", "importlib"} & set(names)
