"""Cumulative energy counters: NVML's total energy on CUDA, Intel RAPL's package 0 on a CPU.

``EnergyMeter.open(cuda)`` picks the device's counter (or none, with the reason); ``read_j()``
returns joules since an arbitrary origin (only differences mean anything) and
``describe()`` the instrument, unit and reason as a dict for the evidence.

Resolution is coarse: NVML's counter updates every few tens of ms at best and the RAPL
counter about every 1 ms but shares the package with everything else on the machine, so a
single step's difference is noise. Compute J/step over stretches of many steps (the
difference between two readings far apart, divided by the steps between), never per step.
"""

from __future__ import annotations

from pathlib import Path

RAPL = Path("/sys/class/powercap/intel-rapl:0")


class EnergyMeter:
    """One counter. ``instrument`` is None when nothing is measured; ``reason`` says why."""

    def __init__(self, instrument: str | None, reason: str = "", read=None):
        self.instrument, self.reason, self._read = instrument, reason, read

    @classmethod
    def open(cls, cuda: bool, device_index: int | None = None) -> "EnergyMeter":
        return cls._nvml(device_index) if cuda else cls.rapl()

    @classmethod
    def _nvml(cls, index: int | None) -> "EnergyMeter":
        try:
            import pynvml
            import torch
            pynvml.nvmlInit()
            i = torch.cuda.current_device() if index is None else index
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # refuses on devices without it
        except Exception as exc:  # no pynvml, no permission, an old GPU: said, not guessed
            return cls(None, f"NVML total energy counter not readable: "
                             f"{type(exc).__name__}: {exc}")
        # millijoules since the driver loaded
        return cls(f"NVML total energy counter (GPU {i})", "",
                   lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3)

    @classmethod
    def rapl(cls, zone: Path = RAPL) -> "EnergyMeter":
        """The RAPL zone's counter (µJ), its wrap at ``max_energy_range_uj`` undone."""
        f, rng = zone / "energy_uj", zone / "max_energy_range_uj"
        try:
            int(f.read_text())
            wrap = int(rng.read_text())
        except (OSError, ValueError) as exc:
            return cls(None, f"RAPL package 0 not readable ({f}): {type(exc).__name__}")
        state = {"last": None, "offset": 0}

        def read() -> float:
            uj = int(f.read_text())
            if state["last"] is not None and uj < state["last"]:  # the counter wrapped
                state["offset"] += wrap
            state["last"] = uj
            return (uj + state["offset"]) / 1e6
        return cls("RAPL package 0", "", read)

    def read_j(self) -> float | None:
        """Joules since the counter's origin, or None when not measured (or a read failed)."""
        if self._read is None:
            return None
        try:
            return float(self._read())
        except Exception:
            return None

    def describe(self) -> dict:
        return {"instrument": self.instrument, "unit": "J",
                "reason": self.reason if self.instrument is None else ""}
