"""Chunk planning from a memory budget and out-of-memory retries, exercised on the CPU."""

import gc
import weakref

import pytest
import torch

from napari_gpuscope.compute.jobs import Progress, run_job
from napari_gpuscope.compute.memory import (
    BUDGET_ENV,
    DeviceMemoryError,
    available_bytes,
    is_out_of_memory,
    plan_chunk,
    release_frames,
    run_in_chunks,
)


def test_plan_chunk_fits_the_budget():
    assert plan_chunk(100, 1000, "cpu", budget=10_500) == 10
    assert plan_chunk(100, 1000, "cpu", fixed_bytes=2_000, budget=10_500) == 8
    assert plan_chunk(5, 1000, "cpu", budget=10**9) == 5


def test_plan_chunk_reports_needed_and_available_bytes():
    with pytest.raises(DeviceMemoryError) as info:
        plan_chunk(10, 4 * 1024**2, "cpu", budget=1024**2, what="TV denoising")
    err = info.value
    assert err.needed_bytes == 4 * 1024**2 and err.available_bytes == 1024**2
    assert "4.00 MiB" in str(err) and "1.00 MiB" in str(err) and "TV denoising" in str(err)


def test_budget_from_environment(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "2M")
    assert available_bytes("cpu") == 2 * 1024**2
    monkeypatch.setenv(BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match=BUDGET_ENV):
        available_bytes("cpu")


def test_cpu_without_budget_reports_positive_ram():
    assert available_bytes("cpu") > 0


def test_out_of_memory_detection():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(DeviceMemoryError(2, 1))
    assert not is_out_of_memory(ValueError("bad"))


def test_run_in_chunks_halves_on_oom_and_covers_every_item():
    done, attempts = [], []

    def process(start, stop):
        attempts.append(stop - start)
        if stop - start > 3:  # this "device" fits at most 3 items at a time
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        done.extend(range(start, stop))
        yield Progress(1.0, f"{start}:{stop}")

    messages = []
    chunks = run_job(
        run_in_chunks(10, 8, process, device="cpu", bytes_per_item=1),
        on_progress=lambda u: messages.append(u.message),
    )
    assert sorted(done) == list(range(10))
    assert attempts[:3] == [8, 4, 2]
    assert chunks == 5
    assert any("retrying" in m for m in messages)


def test_run_in_chunks_gives_up_with_the_needed_bytes():
    def process(start, stop):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        yield  # pragma: no cover

    with pytest.raises(DeviceMemoryError) as info:
        run_job(run_in_chunks(4, 4, process, device="cpu", bytes_per_item=3 * 1024**2))
    assert info.value.needed_bytes == 3 * 1024**2


def test_other_errors_are_not_swallowed():
    def process(start, stop):
        raise ValueError("a real bug")
        yield  # pragma: no cover

    with pytest.raises(ValueError, match="a real bug"):
        run_job(run_in_chunks(4, 2, process, device="cpu", bytes_per_item=1))


def test_progress_names_chunks_only_when_there_are_several():
    def process(start, stop):
        yield Progress(1.0, "work")

    single = []
    run_job(run_in_chunks(5, 5, process, device="cpu", bytes_per_item=1), on_progress=single.append)
    assert [u.message for u in single] == ["work"]
    several = []
    run_job(
        run_in_chunks(5, 2, process, device="cpu", bytes_per_item=1), on_progress=several.append
    )
    assert [u.message for u in several] == [f"chunk {k} of 3: work" for k in (1, 2, 3)]


def test_messages_give_advice_for_the_device_and_the_budget():
    with pytest.raises(DeviceMemoryError) as info:
        plan_chunk(10, 4 * 1024**2, "cpu", budget=1024**2)
    message = str(info.value)
    assert "within the memory budget" in message and "Raise the budget" in message
    assert "GPU programs" not in message
    cpu = str(DeviceMemoryError(2048, 1024, "TV", device="cpu"))
    assert "free RAM" in cpu and "GPU" not in cpu and "on cpu" in cpu
    gpu = str(DeviceMemoryError(2048, 1024, "TV", device="cuda:1"))
    assert "on cuda:1" in gpu and "Close other GPU programs" in gpu


def test_release_frames_frees_what_the_failed_chunk_held():
    def chunk():
        big = torch.ones(1000)
        held.append(weakref.ref(big))
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    held = []
    try:
        try:
            chunk()
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as exc:
        gc.collect()
        assert held[0]() is not None  # the traceback keeps the chunk's tensor alive
        release_frames(exc)  # clears the chained exception's frames too
        gc.collect()
        assert held[0]() is None


def test_run_in_chunks_frees_the_failed_chunk_before_retrying():
    alive_at_retry = []
    tensors = []

    def process(start, stop):
        if tensors:
            gc.collect()
            alive_at_retry.append(tensors[-1]() is not None)
        data = torch.ones(100 * (stop - start))
        tensors.append(weakref.ref(data))
        if stop - start > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        yield Progress(1.0, "ok")

    run_job(run_in_chunks(4, 4, process, device="cpu", bytes_per_item=1))
    assert alive_at_retry[0] is False


def test_giving_up_reports_the_device():
    def process(start, stop):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        yield  # pragma: no cover

    with pytest.raises(DeviceMemoryError, match="free RAM") as info:
        run_job(run_in_chunks(2, 1, process, device="cpu", bytes_per_item=8))
    assert info.value.device == "cpu"


class _BrokenPool:
    calls = 0

    def free_all_blocks(self):
        type(self).calls += 1
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")


@pytest.mark.parametrize("usable", [True, False], ids=["cupy-says-usable", "cupy-unusable"])
def test_an_oom_retry_survives_a_cupy_that_imports_but_cannot_start(monkeypatch, usable):
    """Freeing caches runs inside the OOM handler: a CuPy that cannot start must not replace
    the out-of-memory error (the retry goes on), and an unusable CuPy is not touched at all."""
    import sys
    import types

    from napari_gpuscope.compute import devices
    from napari_gpuscope.compute.memory import MemoryRetry, free_cached

    fake = types.ModuleType("cupy")
    fake.get_default_memory_pool = _BrokenPool
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setitem(devices._cupy_status, 0, (usable, "CuPy 14 (simulated)"))
    _BrokenPool.calls = 0

    free_cached("cuda:0")
    retry = MemoryRetry("cuda:0", what="one chunk")
    assert retry.recover(torch.OutOfMemoryError("CUDA out of memory (simulated)"))
    assert _BrokenPool.calls == (2 if usable else 0)
