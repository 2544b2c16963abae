"""The fork server (perflab/core/forkserver.py): a job handed to it runs as a new process with the
caller's stdio, cwd, environment and argv, its exit status comes back, and a cancelled caller
takes its job with it. Jobs here are small scripts that look like Snakemake's (a ``snakemake``
global); the pipeline's own jobs go through the server in every tests/shared_run.py run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perflab.core import forkserver

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("fork")
    sock = base / "s.sock"
    proc = forkserver.start(sock, base / "server.log", "cpu", ("perflab.pipeline.budget",))
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert proc.poll() is None, (base / "server.log").read_text()
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.1)
    yield sock, proc
    forkserver.stop(proc, sock)


def test_a_ready_server_says_what_its_probe_fork_took_to_start_the_device(server, tmp_path):
    """The budget's start-up of a forked job reads it (perflab.pipeline.budget.start_s); no
    server, or one not ready: None, not a guess."""
    sock, _ = server
    took = forkserver.probe_s(sock)
    assert took is not None and 0 < took < 60
    log = (sock.parent / "server.log").read_text()
    assert "a probe fork imported perflab.pipeline.budget" in log, log
    assert forkserver.probe_s(tmp_path / "none.sock") is None


def _job(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        snakemake = object()  # what Snakemake's preamble defines
        from perflab.core.forkserver import delegate
        delegate(globals())
    """) + textwrap.dedent(body))
    return script


def _launch(script: Path, sock: Path | None, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOB_MARK": "42"}
    env.pop(forkserver.ENV_CHILD, None)
    if sock is None:
        env.pop(forkserver.ENV_SOCKET, None)
    else:
        env[forkserver.ENV_SOCKET] = str(sock)
    return subprocess.Popen([sys.executable, str(script), "an-arg"], cwd=script.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_a_job_runs_in_a_new_process_with_the_callers_stdio_env_cwd_and_argv(server, tmp_path):
    sock, proc = server
    script = _job(tmp_path, """
        import torch
        print("pid", os.getpid(), "ppid", os.getppid(), "forked", os.environ.get("PERFLAB_FORKED_JOB"))
        print("mark", os.environ["JOB_MARK"], "cwd", os.getcwd(), "argv", sys.argv[1:])
        print("cuda initialised", torch.cuda.is_initialized())
        print("to stderr", file=sys.stderr)
    """)
    p = _launch(script, sock)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    fields = dict(zip(out.split()[::2], out.split()[1::2]))
    assert int(fields["pid"]) not in (p.pid, proc.pid)
    assert int(fields["ppid"]) not in (p.pid, proc.pid)  # a handler's child, not the server's
    assert fields["forked"] == "1"
    assert f"mark 42 cwd {tmp_path} argv ['an-arg']" in out
    assert "cuda initialised False" in out
    assert "to stderr" in err


def test_the_job_imports_perflab_from_its_own_path_not_the_servers(server, tmp_path):
    """A job of another checkout (its perflab first on its path) runs that checkout's code."""
    import shutil
    alt = tmp_path / "alt"
    shutil.copytree(ROOT / "perflab", alt / "perflab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = _job(tmp_path, "import perflab.pipeline.config\nprint(perflab.pipeline.config.__file__)\n")
    env = {**os.environ, "PYTHONPATH": str(alt), forkserver.ENV_SOCKET: str(server[0])}
    env.pop(forkserver.ENV_CHILD, None)
    out = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == str(alt / "perflab" / "pipeline" / "config.py")


def test_without_a_server_the_script_runs_in_its_own_interpreter(tmp_path):
    script = _job(tmp_path, 'print("forked", os.environ.get("PERFLAB_FORKED_JOB"), os.getpid())\n')
    p = _launch(script, None)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.split()[:2] == ["forked", "None"] and int(out.split()[2]) == p.pid


@pytest.mark.parametrize("body, code", [
    ("sys.exit(3)\n", 3),
    ("raise RuntimeError('injected')\n", 1),
    ("os.kill(os.getpid(), 9)\n", 128 + 9),
    ("pass\n", 0),
])
def test_the_jobs_exit_status_is_the_callers(server, tmp_path, body, code):
    p = _launch(_job(tmp_path, body), server[0])
    _, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    if code == 1:
        assert "RuntimeError: injected" in err


def test_atexit_handlers_run_as_in_a_fresh_interpreter(server, tmp_path):
    script = _job(tmp_path, """
        import atexit
        atexit.register(lambda: print("atexit ran", flush=True))
    """)
    p = _launch(script, server[0])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "atexit ran" in out, err


def test_a_job_with_a_thread_pool_exits_as_a_fresh_interpreter_would(server, tmp_path):
    """A live executor's worker threads are stopped by threading's exit hooks before the
    join (Inductor's compile pool is one): joining them first would wait forever."""
    script = _job(tmp_path, """
        from concurrent.futures import ThreadPoolExecutor
        sys.kept_pool = ThreadPoolExecutor(2)  # held for the process's life, as Inductor's
        print(sys.kept_pool.submit(lambda: 6 * 7).result(), flush=True)
    """)
    p = _launch(script, server[0])
    try:
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()  # a hung job goes with its caller (test_a_cancelled_caller...)
    assert p.returncode == 0 and out.strip() == "42", err


def test_a_cancelled_caller_takes_its_job_with_it(server, tmp_path):
    pidfile = tmp_path / "job.pid"
    script = _job(tmp_path, f"""
        import time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(120)
    """)
    p = _launch(script, server[0])
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    job = int(pidfile.read_text())
    p.send_signal(signal.SIGTERM)  # what Snakemake does to a job it cancels
    p.wait(10)
    deadline = time.monotonic() + forkserver.KILL_GRACE_S + 10
    while _alive(job):
        assert time.monotonic() < deadline, "the job outlived its caller"
        time.sleep(0.05)


def test_the_job_takes_its_thread_count_from_its_environment(server, tmp_path):
    script = _job(tmp_path, "import torch\nprint(torch.get_num_threads())\n")
    for n in ("1", "2"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": n,
               forkserver.ENV_SOCKET: str(server[0])}
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout
        assert out.strip() == n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its reaper is gone for our purpose
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:  # it exited (and was reaped) between the kill and the read
        return False
    return state != "Z"


def test_a_preloaded_library_is_in_every_later_job_one_that_imports_perflab_is_not(
        tmp_path, monkeypatch):
    """perflab's pre-flight hands the server the libraries the workload's build imported
    (transformers, timm, ...): a job forked after it starts with them imported, and its
    provenance names them; a library that imports perflab is taken out again (a job must
    import perflab fresh)."""
    libs = tmp_path / "libs"
    for name, body in (("fakelib_pl", "VALUE = 7\n"),
                       ("usesperflab_pl", "import perflab.kit.sampling\n")):
        (libs / name).mkdir(parents=True)
        (libs / name / "__init__.py").write_text(body)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(libs)]))
    sock = tmp_path / "p.sock"
    proc = forkserver.start(sock, tmp_path / "server.log", "cpu")
    try:
        # asked while the server may still be starting: it takes the list before any job
        forkserver.preload(sock, ["fakelib_pl", "usesperflab_pl", "no_such_lib_pl"])
        assert forkserver.wait_ready(sock, 120) < 120 and proc.poll() is None
        script = _job(tmp_path, """
            print("libs", "fakelib_pl" in sys.modules, "usesperflab_pl" in sys.modules,
                  os.environ.get("PERFLAB_FORK_PRELOADED"))
            from perflab.core.forkserver import process_start
            print(process_start())
        """)
        out, err = _launch(script, sock).communicate(timeout=60)
        assert "libs True False fakelib_pl" in out, (out, err)
        assert "the workload's libraries: fakelib_pl" in out
        log = (tmp_path / "server.log").read_text()
        assert "left out usesperflab_pl (they import perflab)" in log, log
    finally:
        forkserver.stop(proc, sock)
    assert not list(tmp_path.glob("p.sock*"))  # the list went with the server


def test_the_preflight_names_the_libraries_its_build_imported_not_the_users_code(
        tmp_path, monkeypatch):
    """Modules imported from outside the working directory, leaves only; never the user's
    own code (under the working directory, or the target's package) nor perflab's."""
    from perflab.pipeline import preflight

    outside, inside = tmp_path / "site", tmp_path / "work"
    (outside / "libpkg_pl").mkdir(parents=True)
    (outside / "libpkg_pl" / "__init__.py").write_text("")
    (outside / "libpkg_pl" / "core.py").write_text("")
    (outside / "targetpkg_pl").mkdir()
    (outside / "targetpkg_pl" / "__init__.py").write_text("")
    inside.mkdir()
    (inside / "mycode_pl.py").write_text("")
    monkeypatch.chdir(inside)
    monkeypatch.syspath_prepend(str(outside))
    monkeypatch.syspath_prepend(str(inside))
    before = set(sys.modules)
    import libpkg_pl.core  # noqa: F401
    import mycode_pl  # noqa: F401
    import targetpkg_pl  # noqa: F401
    try:
        assert preflight.library_modules(before, "targetpkg_pl.models:make") == ["libpkg_pl.core"]
    finally:
        for m in ("libpkg_pl", "libpkg_pl.core", "mycode_pl", "targetpkg_pl"):
            sys.modules.pop(m, None)
