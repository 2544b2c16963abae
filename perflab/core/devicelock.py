"""One measurement per device at a time, across runs: a file lock per device and machine.

Snakemake keeps one run's timing jobs apart (each asks for every core, or the
GPU), but not two runs: a second run with another tag in the same directory,
or an orphaned job still measuring after ``--unlock``, measured beside the
first with no warning (E03's median rose 5-14 %). Every timing job therefore
holds ``<tmp>/perflab-locks/<device>.lock`` (``fcntl.flock``; the OS releases
it when the process dies, however it dies) for as long as it measures. The
directory is the machine's temp dir, not a home directory a cluster's nodes
may share: the lock is per machine.

``PERFLAB_DEVICE_LOCK`` says what a job does when the device is busy: ``wait``
(the default; a log line says for whom, then one a minute), ``refuse`` (raise
:class:`DeviceBusy` naming the holder) or ``off``. What the job found (how long
it waited, for whom; the other perflab jobs holding a lock on this machine; the
load average) goes into its provenance.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: no lock, and the provenance says so
    fcntl = None

#: seconds between the log lines of a job waiting for its device
LOG_EVERY_S = 60.0
POLL_S = 0.5


class DeviceBusy(RuntimeError):
    """Another perflab measurement holds the device (``PERFLAB_DEVICE_LOCK=refuse``)."""


def lock_dir() -> Path:
    """Where the locks live: ``PERFLAB_LOCK_DIR``, else the machine's temp dir."""
    return Path(os.environ.get("PERFLAB_LOCK_DIR") or
                Path(tempfile.gettempdir()) / "perflab-locks")


def device_key(device: Any) -> str:
    """The lock's name for a device: ``cpu``, or a CUDA device's UUID (stable whatever
    ``CUDA_VISIBLE_DEVICES`` renumbers)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    index = device.index or 0
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # an older torch: the visible index, qualified by the mask
        uuid = f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}-{index}"
    return "cuda-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None


def describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process (it wrote no details)"
    return f"pid {holder.get('pid')} ({holder.get('what', '?')}, since {holder.get('since', '?')})"


def others_holding(skip: Path | None = None) -> list[dict[str, Any]]:
    """The other perflab jobs holding a device lock on this machine right now."""
    out = []
    if fcntl is None or not lock_dir().is_dir():
        return out
    for path in sorted(lock_dir().glob("*.lock")):
        if skip is not None and path == skip:
            continue
        try:
            with open(path) as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    out.append({"device": path.stem, **(_holder(path) or {})})
                else:
                    fcntl.flock(fh, fcntl.LOCK_UN)
        except OSError:
            continue
    return out


def _open_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # shared by every user of the machine, like the temp dir itself
        os.chmod(path.parent, 0o1777)
    except OSError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    return os.fdopen(fd, "r+")


@contextmanager
def held(device: Any, what: str, log: Callable[[str], None] = lambda m: None,
         mode: str | None = None):
    """Hold ``device``'s lock for the block; yields the record for the provenance.

    The record: the mode, whether the lock is held, how long the job waited and for
    whom, the other perflab jobs holding a lock on this machine, the load average.
    """
    mode = (mode or os.environ.get("PERFLAB_DEVICE_LOCK") or "wait").lower()
    record: dict[str, Any] = {"mode": mode, "held": False, "waited_s": 0.0, "waited_for": None,
                              "load_average_before": loadavg()}
    if mode == "off" or fcntl is None:
        record["reason"] = "PERFLAB_DEVICE_LOCK=off" if mode == "off" else "no fcntl here"
        yield record
        return
    key = device_key(device)
    path = lock_dir() / f"{key}.lock"
    record.update(device=key, path=str(path))
    try:
        fh = _open_lock(path)
    except OSError as exc:  # an unwritable lock directory must not stop a measurement
        record["reason"] = f"cannot open {path}: {exc}"
        log(f"device lock not taken ({record['reason']}): another run may measure beside this")
        yield record
        return
    try:
        _acquire(fh, path, mode, log, record)
        fh.seek(0)
        fh.truncate()
        # the lock is this machine's: who holds it is a pid (and what it measures, and where)
        fh.write(json.dumps({"pid": os.getpid(), "what": what, "cwd": os.getcwd(),
                             "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        fh.flush()
        record["held"] = True
        record["other_perflab_jobs"] = others_holding(skip=path)
        yield record
    finally:
        # unlock, then close: a child forked while measuring (a DataLoader worker) shares the
        # open file, and closing only this process's copy would leave the device locked for
        # as long as that child lives; an unlock releases it for every copy
        try:
            fcntl.flock(fh, fcntl.LOCK_UN)
        except OSError:
            pass
        fh.close()


def _acquire(fh, path: Path, mode: str, log: Callable[[str], None], record: dict) -> None:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    holder = _holder(path)
    record["waited_for"] = holder
    if mode == "refuse":
        raise DeviceBusy(f"device {path.stem} is busy: {describe(holder)} is measuring on it "
                         f"(lock {path}); wait for it, or set PERFLAB_DEVICE_LOCK=wait")
    t0 = last = time.monotonic()
    log(f"waiting for device {path.stem}: {describe(holder)} is measuring on it (lock {path})")
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(POLL_S)
            if time.monotonic() - last >= LOG_EVERY_S:
                last = time.monotonic()
                log(f"still waiting for device {path.stem} ({last - t0:.0f} s): "
                    f"{describe(_holder(path))}")
    record["waited_s"] = round(time.monotonic() - t0, 3)
    log(f"device {path.stem} free after {record['waited_s']:.1f} s")


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None
