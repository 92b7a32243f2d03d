"""The GPU's busy share while a block of code runs: one sampler for the benchmarks and ``make gpu-check``.

    with BusySampler() as busy:
        ...                                   # the timed section
    print(busy.describe())                    # "83% busy (pynvml, 41 samples of 100 ms)" or "n/a (...)"

A thread reads the GPU's utilization (the percent of the last sample period in which a kernel ran,
as ``nvidia-smi --query-gpu=utilization.gpu`` reports it) every ``interval_s``: through ``pynvml``
(the ``nvidia-ml-py`` package) when it imports and NVML answers, else from one
``nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100`` process this
sampler starts and ends. With neither (a CPU machine) :attr:`BusySampler.share` is None and
:meth:`BusySampler.describe` says ``n/a``. No torch import: a parent process that only starts
subprocesses (``experiments/gpu_check.py``) can sample the GPU they use.

``index`` is torch's device index; under ``CUDA_VISIBLE_DEVICES=3,5`` index 0 is physical GPU 3.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import threading
from typing import Any

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]


def physical_index(index: int) -> int:
    """The NVML / nvidia-smi index of torch's device ``index`` (``CUDA_VISIBLE_DEVICES`` applied)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


def _nvml_handle(index: int) -> Any:
    """An NVML device handle, or None when pynvml does not import or NVML does not answer."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


class BusySampler:
    """Samples the GPU's utilization in a thread between :meth:`start` and :meth:`stop` (or ``with``).

    Args:
        index: torch's device index of the GPU to watch.
        interval_s: seconds between samples (0.1: what ``-lms 100`` asks of nvidia-smi).
    """

    def __init__(self, index: int = 0, interval_s: float = 0.1):
        self.index = physical_index(index)
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.source = "none"
        self.reason = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> BusySampler:
        """Start sampling (a no-op source, with :attr:`reason` set, when no GPU reader is there)."""
        self.samples, self._stop = [], threading.Event()
        handle = _nvml_handle(self.index)
        if handle is not None:
            self.source = "pynvml"
            self._thread = threading.Thread(target=self._nvml, args=(handle,), daemon=True)
        elif shutil.which("nvidia-smi"):
            self.source = "nvidia-smi"
            cmd = [*NVIDIA_SMI, "-lms", str(round(self.interval_s * 1000)), "-i", str(self.index)]
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._smi, daemon=True)
        else:
            self.source, self.reason = "none", "no GPU reader: pynvml does not import and nvidia-smi is not on PATH"
            return self
        self._thread.start()
        return self

    def _nvml(self, handle: Any) -> None:
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):
                self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    def _smi(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                self.samples.append(float(line.strip()))

    def stop(self) -> BusySampler:
        """Stop sampling (ends the nvidia-smi process this sampler started)."""
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=2)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self.source != "none" and not self.samples:
            self.reason = f"{self.source} gave no sample (the section ran under {self.interval_s:.2g} s?)"
        return self

    def __enter__(self) -> BusySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def share(self) -> float | None:
        """The mean busy share (0-1) over the samples; None when nothing was sampled."""
        return statistics.mean(self.samples) / 100 if self.samples else None

    def describe(self) -> str:
        """``"83% busy (pynvml, 41 samples of 100 ms)"``, or ``"n/a (why)"``."""
        if self.share is None:
            return f"n/a ({self.reason or 'not sampled'})"
        every = f"{self.interval_s * 1000:.0f} ms"
        return f"{self.share:.0%} busy ({self.source}, {len(self.samples)} samples of {every})"


def fmt_share(share: float | None) -> str:
    """A busy share for a table cell: ``"83%"`` or ``"n/a"``."""
    return "n/a" if share is None else f"{share:.0%}"
