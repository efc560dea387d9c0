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
