"""The disk cache of compiled kernel images, read only where it is safe to trust.

What it holds: one CUDA image (a cubin) per kernel, compiled by NVRTC from CUDA C that
eagle was given in this process — the C that hawk emits for your kernels, or the source
you pass to :func:`~eagle.cuda.compile_cuda` or :func:`~eagle.cuda.load_kernel` — under
a SHA-256 of that source, the architecture, the compile options and NVRTC's version.
Each file holds its image behind a SHA-256 digest of the image's bytes, written with it
in one file (to a temporary file in the same directory, then moved into place), and the
digest is checked on every read.

Where: the writable cache is ``$EAGLE_CACHE_DIR``, else ``$XDG_CACHE_HOME/eagle``, else
``~/.cache/eagle`` (:func:`cache_dir`). eagle creates it with mode 0700 and its files
0600, and reads from it only while the directory and the file are yours and nobody else
(group or world) can write them; otherwise it logs a warning once (the ``eagle``
logger) and compiles in memory, as anyone who can write there could plant an image
that eagle would run in your process.

Read-only caches: ``$EAGLE_CACHE_READONLY`` names directories (separated by
``os.pathsep``) of prebuilt images, a cache built into a container image or shared on
a cluster, which eagle reads but never writes. Each is read only while nobody but its
owner (root, say) can write the directory and its files. eagle reads no such
directory unless you name it there, and never loads anything else it did not compile:
it unpickles nothing.

Repair: an image that cannot be read, fails its digest, or fails to load on the
device is compiled again and replaced; processes doing so at once each replace the
file whole. Size: the writable cache keeps at most ``$EAGLE_CACHE_MAX_BYTES``
(:data:`DEFAULT_MAX_BYTES` unless set; 0 keeps nothing) of images, dropping the
least recently used first; :func:`clear_cache` empties it, as does deleting the
directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Collection
from contextlib import suppress
from pathlib import Path

from eagle.errors import EagleValueError

__all__ = ["DEFAULT_MAX_BYTES", "cache_dir", "clear_cache", "max_bytes", "read", "write"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Bytes of images the writable disk cache keeps unless ``$EAGLE_CACHE_MAX_BYTES`` says
otherwise (256 MiB; an image is tens to hundreds of KiB)."""

_SUFFIX = ".img"
_TEMP_SUFFIX = ".tmp"
_MAGIC = b"eagle image 1\n"
_DIGEST = hashlib.sha256().digest_size
_STALE_TEMP_SECONDS = 3600.0  # a temporary file this old was left by a writer that died
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_NOT_A_DIRECTORY = "it is not a directory"

_log = logging.getLogger(__name__)
_warned: set[object] = set()
_warned_lock = threading.Lock()


def cache_dir() -> Path:
    """The writable disk cache of compiled kernels: ``$EAGLE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/eagle``, else ``~/.cache/eagle``."""
    root = os.environ.get("EAGLE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "eagle"


def readonly_dirs() -> list[Path]:
    """The read-only caches named by ``$EAGLE_CACHE_READONLY``, in order."""
    named = os.environ.get("EAGLE_CACHE_READONLY", "")
    return [Path(part) for part in named.split(os.pathsep) if part]


def max_bytes() -> int:
    """The byte budget of the writable cache: ``$EAGLE_CACHE_MAX_BYTES`` or
    :data:`DEFAULT_MAX_BYTES`.

    Raises:
        ValueError: ``$EAGLE_CACHE_MAX_BYTES`` is not a non-negative integer.
    """
    text = os.environ.get("EAGLE_CACHE_MAX_BYTES")
    if text is None or not text.strip():
        return DEFAULT_MAX_BYTES
    try:
        budget = int(text)
    except ValueError:
        budget = -1
    if budget < 0:
        raise EagleValueError(
            f"EAGLE_CACHE_MAX_BYTES={text!r} is not a number of bytes; set it to a "
            "non-negative integer (0 keeps no compiled kernels on disk) or unset it for "
            f"the default, {DEFAULT_MAX_BYTES}"
        )
    return budget


def clear_cache() -> int:
    """Delete every compiled image (and temporary file) eagle keeps in :func:`cache_dir`,
    and return how many files went. Read-only caches are left alone. Deleting the
    directory does the same. A file that cannot be deleted (no permission, say) is left,
    with a warning, and the rest go."""
    removed = 0
    with suppress(FileNotFoundError), os.scandir(cache_dir()) as entries:
        for entry in entries:
            if entry.name.endswith((_SUFFIX, _TEMP_SUFFIX)) and entry.is_file(
                follow_symlinks=False
            ):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    _log.warning("eagle cannot delete the cached kernel %s (%s)", entry.path, exc)
                    continue
                removed += 1
    return removed


# -- trust ---------------------------------------------------------------------------------


def _uid() -> int:
    return os.geteuid()


def untrusted(status: os.stat_result, owners: Collection[int]) -> str | None:
    """Why a directory or file with these ``os.stat`` results may not be read from, or
    None when it may: it must be owned by one of ``owners`` and writable by nobody else
    (no group or world write bit)."""
    if status.st_uid not in owners:
        trusted = " or ".join(str(uid) for uid in sorted(owners))
        return f"it is owned by uid {status.st_uid}, not uid {trusted}"
    if status.st_mode & _OTHERS_WRITE:
        mode = stat.S_IMODE(status.st_mode)
        return f"its group or everyone may write it (mode {mode:04o})"
    return None


def _warn_once(message: str, key: object = None) -> None:
    """Log ``message`` once per ``key`` (the message itself by default)."""
    key = message if key is None else key
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    _log.warning("%s", message)


def _refuse_dir(directory: Path, reason: str, *, readonly: bool) -> None:
    if readonly:
        advice = (
            "make it writable only by its owner (chmod go-w) or take it out of EAGLE_CACHE_READONLY"
        )
    else:
        advice = (
            "point EAGLE_CACHE_DIR at a directory of your own that only you can write "
            "(or name a prebuilt read-only cache in EAGLE_CACHE_READONLY)"
        )
    _warn_once(
        f"eagle does not use the kernel cache {directory}: {reason}, and anyone who can "
        f"write there could plant code that eagle would run; kernels are compiled in "
        f"memory instead. To use a cache, {advice}"
    )


# -- reading -------------------------------------------------------------------------------


def read(key: str) -> tuple[bytes, Path] | None:
    """The image cached under ``key`` and the file it came from, or None.

    The writable cache is looked in first, then each read-only cache. A directory or
    file that may not be trusted is skipped with a warning (once per directory); a file
    that cannot be read or fails its digest is skipped with a warning, and compiling
    the kernel again replaces it in the writable cache.
    """
    found = _read_from(cache_dir(), key, readonly=False)
    if found is not None:
        return found
    for directory in readonly_dirs():
        found = _read_from(directory, key, readonly=True)
        if found is not None:
            return found
    return None


def _read_from(directory: Path, key: str, *, readonly: bool) -> tuple[bytes, Path] | None:
    try:
        folder = os.stat(directory)
    except (FileNotFoundError, NotADirectoryError):
        if readonly:
            _warn_once(f"the read-only kernel cache {directory} (EAGLE_CACHE_READONLY) is missing")
        return None  # a writable cache not made yet (write says so if it cannot be)
    except OSError as exc:
        _warn_once(f"eagle cannot read the kernel cache {directory} ({exc})", ("read", directory))
        return None
    if not stat.S_ISDIR(folder.st_mode):
        _refuse_dir(directory, _NOT_A_DIRECTORY, readonly=readonly)
        return None
    reason = untrusted(folder, {folder.st_uid} if readonly else {_uid()})
    if reason is not None:
        _refuse_dir(directory, reason, readonly=readonly)
        return None
    path = directory / f"{key}{_SUFFIX}"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (O_NOFOLLOW), no permission, ...
        _log.warning("eagle cannot read the cached kernel %s (%s); compiling it again", path, exc)
        return None
    try:  # a directory opens too, but os.fdopen refuses it: the descriptor is closed first
        file = os.fdopen(descriptor, "rb")
    except OSError as exc:
        os.close(descriptor)
        _log.warning("eagle cannot read the cached kernel %s (%s); compiling it again", path, exc)
        return None
    with file:
        status = os.fstat(file.fileno())
        # a read-only cache's files: its owner's (or root's, who can give any file away)
        owners = {folder.st_uid, 0} if readonly else {_uid()}
        reason = (
            untrusted(status, owners)
            if stat.S_ISREG(status.st_mode)
            else "it is not a regular file"
        )
        if reason is not None:
            _log.warning(
                "eagle does not load the cached kernel %s: %s; compiling it again", path, reason
            )
            return None
        data = file.read()
        if not readonly:  # the least recently used images go first (_evict)
            with suppress(OSError):
                os.utime(file.fileno())
    image = _unpack(data)
    if image is None:
        _log.warning(
            "the cached kernel %s is corrupt (its digest does not match its bytes); "
            "compiling it again%s",
            path,
            "" if readonly else " and replacing it",
        )
        return None
    return image, path


def _unpack(data: bytes) -> bytes | None:
    """The image in a cache file's bytes, or None when they are not whole."""
    head = len(_MAGIC) + _DIGEST
    if len(data) <= head or not data.startswith(_MAGIC):
        return None
    digest, image = data[len(_MAGIC) : head], data[head:]
    return image if hashlib.sha256(image).digest() == digest else None


# -- writing -------------------------------------------------------------------------------


def write(key: str, image: bytes, budget: int) -> None:
    """Store ``image`` under ``key`` in the writable cache (made if missing), replacing
    any file there in one step, then keep the cache within ``budget`` bytes (from
    :func:`max_bytes`, asked before compiling, so a bad setting costs no compile).

    A cache that cannot be made or written, or may not be trusted, is left alone
    (with a warning, once per directory): the image then lives in memory only.
    """
    if budget == 0:
        return
    directory = cache_dir()
    try:
        _make(directory)
        status = os.stat(directory)
    except OSError as exc:
        _warn_once(
            f"eagle cannot make its kernel cache {directory} ({exc}); kernels are compiled "
            "in memory (set EAGLE_CACHE_DIR to a directory you can write)"
        )
        return
    reason = untrusted(status, {_uid()}) if stat.S_ISDIR(status.st_mode) else _NOT_A_DIRECTORY
    if reason is not None:
        _refuse_dir(directory, reason, readonly=False)
        return
    data = _MAGIC + hashlib.sha256(image).digest() + image
    try:
        descriptor, temp = tempfile.mkstemp(prefix=f".{key}.", suffix=_TEMP_SUFFIX, dir=directory)
    except OSError as exc:
        _warn_once(f"eagle cannot write its kernel cache {directory} ({exc})", ("write", directory))
        return
    try:
        with os.fdopen(descriptor, "wb") as file:  # mkstemp made it 0600
            file.write(data)
        os.replace(temp, directory / f"{key}{_SUFFIX}")
    except BaseException as exc:
        with suppress(OSError):
            os.unlink(temp)
        if not isinstance(exc, OSError):
            raise
        _warn_once(f"eagle cannot write its kernel cache {directory} ({exc})", ("write", directory))
        return
    _evict(directory, budget)


def _make(directory: Path) -> None:
    """Make ``directory`` with mode 0700, whatever the umask, if it is missing."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return  # another process made it
    os.chmod(directory, 0o700)


def _evict(directory: Path, budget: int) -> None:
    """Delete the least recently used images until those left fit ``budget`` bytes, and
    temporary files that writers which died left behind."""
    images: list[tuple[float, int, str]] = []
    now = time.time()
    with suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            with suppress(OSError):
                if not entry.is_file(follow_symlinks=False):
                    continue
                status = entry.stat(follow_symlinks=False)
                if entry.name.endswith(_SUFFIX):
                    images.append((status.st_mtime, status.st_size, entry.path))
                elif (
                    entry.name.endswith(_TEMP_SUFFIX)
                    and now - status.st_mtime > _STALE_TEMP_SECONDS
                ):
                    os.unlink(entry.path)
    total = sum(size for _, size, _ in images)
    for _, size, path in sorted(images):
        if total <= budget:
            break
        with suppress(FileNotFoundError):
            os.unlink(path)
        total -= size
