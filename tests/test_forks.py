"""eagle.cuda._forks over a fake runtime: the calls a fork and a join make, the side
streams made once per thread and device, work on a branch recorded with eagle's capture
of the stream it forked from, and a block that raises keeping its own error."""

from __future__ import annotations

import itertools
import threading

import pytest

from eagle.cuda import _capture_state, _forks
from eagle.cuda._runtime import CudaError
from eagle.errors import LifetimeError

MAIN = 0x100
_ptrs = itertools.count(0x500)


class _FakeStream:
    def __init__(self, non_blocking: bool, device: int) -> None:
        self._ptr = next(_ptrs)

    def ptr(self) -> int:
        return self._ptr


class _FakeEvent:
    def __init__(self, timing: bool, device: int) -> None:
        self._handle = f"event{next(_ptrs):#x}"


class _FakeCudart:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object, object]] = []
        self.fail = False

    def cudaEventRecord(self, event, stream):
        if self.fail:
            raise CudaError("cudaEventRecord", "cudaErrorStreamCaptureInvalidated", "injected")
        self.calls.append(("record", event, stream))

    def cudaStreamWaitEvent(self, stream, event, flags):
        self.calls.append(("wait", stream, event))


@pytest.fixture
def fake(monkeypatch):
    runtime = _FakeCudart()
    monkeypatch.setattr(_forks, "cudart", runtime)
    monkeypatch.setattr(_forks, "Stream", _FakeStream)
    monkeypatch.setattr(_forks, "Event", _FakeEvent)
    monkeypatch.setattr(_forks, "_local", _forks._Local())
    monkeypatch.setattr(_capture_state, "_active", {})
    return runtime


def test_side_streams_are_made_once_and_only_when_asked(fake):
    assert _forks.side_stream(0, 1, make=False) is None
    first = _forks.side_stream(0, 1, make=True)
    assert _forks.side_stream(0, 1, make=False) == first
    assert _forks.side_stream(0, 0, make=False) not in (None, first)  # made on the way
    assert _forks.side_stream(1, 0, make=False) is None  # per device


def test_side_streams_are_per_thread(fake):
    mine = _forks.side_stream(0, 0, make=True)
    theirs: list[int | None] = []
    thread = threading.Thread(target=lambda: theirs.append(_forks.side_stream(0, 0, make=True)))
    thread.start()
    thread.join()
    assert theirs[0] is not None and theirs[0] != mine


def test_a_fork_and_its_join_are_two_events(fake):
    side = _forks.side_stream(0, 0, make=True)
    with _forks.Branches(MAIN, 0) as branches:
        assert branches.fork(0) == side
        fork_event = fake.calls[0][1]
        assert fake.calls == [("record", fork_event, MAIN), ("wait", side, fork_event)]
        fake.calls.clear()
    ended = fake.calls[0][1]
    assert fake.calls == [("record", ended, side), ("wait", MAIN, ended)]  # joined on leaving


def test_a_joined_branch_is_not_joined_again(fake):
    _forks.side_stream(0, 0, make=True)
    with _forks.Branches(MAIN, 0) as branches:
        branches.fork(0)
        branches.join(0)
        joined = len(fake.calls)
        branches.join(0)
        assert len(fake.calls) == joined
    assert len(fake.calls) == joined


def test_work_on_a_branch_is_recorded_with_eagles_capture_while_it_is_open(fake):
    side = _forks.side_stream(0, 0, make=True)
    kept: list[object] = []
    _capture_state._active[MAIN] = kept
    with _forks.Branches(MAIN, 0) as branches:
        branches.fork(0)
        _capture_state.record_use(side, "product")
    assert kept == ["product"] and side not in _capture_state._active


def test_a_capture_eagle_does_not_run_shares_nothing(fake):
    side = _forks.side_stream(0, 0, make=True)
    with _forks.Branches(MAIN, 0) as branches:
        branches.fork(0)
        assert side not in _capture_state._active


def test_a_side_already_recorded_with_a_capture_refuses_to_fork(fake):
    side = _forks.side_stream(0, 0, make=True)
    _capture_state._active[MAIN] = []
    _capture_state._active[side] = []
    with _forks.Branches(MAIN, 0) as branches, pytest.raises(LifetimeError, match="already"):
        branches.fork(0)
    assert fake.calls == []  # nothing forked, nothing to join


def test_a_block_that_raises_keeps_its_error_when_the_join_fails_too(fake):
    _forks.side_stream(0, 0, make=True)
    with pytest.raises(KeyError, match="the block's"), _forks.Branches(MAIN, 0) as branches:
        branches.fork(0)
        fake.fail = True
        raise KeyError("the block's")


def test_a_failed_join_raises_when_the_block_did_not(fake):
    _forks.side_stream(0, 0, make=True)
    with pytest.raises(CudaError, match="Invalidated"), _forks.Branches(MAIN, 0) as branches:
        branches.fork(0)
        fake.fail = True
