"""cherry.memory: sizes, the tensor tracker (exact counts, views, frees, peak, capacity), DeviceMemory, NVML."""
import threading
import weakref

import pytest
import torch

from cherry.memory import (
    DeviceMemory,
    NvmlSampler,
    TensorMemoryTracker,
    format_size,
    parse_size,
    process_peak_rss_bytes,
)

FLOAT_BYTES = 4


# ------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    "text, expected",
    [
        ("1GiB", 2**30), ("1GB", 10**9), ("512", 512), (512, 512), ("0B", 0), ("1.5KiB", 1536),
        ("64 kib", 64 * 1024), ("2 MB", 2_000_000), ("3MiB", 3 * 2**20), ("1TiB", 2**40), (" 7b ", 7),
        ("0.5GB", 500_000_000),
    ],
)
def test_parse_size_accepts(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["1XB", "-1GB", "", "GiB", "1 G iB", "1e9", "1,5GB"])
def test_parse_size_rejects_with_the_bad_value_in_the_message(text):
    with pytest.raises(ValueError, match=repr(text).replace("\\", "\\\\").replace(".", r"\.")):
        parse_size(text)


@pytest.mark.parametrize("value, error", [(-5, ValueError), (1.5, TypeError), (True, TypeError), (None, TypeError)])
def test_parse_size_rejects_bad_types_and_negatives(value, error):
    with pytest.raises(error, match="size"):
        parse_size(value)


@pytest.mark.parametrize("num, text", [(0, "0 B"), (512, "512 B"), (1536, "1.50 KiB"), (2**30, "1.00 GiB"), (3 * 2**40, "3.00 TiB")])
def test_format_size(num, text):
    assert format_size(num) == text


def test_format_size_rejects_negative_and_floats():
    with pytest.raises(ValueError, match="-1"):
        format_size(-1)
    with pytest.raises(TypeError, match="1.5"):
        format_size(1.5)


# ------------------------------------------------------------------------- tracker
def test_tracker_counts_a_known_allocation_exactly():
    with TensorMemoryTracker() as tracker:
        a = torch.empty(1000)
        assert tracker.live_bytes == 1000 * FLOAT_BYTES
        b = torch.zeros(10, 10, dtype=torch.float64)
        assert tracker.live_bytes == 1000 * FLOAT_BYTES + 100 * 8
        assert tracker.peak_bytes == tracker.live_bytes
    del a, b


def test_views_and_in_place_results_are_counted_once():
    with TensorMemoryTracker() as tracker:
        a = torch.ones(100, 10)
        views = [a.view(1000), a[3:], a.t(), a.reshape(10, 100), a.add_(1), a.unsqueeze(0), a.expand(2, 100, 10)]
        assert tracker.live_bytes == a.nbytes
        del views


def test_freed_tensors_decrease_live_bytes_and_peak_stays():
    with TensorMemoryTracker() as tracker:
        a = torch.empty(1000)
        b = torch.empty(500)
        view = a[10:]
        del a
        assert tracker.live_bytes == 1500 * FLOAT_BYTES  # the view keeps a's storage alive
        del view
        assert tracker.live_bytes == 500 * FLOAT_BYTES
        assert tracker.peak_bytes == 1500 * FLOAT_BYTES
        tracker.reset_peak()
        assert tracker.peak_bytes == 500 * FLOAT_BYTES
        c = torch.empty(100)
        assert tracker.peak_bytes == 600 * FLOAT_BYTES
        del b, c
        assert tracker.live_bytes == 0


def test_inputs_created_outside_are_not_counted_but_their_view_results_are_not_either():
    outside = torch.ones(1000)
    with TensorMemoryTracker() as tracker:
        view = outside[5:]
        outside.mul_(2)
        assert tracker.live_bytes == 0
        fresh = outside * 2
        assert tracker.live_bytes == fresh.nbytes
    del view


def test_autograd_saved_tensors_and_backward_allocations_are_seen():
    x = torch.randn(256, 64, requires_grad=True)
    w = torch.randn(64, 64, requires_grad=True)
    with TensorMemoryTracker() as tracker:
        y = (x @ w).relu().sum()
        after_forward = tracker.live_bytes
        assert after_forward == 256 * 64 * FLOAT_BYTES + y.nbytes  # relu keeps its output for backward
        y.backward()
        # The graph (and relu's saved output) is freed; the gradients, made by backward ops, remain.
        assert tracker.live_bytes == x.grad.nbytes + w.grad.nbytes + y.nbytes
        assert tracker.peak_bytes > after_forward


def test_tensors_created_on_another_thread_are_invisible_until_registered():
    box = []
    with TensorMemoryTracker() as tracker:
        worker = threading.Thread(target=lambda: box.append(torch.empty(1000)))
        worker.start()
        worker.join()
        assert tracker.live_bytes == 0  # documented limitation: dispatch modes are thread-local
        assert tracker.register_external(box) == 1000 * FLOAT_BYTES
        assert tracker.live_bytes == 1000 * FLOAT_BYTES


def test_register_external_counts_once_and_releases_on_free():
    params = [torch.empty(100), torch.empty(50, dtype=torch.float64)]
    with TensorMemoryTracker() as tracker:
        assert tracker.register_external(params) == 100 * FLOAT_BYTES + 50 * 8
        assert tracker.register_external(params[0][10:]) == 0  # a view of a registered storage
        activation = torch.empty(25)
        assert tracker.live_bytes == 800 + 100
        assert tracker.external_bytes == 800
        assert tracker.peak_bytes == 900
        del params[:]
        assert tracker.live_bytes == 100
        assert tracker.external_bytes == 0
        del activation


def test_register_external_rejects_non_tensors():
    tracker = TensorMemoryTracker()
    with pytest.raises(TypeError, match=r"tensors\[1\].*int"):
        tracker.register_external([torch.empty(1), 3])
    with pytest.raises(TypeError, match="int"):
        tracker.register_external(5)


def test_capacity_raises_out_of_memory_and_the_process_continues():
    with TensorMemoryTracker(capacity_bytes=10_000) as tracker:
        a = torch.empty(1000)
        with pytest.raises(torch.OutOfMemoryError, match=r"emulated device capacity 9\.77 KiB.*|Tried to allocate 7\.81 KiB"):
            torch.empty(2000)
        assert tracker.live_bytes == 4000
        assert tracker.num_refused == 1
        b = torch.empty(1000)  # what fits still works after the error
        assert tracker.live_bytes == 8000
        del a, b


def test_the_refused_tensor_is_freed_after_the_error():
    from torch.utils._python_dispatch import TorchDispatchMode

    refs = []

    class Recorder(TorchDispatchMode):  # entered first, so it sees the op the tracker runs
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            refs.append(weakref.ref(out.untyped_storage()))
            return out

    with Recorder(), TensorMemoryTracker(capacity_bytes=1000):
        try:
            torch.empty(1000)
        except torch.OutOfMemoryError as error:
            # Freed even while the error (and its traceback's frames) is still alive.
            assert error.__traceback__ is not None
            assert len(refs) == 1 and refs[0]() is None


def test_out_of_memory_in_backward_is_the_same_error_and_state_recovers():
    x = torch.randn(10, 200, requires_grad=True)
    small = torch.randn(10, 50, requires_grad=True)
    w = torch.randn(200, 10)
    with TensorMemoryTracker(capacity_bytes=5_000) as tracker:
        z = (x @ w).sum()  # 400 B of forward output, plus the 4 B of z
        with pytest.raises(torch.OutOfMemoryError, match="emulated device capacity"):
            z.backward()  # x's gradient needs 8000 B: over capacity
        del z
        assert tracker.live_bytes == 0
        assert x.grad is None
        y = (small @ w[:50]).sum()  # a smaller problem fits
        y.backward()
        assert small.grad is not None and tracker.live_bytes == small.grad.nbytes + y.nbytes


def test_register_external_over_capacity_counts_nothing():
    staged = [torch.empty(100), torch.empty(200)]
    with TensorMemoryTracker(capacity_bytes="1KiB") as tracker:
        assert tracker.capacity_bytes == 1024
        with pytest.raises(torch.OutOfMemoryError, match="register_external"):
            tracker.register_external(staged)
        assert tracker.live_bytes == 0


@pytest.mark.parametrize("bad", [0, -1, "0B", "lots"])
def test_capacity_must_be_positive(bad):
    with pytest.raises(ValueError):
        TensorMemoryTracker(capacity_bytes=bad)


def test_sparse_outputs_are_counted():
    with TensorMemoryTracker() as tracker:
        sparse = torch.eye(50).to_sparse()
        # The dense temporary is freed; the sparse tensor's indices and values remain.
        assert tracker.live_bytes == sparse._values().nbytes + sparse._indices().nbytes
        assert tracker.peak_bytes >= 50 * 50 * FLOAT_BYTES


# ------------------------------------------------------------------------- DeviceMemory
def test_device_memory_on_cpu_wraps_the_tracker():
    weights = torch.empty(100)
    with DeviceMemory("cpu", capacity_bytes="4KiB") as memory:
        assert memory.is_emulated and memory.capacity_bytes == 4096
        assert memory.register_external([weights]) == 400
        a = torch.empty(200)
        assert memory.live_bytes() == 1200 and memory.peak_bytes() == 1200
        del a
        memory.reset_peak()
        assert memory.peak_bytes() == 400
        assert memory.peak_reserved_bytes() is None
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1000)


@pytest.mark.parametrize("device, error", [("tpu", ValueError), ("nonsense", ValueError), (5, TypeError)])
def test_device_memory_rejects_bad_devices(device, error):
    with pytest.raises(error, match=repr(device) if error is ValueError else "int"):
        DeviceMemory(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when CUDA is missing")
def test_device_memory_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        DeviceMemory("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_memory_on_cuda_caps_the_allocator():
    with DeviceMemory("cuda", capacity_bytes="256MiB") as memory:
        assert not memory.is_emulated
        a = torch.empty(32 * 2**20, dtype=torch.uint8, device="cuda")
        assert memory.peak_bytes() >= a.nbytes and memory.live_bytes() >= a.nbytes
        assert memory.peak_reserved_bytes() >= memory.peak_bytes()
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
        del a
    big = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")  # the cap is lifted on exit
    del big


# ------------------------------------------------------------------------- NVML, RSS
def test_nvml_sampler_reports_availability_without_raising():
    with NvmlSampler(0, interval_s=0.001) as sampler:
        torch.empty(10)
    if sampler.available:
        assert sampler.baseline_bytes <= sampler.peak_bytes <= sampler.total_bytes
        assert sampler.num_samples >= 2
    else:
        assert "NVML" in sampler.reason or "pynvml" in sampler.reason
        assert sampler.peak_bytes is None and sampler.peak_above_baseline_bytes is None
        assert sampler.sample() is None


@pytest.mark.parametrize("kwargs", [{"device_index": -1}, {"device_index": "0"}, {"interval_s": 0}, {"interval_s": -1.0}])
def test_nvml_sampler_validates_arguments(kwargs):
    with pytest.raises(ValueError):
        NvmlSampler(**kwargs)


def test_process_peak_rss_is_positive_and_monotone():
    first = process_peak_rss_bytes()
    block = torch.ones(16 * 2**20, dtype=torch.uint8)  # touched pages raise the RSS
    second = process_peak_rss_bytes()
    assert first > 10 * 2**20 and second >= first
    del block
