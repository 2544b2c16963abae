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
    from perflab.pipeline import config

    return config.load_yaml(config.DEFAULT_CONFIG)


@pytest.fixture
def base_config(default_config_raw) -> dict:
    """A fresh copy of the default config, pinned to the CPU (valid on any machine)."""
    cfg = copy.deepcopy(default_config_raw)
    cfg["device"] = "cpu"
    return cfg


def _reads_the_shared_run(item) -> bool:
    return "pipeline_run" in getattr(item, "fixturenames", ())


def _in_background(item) -> bool:
    return item.get_closest_marker("background") is not None


def _turn(item) -> int:
    """0: the others; 1: the shared run's readers; 2: the background tests."""
    return 2 if _in_background(item) else int(_reads_the_shared_run(item))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The shared run's readers last but the background tests (stable order), so it runs while
    the others do; and `slow`, like the run they wait for (``-m "not slow"`` leaves them and
    the run out). The background tests after them: their session follows the shared run."""
    _items_by_id.update((i.nodeid, i) for i in items)
    for item in items:
        if _reads_the_shared_run(item):
            if _in_background(item):
                raise pytest.UsageError(f"{item.nodeid}: a background test cannot read the "
                                        "shared run (its session has none)")
            item.add_marker(pytest.mark.slow)
    items.sort(key=_turn)


#: the session's items by node id (the timeline's turns)
_items_by_id: dict = {}
#: the background session of this one (tests/shared_run.py: Delegated), once started
_delegated = None
#: this session's configuration (its hooks serialize the background session's reports)
_config = None


#: when this session started, and when each turn's last test finished (the timeline)
_t0 = time.time()
_turn_ended: dict[int, float] = {}


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logfinish(nodeid, location):
    import shared_run

    if shared_run.in_background_session():
        _write_background({"nodeid": nodeid, "finished": True})
    elif _config is not None:
        item = _items_by_id.get(nodeid)
        if item is not None:
            _turn_ended[_turn(item)] = time.time()


def pytest_terminal_summary(terminalreporter):
    """Where the suite's wall went: this core's own tests, the shared run, the background
    session on the other core (the wall is about the larger of the two cores' shares: what
    to lighten when CI nears its limit)."""
    import shared_run

    if shared_run.in_background_session() or not _turn_ended:
        return
    at = lambda t: f"{t - _t0:.0f} s" if t else "not yet"  # noqa: E731
    parts = [f"{what} ended at {at(_turn_ended[turn])}" for turn, what in
             ((0, "this session's own tests"), (1, "the shared run's readers"))
             if turn in _turn_ended]
    if _delegated is not None:
        parts.append(f"the background tests ran from {at(_delegated.started_at)} (the shared "
                     f"run's end, if one ran) to {at(_delegated.end_time())} on the other core")
    terminalreporter.write_line("suite timeline: " + "; ".join(parts))


def _start_background(items, tmp_path_factory, after) -> None:
    import shared_run

    global _delegated
    nodeids = [i.nodeid for i in items if _in_background(i)]
    if nodeids and not shared_run.in_background_session():
        _delegated = shared_run.Delegated(nodeids, tmp_path_factory.mktemp("background"), after)


@pytest.fixture(scope="session", autouse=True)
def _shared_run(request, tmp_path_factory):
    """The shared run (tests/shared_run.py), started with the session if a test reads it;
    then the background session, which starts once the shared run has ended."""
    import shared_run

    items = request.session.items
    run = None
    if any(_reads_the_shared_run(i) for i in items):
        run = shared_run.Background(tmp_path_factory.mktemp("pipeline"),
                                    tmp_path_factory.mktemp("pipeline-output") / "snakemake.out")
    _start_background(items, tmp_path_factory, run)
    yield run
    if run is not None:
        run.stop()
    if _delegated is not None:
        _delegated.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A background test, in this session: the reports its own session wrote, as this
    session's (its outcome, duration and captured output); run here if that session ended
    without running it."""
    import shared_run

    if not _in_background(item) or shared_run.in_background_session():
        return None
    if _delegated is None:  # only background tests selected: no fixture started it
        _start_background(item.session.items, item.config._tmp_path_factory, None)
    reports = _delegated.reports_of(item.nodeid)
    if reports is None:  # its session ended first: the test runs here instead
        item.warn(pytest.PytestWarning(f"{item.nodeid} ran in this session: "
                                       f"{_delegated.why_not_run()}"))
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for data in reports:
        if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason); JSON: a list
            data["longrepr"] = tuple(data["longrepr"])
        report = item.config.hook.pytest_report_from_serializable(config=item.config, data=data)
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _write_background(record: dict) -> None:
    import json
    import os

    import shared_run

    with open(os.environ[shared_run.REPORTS_ENV], "a") as fh:
        fh.write(json.dumps(record) + "\n")


def pytest_runtest_logreport(report):
    """In the background session: each report, for the session that delegated the test."""
    import shared_run

    if shared_run.in_background_session():
        data = _config.hook.pytest_report_to_serializable(config=_config, report=report)
        _write_background({"nodeid": report.nodeid, "finished": False, "report": data})




@pytest.fixture(scope="session")
def pipeline_run(_shared_run) -> Path:
    """The working directory of the one end-to-end run the session shares, once it finished.

    Read it; a test that adds to it (test_workflow's later invocations) writes new files only.
    """
    return _shared_run.wait()


@pytest.fixture(scope="session")
def tiny_cfg() -> dict:
    """The resolved test contract (config/test.yaml) on the CPU."""
    from perflab.pipeline import config

    return config.load([TEST_CONFIG], {"device": "cpu"})


@pytest.fixture
def tiny_contract(tiny_cfg):
    """Factory: the tiny contract of experiment ``eid`` (a fresh copy each call)."""
    from perflab.pipeline import config

    def make(eid: str = "E01") -> dict:
        return copy.deepcopy(config.contract(tiny_cfg, eid))

    return make
