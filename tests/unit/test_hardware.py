"""What Ember reads of this machine, and the backend it picks for each kind of machine."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app import hardware
from app.hardware import GPU, detect, gpu_wired_share
from app.runtime.backend_choice import choose_backend
from tests.support.machines import desktop


def test_detect_reads_this_machine(isolated_home):
    hw = detect()
    assert hw.physical_cores >= 1 and hw.logical_cores >= hw.physical_cores
    assert hw.ram_total > hw.ram_available > 0
    assert hw.cpu and hw.machine == platform.machine()
    if platform.machine() == "x86_64":
        assert "avx2" in hw.isa or "avx" in hw.isa
    assert hw.bandwidth_source == "measured" and hw.cpu_bandwidth_gbps > 1


def test_cpu_bandwidth_is_measured_once_then_cached(isolated_home):
    first = detect()
    started = time.perf_counter()
    second = detect()
    assert second.cpu_bandwidth_gbps == first.cpu_bandwidth_gbps
    assert time.perf_counter() - started < 0.5  # no second measurement
    assert (isolated_home.home / "hardware.json").exists()


@contextmanager
def busy_machine() -> Iterator[None]:
    """Every core kept busy by other processes, as a compile beside a first start would."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait()


def quiet_machine(monkeypatch) -> None:
    """Other programs' CPU share reads as none from now on: the idle half of a test must not
    depend on the machine the suite runs on being idle (a CI machine may run other work)."""
    monkeypatch.setattr(hardware._OthersCpu, "share", lambda self: 0.0)


def test_a_busy_first_measurement_says_so_and_is_measured_again_when_idle(isolated_home,
                                                                          monkeypatch):
    with busy_machine():
        busy = detect()
        assert not hardware.bandwidth_known()  # the next start measures again...
        kept = json.loads((isolated_home.home / "hardware.json").read_text())
        again = detect()  # ...but not while the machine is still busy
    assert busy.bandwidth_provisional and kept["others_busy"] >= hardware.BUSY_SHARE
    assert "while other programs used" in busy.bandwidth_text()
    assert "Ember measures again when the machine is idle" in busy.bandwidth_text()
    assert again.bandwidth_measured_at == busy.bandwidth_measured_at
    quiet_machine(monkeypatch)
    idle = detect()
    assert not idle.bandwidth_provisional and hardware.bandwidth_known()
    assert idle.bandwidth_measured_at is not None
    assert idle.bandwidth_text() == (f"{idle.cpu_bandwidth_gbps:.0f} GB/s (measured "
                                     f"{idle.bandwidth_measured_at[:16].replace('T', ' ')})")
    print(f"busy {busy.cpu_bandwidth_gbps} GB/s ({busy.bandwidth_others_busy:.0%} others), "
          f"idle {idle.cpu_bandwidth_gbps} GB/s")


def test_a_figure_saved_before_the_time_and_load_were_kept_is_measured_again(isolated_home,
                                                                             monkeypatch):
    quiet_machine(monkeypatch)
    first = detect()
    old = json.loads((isolated_home.home / "hardware.json").read_text())
    (isolated_home.home / "hardware.json").write_text(
        json.dumps({"key": old["key"], "cpu_bandwidth_gbps": 1.5}))  # an older Ember's file
    assert not hardware.bandwidth_known()
    again = detect()
    assert again.cpu_bandwidth_gbps > 1.5 and again.bandwidth_measured_at is not None
    assert first.bandwidth_measured_at is not None


def test_amx_note_says_present_but_unused_when_our_build_leaves_it_out(isolated_home):
    hw = detect(measure=False)
    amx_notes = [n for n in hw.notes if "AMX" in n]
    if "amx_tile" not in hw.isa:
        assert amx_notes == []
        return
    assert hardware.llama_cpp_uses_amx() is False  # set-up builds llama.cpp without AMX
    assert len(amx_notes) == 1 and "present but unused" in amx_notes[0]
    assert "20824" in amx_notes[0]


def test_nvidia_gpus_are_read_from_nvidia_smi(tmp_path: Path, monkeypatch, isolated_home):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'NVIDIA GeForce RTX 4090, 24564, 23012, 8.9'\n"
                    "echo 'NVIDIA H100 80GB HBM3, 81559, 80000, 9.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    hw = detect(measure=False)
    assert [(g.name, g.vram_total, g.compute_capability, g.bandwidth_gbps) for g in hw.gpus] == [
        ("NVIDIA GeForce RTX 4090", 24564 << 20, "8.9", 1008.0),
        ("NVIDIA H100 80GB HBM3", 81559 << 20, "9.0", 3350.0)]
    assert hw.has_nvidia and not hw.unified_memory


def test_apple_unified_memory_share_macos_lets_the_gpu_wire():
    assert gpu_wired_share(16 * 2**30) == 0.67
    assert gpu_wired_share(64 * 2**30) == 0.75


def test_bandwidth_table_prefers_the_most_specific_name():
    table = hardware.GPU_BANDWIDTH_GBPS
    assert hardware._bandwidth_for("NVIDIA GeForce RTX 4060 Ti", table) == 288
    assert hardware._bandwidth_for("NVIDIA GeForce RTX 4060", table) == 272
    assert hardware._bandwidth_for("Mystery Accelerator", table) is None


def test_backend_choice_explains_itself_for_each_kind_of_machine():
    cpu = choose_backend(desktop(isa=("avx512f",), cpu_bandwidth_gbps=40), gpu_offload=False)
    assert cpu.name == "llamacpp" and "no GPU: llama.cpp on the CPU (8 cores, AVX-512" in cpu.reason
    gpu = GPU("NVIDIA GeForce RTX 4090", "nvidia", 24 * 2**30, 23 * 2**30, "8.9", 1008)
    with_offload = choose_backend(desktop(gpus=(gpu,)), gpu_offload=True)
    assert "RTX 4090 (24 GB): llama.cpp with GPU offload" in with_offload.reason
    without = choose_backend(desktop(gpus=(gpu,)), gpu_offload=False)
    assert "none of its backends drives this GPU" in without.reason
    assert "`ember cuda install`" in without.reason
    apple = GPU("Apple M2 GPU", "apple", 11 * 2**30, 11 * 2**30, None, 100)
    mac = choose_backend(desktop(machine="arm64", isa=("neon",), gpus=(apple,), apple_chip="M2"),
                         gpu_offload=True)
    assert mac.reason == ("Apple M2, unified memory: llama.cpp with Metal; MLX is used for "
                          "models with an MLX variant")
