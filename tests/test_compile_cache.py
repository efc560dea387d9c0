"""The disk cache of compiled kernels (``eagle/cuda/_cache.py``), without a device.

NVRTC compiles here, so every case runs for real: the directory and file modes, the
refusal of a cache others can write (the tests run as root, who ignores permission bits,
so they check eagle's decision, which reads the mode and the owner; "another user" is
this process with its uid patched), digests (flipped bytes, a truncated file), repair
after a load the device refuses (the driver calls faked), concurrent writers (two
processes), the size bound and read-only caches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eagle import arrays
from eagle.cuda import Stream, _cache, cache_dir, clear_cache, compile_cuda, module
from eagle.cuda._runtime import CudaError
from tests._util import FakeCalls, rel_error


def _source(number: int) -> str:
    return f'extern "C" __global__ void k{number}(float* x) {{ x[threadIdx.x] += {number}.0f; }}'


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fresh writable cache (not made yet), no read-only one, the default budget, an
    empty process cache and no warning given yet."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(directory))
    monkeypatch.delenv("EAGLE_CACHE_READONLY", raising=False)
    monkeypatch.delenv("EAGLE_CACHE_MAX_BYTES", raising=False)
    monkeypatch.setattr(module, "_images", OrderedDict())
    monkeypatch.setattr(_cache, "_warned", set())
    return directory


def _forget_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "_images", OrderedDict())


def _files(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def _only(directory: Path) -> Path:
    (path,) = _files(directory)
    return path


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def _compiles(caplog: pytest.LogCaptureFixture) -> int:
    return sum("with NVRTC" in message for message in _messages(caplog, logging.INFO))


def _plant(path: Path, image: bytes) -> None:
    """Store ``image`` as eagle would, with its digest, in the file ``path``."""
    _cache.write(path.stem, image, _cache.DEFAULT_MAX_BYTES)


def _valid(path: Path) -> bytes:
    """The image a cache file holds, checked against its digest."""
    data = path.read_bytes()
    head = len(_cache._MAGIC) + 32
    assert data.startswith(_cache._MAGIC)
    assert hashlib.sha256(data[head:]).digest() == data[len(_cache._MAGIC) : head]
    return data[head:]


# -- where, and with which modes -------------------------------------------------------------


def test_the_cache_directory_is_made_0700_and_its_files_0600_whatever_the_umask(cache):
    previous = os.umask(0)
    try:
        image = compile_cuda(_source(1), name="k1")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    path = _only(cache)
    assert path.suffix == ".img" and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _valid(path) == image  # the image behind its digest, in one file


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("EAGLE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "eagle"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "eagle"
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_a_second_process_reads_the_image_from_disk(cache, monkeypatch, caplog):
    image = compile_cuda(_source(1), name="k1")
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        assert compile_cuda(_source(1), name="k1") == image
    assert _compiles(caplog) == 0
    assert any("disk cache hit" in m for m in _messages(caplog, logging.DEBUG))


def test_a_cache_hit_reads_image_bytes_and_deserialises_nothing(cache, monkeypatch, caplog):
    """docs/install.md: nothing is unpickled; a cached file holds an image's bytes and
    their digest, which the driver loads as it would a fresh compile's."""
    import marshal
    import pickle

    image = compile_cuda(_source(1), name="k1")
    _forget_in_memory(monkeypatch)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the compile cache deserialised an object")

    for target, name in ((pickle, "loads"), (pickle, "load"), (marshal, "loads")):
        monkeypatch.setattr(target, name, refused)
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        assert compile_cuda(_source(1), name="k1") == image
    assert _compiles(caplog) == 0  # read from disk, with nothing unpickled


# -- whom eagle trusts -----------------------------------------------------------------------


def _stat(uid: int, mode: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_the_trust_decision_reads_the_owner_and_the_write_bits():
    me = {1000}
    assert _cache.untrusted(_stat(1000, stat.S_IFDIR | 0o700), me) is None
    assert _cache.untrusted(_stat(1000, stat.S_IFDIR | 0o755), me) is None  # others only read
    assert "owned by uid 1001, not uid 1000" in _cache.untrusted(_stat(1001, 0o700), me)
    assert "group or everyone may write it (mode 0770)" in _cache.untrusted(_stat(1000, 0o770), me)
    assert "(mode 0702)" in _cache.untrusted(_stat(1000, 0o702), me)
    assert "(mode 1777)" in _cache.untrusted(_stat(1000, 0o1777), me)  # /tmp: sticky or not
    assert "not uid 0 or 7" in _cache.untrusted(_stat(5, 0o755), {0, 7})


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_cache_directory_others_can_write_is_neither_read_nor_written(
    cache, monkeypatch, caplog, mode
):
    compile_cuda(_source(1), name="k1")
    path = _only(cache)
    planted = b"\x7fELF planted by someone else"
    _plant(path, planted)  # a valid digest over bad code
    os.chmod(cache, mode)
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        image = compile_cuda(_source(1), name="k1")
        _forget_in_memory(monkeypatch)
        compile_cuda(_source(1), name="k1")
        compile_cuda(_source(2), name="k2")
    assert image != planted and image.startswith(b"\x7fELF")
    assert _compiles(caplog) == 3  # compiled in memory, every time
    (warning,) = _messages(caplog, logging.WARNING)  # once, not per kernel
    assert f"does not use the kernel cache {cache}" in warning
    assert f"(mode {mode:04o})" in warning and "EAGLE_CACHE_DIR" in warning
    assert _only(cache) == path and _valid(path) == planted  # nothing written there either


def test_a_cache_directory_of_another_user_is_refused(cache, monkeypatch, caplog):
    compile_cuda(_source(1), name="k1")
    monkeypatch.setattr(_cache, "_uid", lambda: 4321)  # the directory is now someone else's
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(1), name="k1")
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert f"it is owned by uid {os.geteuid()}, not uid 4321" in warning


def test_a_file_others_can_write_is_compiled_again_and_replaced(cache, monkeypatch, caplog):
    image = compile_cuda(_source(1), name="k1")
    path = _only(cache)
    os.chmod(path, 0o666)
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        assert compile_cuda(_source(1), name="k1") == image
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert f"does not load the cached kernel {path}" in warning and "(mode 0666)" in warning
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and _valid(path) == image


def test_a_link_in_place_of_an_image_is_not_followed(cache, monkeypatch, caplog, tmp_path):
    image = compile_cuda(_source(1), name="k1")
    path = _only(cache)
    elsewhere = tmp_path / "elsewhere.img"
    os.replace(path, elsewhere)
    os.symlink(elsewhere, path)
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        assert compile_cuda(_source(1), name="k1") == image
    assert _compiles(caplog) == 1
    assert any(f"cannot read the cached kernel {path}" in m for m in caplog.messages)
    assert not path.is_symlink() and _valid(path) == image


# -- digests and repair ----------------------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: _flip(data, len(data) // 2), id="a byte of the image"),
        pytest.param(lambda data: _flip(data, len(_cache._MAGIC) + 3), id="a byte of the digest"),
        pytest.param(lambda data: data[: len(data) // 3], id="truncated"),
        pytest.param(lambda data: data[:10], id="truncated in the header"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data[len(_cache._MAGIC) + 32 :], id="a bare cubin"),
    ],
)
def test_a_damaged_image_is_compiled_again_and_replaced(cache, monkeypatch, caplog, damage):
    image = compile_cuda(_source(1), name="k1")
    path = _only(cache)
    path.write_bytes(damage(path.read_bytes()))
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        assert compile_cuda(_source(1), name="k1") == image
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert f"the cached kernel {path} is corrupt" in warning and "replacing it" in warning
    assert _valid(path) == image
    _forget_in_memory(monkeypatch)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(1), name="k1")  # the repaired file serves the next process
    assert _compiles(caplog) == 0 and not _messages(caplog, logging.WARNING)


class _Driver:
    """The driver calls of ``module._load``: ``refuser`` (the library load, or the kernel
    lookup, as for a cubin of another architecture) refuses ``refused`` images."""

    def __init__(
        self,
        refused: set[bytes],
        status: str = "CUDA_ERROR_INVALID_IMAGE",
        refuser: str = "cuLibraryLoadData",
    ) -> None:
        self.refused, self.status, self.refuser = refused, status, refuser
        self.loaded: list[bytes] = []
        self.unloaded: list[Any] = []

    def __call__(self, name: str, *args: Any) -> Any:
        if name == "cuLibraryLoadData":
            if args[0] in self.refused and self.refuser == name:
                raise CudaError(name, self.status, "refused")
            self.loaded.append(args[0])
            return f"library{len(self.loaded)}"
        if name == "cuLibraryUnload":
            self.unloaded.append(args[0])
            return None
        if name == self.refuser and self.loaded[-1] in self.refused:
            raise CudaError(name, self.status, "refused")
        return 7  # cuLibraryGetKernel's handle; cuKernelGetFunction's function


@pytest.fixture
def no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_kernel`` without a device: arch sm_90, no context, no loaded kernels yet."""
    monkeypatch.setattr(module, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(module, "ensure_device", lambda device: None)
    monkeypatch.setattr(module, "_kernels", {})


def test_an_image_the_device_refuses_is_compiled_again_and_replaced(
    cache, monkeypatch, caplog, no_device
):
    image = compile_cuda(_source(1), name="k1")
    path = _only(cache)
    planted = b"not a cubin, though its digest is right"
    _plant(path, planted)
    _forget_in_memory(monkeypatch)
    fake = _Driver({planted})
    monkeypatch.setattr(module, "cudadrv", FakeCalls(fake))
    with caplog.at_level(logging.INFO, logger="eagle"):
        kernel = module.load_kernel(_source(1), "k1")
    assert kernel.name == "k1" and fake.loaded == [image]
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert "the cached image of k1 for sm_90 failed to load (CUDA_ERROR_INVALID_IMAGE)" in warning
    assert _valid(path) == image and module._images[path.stem] == image


def test_an_image_whose_kernel_the_device_refuses_is_compiled_again_and_unloaded(
    cache, monkeypatch, caplog, no_device
):
    image = compile_cuda(_source(1), name="k1")
    path = _only(cache)
    planted = b"a cubin for another architecture, its digest right"
    _plant(path, planted)
    _forget_in_memory(monkeypatch)
    fake = _Driver({planted}, "CUDA_ERROR_NO_BINARY_FOR_GPU", refuser="cuLibraryGetKernel")
    monkeypatch.setattr(module, "cudadrv", FakeCalls(fake))
    with caplog.at_level(logging.INFO, logger="eagle"):
        kernel = module.load_kernel(_source(1), "k1")
    assert kernel.name == "k1" and fake.loaded == [planted, image]
    assert fake.unloaded == ["library1"]  # the refused library is not left loaded
    (warning,) = _messages(caplog, logging.WARNING)
    assert "failed to load (CUDA_ERROR_NO_BINARY_FOR_GPU)" in warning
    assert _valid(path) == image


def test_a_fresh_image_the_device_refuses_raises_and_nothing_is_kept(cache, monkeypatch, no_device):
    image = compile_cuda(_source(1), name="k1")
    _forget_in_memory(monkeypatch)
    module._cache.clear_cache()
    fake = _Driver({image})  # refused even as NVRTC made it: not a cache's fault
    monkeypatch.setattr(module, "cudadrv", FakeCalls(fake))
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_IMAGE"):
        module.load_kernel(_source(1), "k1")
    assert module._kernels == {}
    fake.refused.clear()
    assert module.load_kernel(_source(1), "k1").name == "k1"  # the next load is right


def test_another_load_failure_of_a_cached_image_is_not_taken_for_corruption(
    cache, monkeypatch, caplog, no_device
):
    image = compile_cuda(_source(1), name="k1")
    fake = _Driver({image}, status="CUDA_ERROR_OUT_OF_MEMORY")
    monkeypatch.setattr(module, "cudadrv", FakeCalls(fake))
    with (
        caplog.at_level(logging.INFO, logger="eagle"),
        pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"),
    ):
        module.load_kernel(_source(1), "k1")
    assert _compiles(caplog) == 0 and not _messages(caplog, logging.WARNING)


@pytest.mark.gpu
def test_gpu_a_cached_image_the_device_refuses_is_compiled_again(cache, monkeypatch, caplog, rng):
    source = (
        'extern "C" __global__ void planted(float* x, long long n) {'
        " long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;"
        " if (i < n) x[i] = 2.0f * x[i] + 1.0f; }"
    )
    image = compile_cuda(source, name="planted", arch=module.device_arch(0))
    path = _only(cache)
    # a whole cubin for an architecture this device cannot run, under a digest that matches
    # it (a truncated cubin can crash the driver's loader rather than be refused)
    _plant(path, compile_cuda(source, name="planted", arch="sm_100"))
    _forget_in_memory(monkeypatch)
    monkeypatch.setattr(module, "_kernels", {})
    with caplog.at_level(logging.INFO, logger="eagle"):
        kernel = module.load_kernel(source, "planted")
    (warning,) = _messages(caplog, logging.WARNING)
    assert "the cached image of planted" in warning and "failed to load (CUDA_ERROR_" in warning
    assert _compiles(caplog) == 1 and _valid(path) == image
    x = rng.standard_normal(10_000).astype(np.float32)
    x_d = arrays.asarray(x, device="cuda:0")
    stream = Stream(non_blocking=True)
    kernel.launch(-(-x.size // 256), 256, [x_d, np.int64(x.size)], stream)
    stream.synchronize()
    assert rel_error(x_d.numpy(), 2.0 * x.astype(np.float64) + 1.0) < 1e-6


# -- writers at once -------------------------------------------------------------------------

_RACE = """
import sys
from eagle.cuda import module
source = sys.argv[1]
for _ in range(4):
    module._images.clear()
    module._image(source, "race", "sm_90", None, fresh=True)  # compile and replace the file
    module._images.clear()
    module.compile_cuda(source, name="race")  # read whatever file is there now
print("done")
"""


def test_processes_compiling_one_kernel_at_once_each_succeed_and_leave_one_whole_file(cache):
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    source = 'extern "C" __global__ void race(float* x) { x[threadIdx.x] *= 3.0f; }'
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, source],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        assert out.strip() == "done"
        assert "cached kernel" not in err and "kernel cache" not in err  # eagle's warnings
    path = _only(cache)  # no temporary file left behind
    assert _valid(path).startswith(b"\x7fELF")


# -- the size bound --------------------------------------------------------------------------


def test_the_least_recently_used_images_go_beyond_the_byte_budget(cache, monkeypatch):
    first, second = compile_cuda(_source(1), name="k1"), compile_cuda(_source(2), name="k2")
    one, two = _find(cache, first), _find(cache, second)
    now = time.time()
    os.utime(one, (now - 100, now - 100))
    os.utime(two, (now - 50, now - 50))
    size = one.stat().st_size
    monkeypatch.setenv("EAGLE_CACHE_MAX_BYTES", str(2 * size + size // 2))
    _forget_in_memory(monkeypatch)
    compile_cuda(_source(1), name="k1")  # read from disk: now the most recently used
    compile_cuda(_source(3), name="k3")
    assert one.exists() and not two.exists()
    assert len(_files(cache)) == 2
    assert sum(path.stat().st_size for path in _files(cache)) <= 2 * size + size // 2


def _find(directory: Path, image: bytes) -> Path:
    (path,) = [p for p in _files(directory) if _valid(p) == image]
    return path


def test_a_budget_of_zero_keeps_nothing_on_disk_and_a_bad_budget_is_named(cache, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_MAX_BYTES", "0")
    compile_cuda(_source(1), name="k1")
    assert not cache.exists() or not _files(cache)
    monkeypatch.setenv("EAGLE_CACHE_MAX_BYTES", "1e9")
    _forget_in_memory(monkeypatch)
    monkeypatch.setattr(module, "_nvrtc_compile", _never)
    with pytest.raises(ValueError, match=r"EAGLE_CACHE_MAX_BYTES='1e9' is not a number of bytes"):
        compile_cuda(_source(1), name="k1")  # refused before compiling


def _never(*args: Any) -> bytes:
    raise AssertionError("NVRTC ran")


def test_temporary_files_of_writers_that_died_are_swept_and_fresh_ones_kept(cache):
    compile_cuda(_source(1), name="k1")
    stale, fresh = cache / ".dead.1.tmp", cache / ".busy.2.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    long_ago = time.time() - 2 * _cache._STALE_TEMP_SECONDS
    os.utime(stale, (long_ago, long_ago))
    compile_cuda(_source(2), name="k2")
    assert not stale.exists() and fresh.exists()


def test_clear_cache_deletes_the_images(cache, monkeypatch, caplog):
    assert clear_cache() == 0  # no cache yet
    compile_cuda(_source(1), name="k1")
    compile_cuda(_source(2), name="k2")
    (cache / "notes.txt").write_text("mine")
    assert clear_cache() == 2
    assert [p.name for p in _files(cache)] == ["notes.txt"]
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(1), name="k1")
    assert _compiles(caplog) == 1


def test_an_unwritable_cache_compiles_in_memory_with_one_warning(
    monkeypatch, caplog, tmp_path, cache
):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.INFO, logger="eagle"):
        image = compile_cuda(_source(1), name="k1")
        compile_cuda(_source(2), name="k2")
        assert compile_cuda(_source(1), name="k1") == image  # the process keeps it
    assert _compiles(caplog) == 2
    (warning,) = _messages(caplog, logging.WARNING)
    assert "cannot make its kernel cache" in warning and "EAGLE_CACHE_DIR" in warning


def test_the_process_keeps_the_most_recent_images_within_its_budget(cache, monkeypatch, caplog):
    first = compile_cuda(_source(1), name="k1")
    monkeypatch.setattr(module, "MEMORY_BYTES", 2 * len(first))
    compile_cuda(_source(2), name="k2")
    compile_cuda(_source(3), name="k3")
    assert len(module._images) == 2 and first not in module._images.values()
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        compile_cuda(_source(1), name="k1")  # read again from disk
    assert any("disk cache hit" in m for m in caplog.messages)


# -- read-only caches ------------------------------------------------------------------------


@pytest.fixture
def prebuilt(cache, monkeypatch, tmp_path) -> Path:
    """A read-only cache of k1 and k2, writable by nobody (its owner, root here, could
    make it writable), and an empty writable cache of ours."""
    compile_cuda(_source(1), name="k1")
    compile_cuda(_source(2), name="k2")
    shared = tmp_path / "shared"
    os.replace(cache, shared)
    for path in shared.iterdir():
        os.chmod(path, 0o444)
    os.chmod(shared, 0o555)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "mine"))
    _forget_in_memory(monkeypatch)
    return shared


def test_a_read_only_cache_is_read_only_when_named(prebuilt, monkeypatch, caplog, tmp_path):
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        compile_cuda(_source(1), name="k1")  # not named: compiled
    assert _compiles(caplog) == 1 and not any(str(prebuilt) in m for m in caplog.messages)
    caplog.clear()
    monkeypatch.setenv("EAGLE_CACHE_READONLY", os.pathsep.join(["", str(prebuilt)]))
    _forget_in_memory(monkeypatch)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in prebuilt.iterdir())
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        compile_cuda(_source(2), name="k2")
        compile_cuda(_source(3), name="k3")  # not there: compiled into our own cache
    assert _compiles(caplog) == 1 and not _messages(caplog, logging.WARNING)
    assert any(f"disk cache hit {prebuilt}" in m for m in _messages(caplog, logging.DEBUG))
    assert sorted((p.name, p.stat().st_mtime_ns) for p in prebuilt.iterdir()) == before
    assert len(_files(tmp_path / "mine")) == 2  # k1 and k3, ours


def test_a_read_only_cache_of_another_owner_is_read_where_a_writable_one_is_not(
    prebuilt, monkeypatch, caplog
):
    monkeypatch.setattr(_cache, "_uid", lambda: 4321)  # prebuilt/ is now someone else's
    monkeypatch.setenv("EAGLE_CACHE_MAX_BYTES", "0")  # (and no cache of ours is made)
    monkeypatch.setenv("EAGLE_CACHE_READONLY", str(prebuilt))
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(2), name="k2")
    assert _compiles(caplog) == 0 and not _messages(caplog, logging.WARNING)
    monkeypatch.delenv("EAGLE_CACHE_READONLY")
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(prebuilt))
    _forget_in_memory(monkeypatch)
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(2), name="k2")
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert f"owned by uid {os.geteuid()}, not uid 4321" in warning


@pytest.mark.parametrize("what", ["directory", "file"])
def test_a_read_only_cache_others_can_write_is_refused(prebuilt, monkeypatch, caplog, what):
    monkeypatch.setenv("EAGLE_CACHE_READONLY", str(prebuilt))
    if what == "directory":
        os.chmod(prebuilt, 0o775)
    else:
        for path in prebuilt.iterdir():
            os.chmod(path, 0o664)
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(2), name="k2")
    assert _compiles(caplog) == 1
    (warning,) = _messages(caplog, logging.WARNING)
    assert "(mode 0775)" in warning if what == "directory" else "(mode 0664)" in warning
    if what == "directory":
        assert "chmod go-w" in warning and "EAGLE_CACHE_READONLY" in warning


def test_a_file_in_a_read_only_cache_owned_by_a_third_user_is_refused(
    prebuilt, monkeypatch, caplog
):
    monkeypatch.setenv("EAGLE_CACHE_READONLY", str(prebuilt))
    real_fstat = os.fstat
    monkeypatch.setattr(
        _cache.os,
        "fstat",
        lambda fd: os.stat_result((*real_fstat(fd)[:4], 999, *real_fstat(fd)[5:])),
    )
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(2), name="k2")
    assert _compiles(caplog) == 1
    assert any("owned by uid 999" in m for m in _messages(caplog, logging.WARNING))


def test_a_corrupt_image_in_a_read_only_cache_is_compiled_into_our_own(
    prebuilt, monkeypatch, caplog, tmp_path
):
    monkeypatch.setenv("EAGLE_CACHE_READONLY", str(prebuilt))
    for path in prebuilt.iterdir():
        os.chmod(path, 0o644)
        path.write_bytes(path.read_bytes()[:-5])
        os.chmod(path, 0o444)
    with caplog.at_level(logging.INFO, logger="eagle"):
        compile_cuda(_source(1), name="k1")
    (warning,) = _messages(caplog, logging.WARNING)
    assert "is corrupt" in warning and "replacing" not in warning
    assert len(_files(tmp_path / "mine")) == 1


def test_a_missing_read_only_cache_is_named_once(cache, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE_READONLY", str(tmp_path / "nowhere"))
    with caplog.at_level(logging.WARNING, logger="eagle"):
        compile_cuda(_source(1), name="k1")
        compile_cuda(_source(2), name="k2")
    (warning,) = caplog.messages
    assert "read-only kernel cache" in warning and "is missing" in warning


def test_a_source_with_headers_from_files_is_compiled_every_time(cache, tmp_path, caplog):
    """No key sees a header's contents, so a compile that includes files is never cached:
    a changed header gives a new image."""
    headers = tmp_path / "headers"
    headers.mkdir()
    source = '#include "value.h"\nextern "C" __global__ void k(float* x) { x[0] = VALUE; }'
    options = {"include_path": [str(headers)]}
    images = []
    with caplog.at_level(logging.INFO, logger="eagle"):
        for value in ("1.0f", "2.0f", "2.0f"):
            (headers / "value.h").write_text(f"#define VALUE {value}\n")
            images.append(compile_cuda(source, name="k", options=options))
    assert images[0] != images[1] and _compiles(caplog) == 3
    assert not cache.exists() or not list(cache.iterdir())  # nothing stored on disk


def test_a_cached_image_path_that_is_a_directory_is_compiled_again(cache, caplog):
    compile_cuda(_source(7), name="k7")
    path = _only(cache)
    path.unlink()
    path.mkdir()  # a directory where the image was: read (and replaced) fails, never leaks
    module._images.clear()
    before = len(os.listdir("/proc/self/fd"))
    with caplog.at_level(logging.WARNING, logger="eagle"):
        for _ in range(3):
            assert compile_cuda(_source(7), name="k7")
            module._images.clear()
    assert len(os.listdir("/proc/self/fd")) == before
    assert any("cannot read the cached kernel" in m for m in _messages(caplog, logging.WARNING))
