"""Shared fixtures: repository paths, a fake asynchronous device, tiny contracts."""

from __future__ import annotations

import copy
import queue
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = REPO_ROOT / "config" / "test.yaml"


class FakeAsyncDevice:
    """A device with an in-order work queue, like one CUDA stream.

    ``submit(seconds)`` enqueues work and returns at once; one background
    worker thread executes the queue in order, each item busy until
    ``time.perf_counter()`` (the clock the instruments read) has advanced by
    ``seconds`` since the item started. ``synchronize()`` blocks until every
    submitted item has finished. So a region [t0, t1] that is drained at t0
    and drained again before t1 is read contains the full work: a guaranteed
    lower bound, independent of machine noise.
    """

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self.submitted = 0
        self.completed = 0
        self.sync_calls = 0
        self._worker = threading.Thread(target=self._run, name="fake-device", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        while True:
            seconds = self._q.get()
            if seconds is None:
                self._q.task_done()
                return
            if callable(seconds):  # a marker (a fake CUDA event): no work, just its moment
                seconds()
                self._q.task_done()
                continue
            deadline = time.perf_counter() + seconds
            while (left := deadline - time.perf_counter()) > 0:
                time.sleep(left)
            self.completed += 1
            self._q.task_done()

    def submit(self, seconds: float) -> None:
        self.submitted += 1
        self._q.put(seconds)

    def mark(self, fire) -> None:
        """Enqueue ``fire()``: the worker calls it when it reaches this point of the queue."""
        self._q.put(fire)

    def synchronize(self) -> None:
        self.sync_calls += 1
        self._q.join()

    @property
    def pending(self) -> int:
        return self._q.unfinished_tasks

    def step(self, seconds: float):
        """A zero-argument step that submits ``seconds`` of work and returns."""

        def _step() -> None:
            self.submit(seconds)

        return _step

    def close(self) -> None:
        self._q.put(None)
        self._worker.join(timeout=10)


@pytest.fixture
def fake_device():
    dev = FakeAsyncDevice()
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture(scope="session")
def default_config_raw() -> dict:
    """config/config.yaml as written (not validated)."""
    from perflab import config

    return config.load_yaml(config.DEFAULT_CONFIG)


@pytest.fixture
def base_config(default_config_raw) -> dict:
    """A fresh copy of the default config, pinned to the CPU (valid on any machine)."""
    cfg = copy.deepcopy(default_config_raw)
    cfg["device"] = "cpu"
    return cfg


def _reads_the_shared_run(item) -> bool:
    return "pipeline_run" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The shared run's readers last (stable order), so it runs while the others do; and
    `slow`, like the run they wait for (``-m "not slow"`` leaves them and the run out)."""
    for item in items:
        if _reads_the_shared_run(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_reads_the_shared_run)


@pytest.fixture(scope="session", autouse=True)
def _shared_run(request, tmp_path_factory):
    """The shared run (tests/shared_run.py), started with the session if a test reads it."""
    import shared_run

    if not any(_reads_the_shared_run(i) for i in request.session.items):
        yield None
        return
    run = shared_run.Background(tmp_path_factory.mktemp("pipeline"),
                                tmp_path_factory.mktemp("pipeline-output") / "snakemake.out")
    yield run
    run.stop()


@pytest.fixture(scope="session")
def pipeline_run(_shared_run) -> Path:
    """The working directory of the one end-to-end run the session shares, once it finished.

    Read it; a test that adds to it (test_workflow's later invocations) writes new files only.
    """
    return _shared_run.wait()


@pytest.fixture(scope="session")
def tiny_cfg() -> dict:
    """The resolved test contract (config/test.yaml) on the CPU."""
    from perflab import config

    return config.load([TEST_CONFIG], {"device": "cpu"})


@pytest.fixture
def tiny_contract(tiny_cfg):
    """Factory: the tiny contract of experiment ``eid`` (a fresh copy each call)."""
    from perflab import config

    def make(eid: str = "E01") -> dict:
        return copy.deepcopy(config.contract(tiny_cfg, eid))

    return make
