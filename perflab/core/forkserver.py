"""One fork server per local Snakemake run: experiment jobs start without importing torch.

Every experiment is a fresh process, so that allocator state and compile caches never leak
from one experiment into the next. A fresh interpreter pays for that before it measures
anything: importing torch took 3.3 s on the H200 (C00's process floor), about two minutes of a
run of some thirty-five jobs, and torch._dynamo (which the first optimizer imports) about 2 s
more. The server imports those, numpy, pandas, scipy and Snakemake's job object once, and,
once perflab's pre-flight has built the workload, the installed libraries that build imported
(:func:`preload`: transformers, timm, ...), and nothing else: no device touched, no tensor made,
no model built, nothing compiled, no perflab module but itself (which a job drops). Each job is then a fork of it: a new process with its own
address space, in which the CUDA context, the caching allocator, cuBLAS/cuDNN handles,
Dynamo's caches, Inductor's state and every perflab module are created for the first time, as in
a fresh interpreter. What a job inherits is the imported code of those libraries.

How a job gets there: Snakemake runs the experiment's script as usual; the script's first
statement, ``delegate(globals())``, finds the server's socket (``PERFLAB_FORK_SERVER``, set
by perflab's command before its pre-flight, so the server's imports overlap it, or else by
the Snakefile before the first job), hands over the script file Snakemake wrote, its argv,
cwd, environment and stdin/stdout/stderr, and waits. A handler process forks the job, relays
its exit status (a signal as 128 + signal number, as a shell reports it) and kills the job's
process group if the waiting script is killed (Snakemake cancelling the job). Where no server
answers — by hand, under SLURM (a job runs in its own allocation), with ``fork_server:
false`` — the script runs in its own fresh interpreter, as before.

Before it serves, the server forks a probe that initialises the device the run measures
(CUDA when available) and runs one operation; if the probe fails, it does not serve and every
job starts a fresh interpreter.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

#: the environment variable naming the server's socket, for the jobs of one run
ENV_SOCKET = "PERFLAB_FORK_SERVER"
#: set in a job the server forked: its script must run, not delegate again
ENV_CHILD = "PERFLAB_FORKED_JOB"
#: what the server imports before it forks: libraries only, never perflab (whose modules a
#: job must import fresh) and never anything that touches a device
PRELOAD = ("torch", "torch._dynamo", "numpy", "pandas", "scipy.stats",
           "snakemake.iocontainers", "snakemake.logging")
#: set in a forked job: the libraries the server imported for this run's workload
#: (:func:`preload`), comma-separated top-level names
ENV_PRELOADED = "PERFLAB_FORK_PRELOADED"
#: beside the socket, the libraries the server is to import (:func:`preload`)
PRELOAD_SUFFIX = ".preload.json"
#: beside the socket, the ready server's probe time (:func:`probe_s`)
PROBE_SUFFIX = ".probe.json"
#: seconds the server waits for a connected caller's request before it drops it
RECEIVE_TIMEOUT_S = 10.0
#: seconds a job killed by its caller gets to exit before SIGKILL
KILL_GRACE_S = 5.0
_HEADER = struct.Struct("!I")


def forked() -> bool:
    """True in a job the server forked."""
    return os.environ.get(ENV_CHILD) == "1"


def process_start() -> str:
    """How this job's process started, for its provenance."""
    if forked():
        extra = os.environ.get(ENV_PRELOADED)
        return ("forked from the run's fork server (imported: " + ", ".join(PRELOAD)
                + (f"; the workload's libraries: {extra}" if extra else "") + ")")
    return "a fresh interpreter"


# ------------------------------------------------------------------ the job's side


def ended(returncode: int) -> str:
    """How a process ended, in words: ``exit status 3``, or ``killed (signal 9, SIGKILL)`` for
    a negative return code (or 128 + N, as a shell and Snakemake report a signal)."""
    sig = -returncode if returncode < 0 else (returncode - 128 if 128 < returncode < 160 else 0)
    if not sig:
        return f"exit status {returncode}"
    try:
        name = f", {signal.Signals(sig).name}"
    except ValueError:
        name = ""
    return f"killed (signal {sig}{name})"


def _say_killed(script_globals: dict, code: int) -> None:
    """A job killed by a signal says so in its log (its last line, which the partial report
    and the verdict quote) and on stderr: Snakemake itself reports only "exit status 137"."""
    line = f"perflab: the job was {ended(code)}; no result written"
    print(line, file=sys.stderr, flush=True)
    try:
        with open(script_globals["snakemake"].log[0], "a") as fh:
            fh.write(line + "\n")
    except (AttributeError, IndexError, KeyError, OSError, TypeError):
        pass


def delegate(script_globals: dict) -> None:
    """Run this Snakemake job in a child of the run's fork server and exit with its status.

    Returns (and the script goes on in this interpreter) when there is no server to ask: not a
    Snakemake job, a job the server already forked, a SLURM job, or no socket.
    """
    if "snakemake" not in script_globals or forked() or "SLURM_JOB_ID" in os.environ:
        return
    path = os.environ.get(ENV_SOCKET)
    if not path or not os.path.exists(path):
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return
    request = {
        "file": script_globals.get("__real_file__", script_globals.get("__file__")),
        "argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "path": sys.path,
    }
    sys.stdout.flush()
    sys.stderr.flush()
    payload = json.dumps(request).encode()
    socket.send_fds(conn, [_HEADER.pack(len(payload)) + payload], [0, 1, 2])
    reply = _recv_all(conn)
    try:
        code = int(json.loads(reply)["exit"])
    except (ValueError, KeyError, TypeError):
        print("perflab: the fork server lost this job (it exited mid-job); rerun it",
              file=sys.stderr, flush=True)
        code = 1
    if code < 0:
        _say_killed(script_globals, code)
    os._exit(128 - code if code < 0 else code)


def _recv_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------ the server's side


def start(socket_path: str | Path, log_path: str | Path, device: str,
          job_imports: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start the server for this process's run (it exits when this process does).
    ``job_imports``: the modules a job imports first (never preloaded: a job imports them
    fresh), which its probe fork imports so that its time is a job's start (the caller
    names them: this floor knows nothing of the pipeline's jobs)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")
    return subprocess.Popen(
        [sys.executable, "-m", "perflab.core.forkserver", str(socket_path), str(os.getpid()), device,
         *job_imports],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def preload(socket_path: str | Path, names: list[str]) -> None:
    """Have the run's server import ``names`` (the workload's libraries, as the pre-flight
    found them: perflab.pipeline.preflight.library_modules) before it forks the next job,
    so that a job's start is its build and first step, not the libraries' import too (a
    GPT-2 from transformers: 11-14 s before each job measured on an H100's host, where the
    pre-flight's second check, its imports done, took 3.4 s). Written beside the socket, for
    a server that is ready or still starting: it takes the file before it accepts a job
    (:func:`_take_preload`). The caller does not wait."""
    path = Path(f"{socket_path}{PRELOAD_SUFFIX}")
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(list(names)))
    os.replace(tmp, path)


def wait_ready(socket_path: str | Path, timeout_s: float) -> float:
    """Wait until the server's socket is there (it is ready) or ``timeout_s`` has passed;
    the seconds waited."""
    t0 = time.monotonic()
    while not Path(socket_path).exists() and time.monotonic() - t0 < timeout_s:
        time.sleep(0.05)
    return time.monotonic() - t0


def probe_s(socket_path: str | Path) -> float | None:
    """Seconds the ready server's probe fork took (:func:`_probe`: what a job's fork pays
    before it builds its workload), or None while the server is not ready."""
    try:
        return float(json.loads(Path(f"{socket_path}{PROBE_SUFFIX}").read_text())["probe_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop(proc: subprocess.Popen | None, socket_path: str | Path) -> None:
    """Stop the server and remove its socket (jobs that start later run a fresh interpreter)."""
    Path(socket_path).unlink(missing_ok=True)
    Path(f"{socket_path}{PROBE_SUFFIX}").unlink(missing_ok=True)
    Path(f"{socket_path}{PRELOAD_SUFFIX}").unlink(missing_ok=True)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()


def _probe(device: str, job_imports: tuple[str, ...] = ()) -> str | None:
    """Fork a child that starts as a job does before its workload — ``job_imports`` imported
    fresh, the device initialised, a matmul and its backward (the math libraries' handles) —
    and checks one result; None if it worked, else why. Its time is what a job's fork pays
    before it builds the workload (:func:`probe_s`)."""
    pid = os.fork()
    if pid == 0:
        try:
            import torch
            for name in job_imports:  # a server serves even where one cannot be imported
                try:
                    importlib.import_module(name)
                except Exception:
                    pass
            dev = "cuda" if device.startswith("cuda") or (
                device == "auto" and torch.cuda.is_available()) else "cpu"
            x = torch.ones(64, device=dev)
            assert float((x * 2).sum()) == 128.0
            w = torch.ones(64, 64, device=dev, requires_grad=True)
            (w @ w).sum().backward()
            assert float(w.grad[0, 0]) == 128.0
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"the probe job exited with {code}"


def serve(socket_path: str, parent_pid: int, device: str,
          job_imports: tuple[str, ...] = ()) -> int:
    """Preload, probe, then fork a handler per connection until the run's process is gone."""
    t0 = time.perf_counter()
    # an import that asks whether CUDA is there asks NVML, which a fork survives, not the
    # CUDA runtime, which it does not (the probe below checks the result)
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    for name in PRELOAD:
        importlib.import_module(name)
    import torch
    if torch.cuda.is_initialized():  # a fork of an initialised CUDA context is unusable
        print("perflab fork server: CUDA was initialised by an import; not serving", flush=True)
        return 1
    t_probe = time.perf_counter()
    why = _probe(device, job_imports)
    probe = time.perf_counter() - t_probe
    if why:
        print(f"perflab fork server: {why}; not serving (jobs start fresh interpreters)",
              flush=True)
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{socket_path}.{os.getpid()}.tmp"
    listener.bind(tmp)
    listener.listen(16)
    Path(f"{socket_path}{PROBE_SUFFIX}").write_text(json.dumps({"probe_s": round(probe, 3)}))
    os.replace(tmp, socket_path)  # the socket appears only once the server is ready
    print(f"perflab fork server: ready in {time.perf_counter() - t0:.1f} s "
          f"(preloaded {', '.join(PRELOAD)}; a probe fork imported "
          f"{', '.join(job_imports) or 'no job modules'}, started the device and ran a matmul "
          f"and its backward in {probe:.2f} s)",
          flush=True)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while os.getppid() == parent_pid and os.path.exists(socket_path):
            if not _take_preload(socket_path):
                return 1  # CUDA initialised by an import: no more forks
            ready, _, _ = select.select([listener], [], [], 1.0)
            if not ready:
                continue
            if not _take_preload(socket_path):  # written while a job was already waiting
                return 1
            conn, _ = listener.accept()
            conn.settimeout(RECEIVE_TIMEOUT_S)  # a caller that connects and says nothing
            try:
                request, fds = _receive(conn)
                conn.settimeout(None)
            except (OSError, ValueError, struct.error):
                conn.close()
                continue
            if os.fork() == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os._exit(_handle(conn, request, fds))
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        listener.close()
        Path(socket_path).unlink(missing_ok=True)
    return 0


#: the top-level names of the libraries :func:`_preload` imported (a job's provenance)
_PRELOADED: list[str] = []


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A job's request and the descriptors (its stdio) that came with it."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    (size,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("the request ended early")
        body += more
    return json.loads(body), fds


def _take_preload(socket_path: str) -> bool:
    """Import the libraries :func:`preload` listed beside the socket, once; False where that
    initialised CUDA (the server must stop forking)."""
    path = Path(f"{socket_path}{PRELOAD_SUFFIX}")
    try:
        names = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    path.unlink(missing_ok=True)
    return _preload([str(n) for n in names]) if isinstance(names, list) else True


def _preload(names: list[str]) -> bool:
    """Import the workload's libraries here, package by package, so each job forked after
    inherits them. A package whose import brings in perflab (a user's library built on it:
    a job must import perflab fresh) is taken out again; one that fails is skipped. False
    (stop serving) if an import initialised CUDA, which a fork cannot use."""
    import torch

    t0 = time.perf_counter()
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.split(".")[0], []).append(name)
    done, left_out = [], []
    for top, members in groups.items():
        before = set(sys.modules)
        for name in members:
            try:
                importlib.import_module(name)
            except Exception:
                pass
        added = set(sys.modules) - before
        if any(m == "perflab" or m.startswith("perflab.") for m in added):
            for m in added:
                del sys.modules[m]
            left_out.append(top)
        elif top in sys.modules:
            done.append(top)
    if torch.cuda.is_initialized():
        print(f"perflab fork server: importing {', '.join(done)} initialised CUDA; not "
              "serving further jobs (they start fresh interpreters)", flush=True)
        return False
    # the provenance names the third-party packages (the standard library's and private
    # modules are imported too, unnamed)
    _PRELOADED.extend(t for t in done if t not in _PRELOADED and not t.startswith("_")
                      and "__" not in t and t not in sys.stdlib_module_names)
    print(f"perflab fork server: imported the workload's libraries "
          f"({', '.join(_PRELOADED) or 'none named'}; {len(names)} modules) in "
          f"{time.perf_counter() - t0:.1f} s"
          + (f"; left out {', '.join(left_out)} (they import perflab)" if left_out else ""),
          flush=True)
    return True


def _handle(conn: socket.socket, request: dict, fds: list[int]) -> int:
    """One job: fork it, wait for it (or for its caller to go), relay its status."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        _become_job(request, fds)
    try:
        os.setpgid(pid, pid)  # also here: a kill must find the group even before the job ran
    except OSError:
        pass  # the job got there first (or has already exited)
    for fd in fds:
        os.close(fd)
    code = _wait(pid, conn)
    try:
        conn.sendall(json.dumps({"exit": code}).encode())
    except OSError:
        pass  # the caller is gone; nobody to tell
    return 0


def _wait(pid: int, conn: socket.socket) -> int:
    """The job's exit code (negative: killed by that signal); kills it if the caller goes."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        ready, _, _ = select.select([conn], [], [], 0.05)
        if ready and not conn.recv(1):  # EOF: Snakemake cancelled the job, so it goes too
            _kill_group(pid)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _kill_group(pid: int) -> None:
    """SIGTERM to the job's process group, SIGKILL after the grace period (the job is left
    unreaped for the caller's waitpid)."""
    try:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                break
            time.sleep(0.05)
        os.killpg(pid, signal.SIGKILL)  # the job if it held on, the rest of its group if not
    except (ProcessLookupError, ChildProcessError, PermissionError):
        pass


def _become_job(request: dict, fds: list[int]) -> None:
    """In the forked child: take the caller's stdio, cwd, environment and argv; run the script."""
    code = 1
    try:
        os.setpgid(0, 0)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[ENV_CHILD] = "1"
        if _PRELOADED:
            os.environ[ENV_PRELOADED] = ",".join(_PRELOADED)
        sys.argv = list(request["argv"])
        sys.path[:] = request["path"]
        # the server itself is a perflab module: the job imports perflab afresh, from its own
        # path (a checkout other than the server's, say), as a fresh interpreter would
        for name in [m for m in sys.modules if m == "perflab" or m.startswith("perflab.")]:
            del sys.modules[name]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _threads_from_environment()
        import runpy
        runpy.run_path(request["file"], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        _finish_like_an_interpreter()
        os._exit(code)


def _finish_like_an_interpreter() -> None:
    """What a fresh interpreter does at exit (join threads, atexit handlers such as Inductor's
    compile workers' shutdown, flush), without unwinding into the server's frames."""
    import atexit
    import threading
    try:
        # Python's own finalisation order: threading's exit hooks (which stop executors such
        # as Inductor's compile pool), then the join of non-daemon threads, then atexit
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _threads_from_environment() -> None:
    """The intra-op thread count a fresh interpreter would take from this job's environment:
    OpenMP read the server's environment when torch was imported, not the job's."""
    import torch
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            torch.set_num_threads(int(value))
            return


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], tuple(sys.argv[4:])))
