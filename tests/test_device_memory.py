"""The recorded device peak is the update's own: its compiled bytes, or the rise of the device's high-water mark
over what the device held before it, whichever is larger."""
import os

import optax

from crux import device_memory
from crux_testing import poisson, train

COMPILED = {"temp_bytes": 800, "argument_bytes": 150, "output_bytes": 50}  # 1000 bytes in all


class Device:
    """A device whose memory_stats() says what the test sets (None: a backend that reports nothing)."""

    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_a_devices_capacity_is_its_limit_else_the_hosts_memory_and_a_budget_held_to_lowers_it():
    limited, unlimited = Device({"bytes_limit": 5000}), Device(None)
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert device_memory.capacity(limited) == 5000 and device_memory.capacity(unlimited) == host
    with device_memory.held_to(3000):
        assert device_memory.capacity(limited) == 3000 and device_memory.capacity(unlimited) == 3000
        with device_memory.held_to(10 ** 30):  # a budget past the device's own: the device's
            assert device_memory.capacity(limited) == 5000
        assert device_memory.capacity(limited) == 3000
    assert device_memory.capacity(limited) == 5000


def test_without_device_statistics_the_compiled_bytes_are_the_peak():
    device = Device(None)
    assert device_memory.update_peak(COMPILED, device_memory.before(device), device) == 1000
    assert device_memory.update_peak({}, device_memory.before(device), device) is None


def test_a_high_water_mark_that_rose_counts_from_the_bytes_in_use_before():
    device = Device({"bytes_in_use": 5000, "peak_bytes_in_use": 6000})
    start = device_memory.before(device)
    device.stats = {"bytes_in_use": 5000, "peak_bytes_in_use": 7200}  # the update rose 2200 above 5000 in use
    assert device_memory.update_peak(COMPILED, start, device) == 2200
    device.stats = {"bytes_in_use": 5000, "peak_bytes_in_use": 6000}  # no rise past the old mark
    assert device_memory.update_peak(COMPILED, start, device) == 1000


def test_an_earlier_larger_peak_is_not_the_updates():
    """A mark that an earlier, larger solve left (and that this update never reached) is not recorded."""
    device = Device({"bytes_in_use": 100, "peak_bytes_in_use": 10 ** 9})
    start = device_memory.before(device)
    assert device_memory.update_peak(COMPILED, start, device) == 1000


def test_a_solve_records_its_compiled_bytes_as_its_peak_on_the_cpu():
    _, _, stats = train(poisson(optax.adam), 2)
    memory = stats.memory
    assert memory["peak_bytes"] == memory["temp_bytes"] + memory["argument_bytes"] + memory["output_bytes"]


def test_a_refusal_names_what_the_program_needed_in_binary_units():
    message = ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 32.02G of 15.75G hbm. Exceeded hbm "
               "capacity by 16.27G. the total memory required for HLO temporaries (32.02G) exceeds available HBM "
               "(15.75G).")
    assert device_memory.refused_bytes(message) == round(32.02 * 2 ** 30)
    assert device_memory.refused_bytes("...required for program arguments (512.5M) ...") == round(512.5 * 2 ** 20)
    assert device_memory.refused_bytes("RESOURCE_EXHAUSTED: Out of memory allocating 1024 bytes.") is None
    # a buffer the device cannot hold (a TPU v5e's message for 16 GiB of points sent to it)
    allocating = ("RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure:\nError allocating device buffer: "
                  "Attempting to allocate 16.00G. That was not possible. There are 15.75G free.; (0x0x0_HBM0)")
    assert device_memory.refused_bytes(allocating) == 16 * 2 ** 30
