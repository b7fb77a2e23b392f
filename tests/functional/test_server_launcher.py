"""The server launcher with real child processes: flags, capture folder, logs, stop escalation."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from kldtui.errors import BadInput, StageFailed
from kldtui.events import Event, LogLine, Notice
from kldtui.stages.serve import ServerProcess, _group_members, ensure_capture_flags, prepare_capture_dir
from tests.proc_utils import pid_dead

STUBBORN = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('grandchild up', flush=True); "
        "time.sleep(600)"])
    print("capture dir", os.environ["VLLM_KLD_CAPTURE_DIR"], flush=True)
    print("argv", " ".join(sys.argv[1:]), flush=True)
    print("child", child.pid, flush=True)
    time.sleep(600)
""")

EARLY_EXIT = textwrap.dedent("""
    import sys
    print("loading model", flush=True)
    print("Loading weights:  10%\\rLoading weights: 100%\\r", flush=True)
    print("ERROR: CUDA out of memory while loading weights", flush=True)
    sys.exit(3)
""")


# vLLM's start as the batch output showed it: its WARNING lines (from the API server and, on the
# inherited stderr, from its engine core child) and an ERROR line, among INFO lines
VLLM_LIKE = textwrap.dedent("""
    import subprocess, sys, time
    print("INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.11.0", flush=True)
    print("WARNING 05-01 10:00:01 [config.py:1590] Casting torch.bfloat16 to torch.float32.", flush=True)
    subprocess.run([sys.executable, "-c", "import sys; print('(EngineCore_DP0 pid=7) WARNING 05-01 "
                    "10:00:02 [cpu.py:120] Pin memory is off.', file=sys.stderr, flush=True)"])
    print("ERROR 05-01 10:00:03 [serving.py:88] request cmpl-1 was aborted", flush=True)
    print("serving", flush=True)
    time.sleep(600)
""")


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False



def test_flags_are_added_and_contradictions_refused() -> None:
    argv, notes = ensure_capture_flags(["python", "-m", "vllm", "--port", "8000"])
    assert argv[-5:] == ["--no-enable-prefix-caching", "--max-num-seqs", "1", "--host", "127.0.0.1"]
    assert len(notes) == 3 and any("prefix" in n for n in notes)
    same, notes = ensure_capture_flags(argv)
    assert same == argv and notes == []
    with pytest.raises(BadInput, match="--max-num-seqs 4"):
        ensure_capture_flags(["vllm", "--max-num-seqs", "4"])
    with pytest.raises(BadInput, match="enable-prefix-caching"):
        ensure_capture_flags(["vllm", "--enable-prefix-caching"])
    with pytest.raises(TypeError):
        ServerProcess("python -m vllm", capture_dir="x", served_model_name="m")  # type: ignore[arg-type]


def test_capture_dir_must_be_fresh(tmp_path: Path) -> None:
    prepare_capture_dir(tmp_path / "new")
    (tmp_path / "used" / "cmpl-old").mkdir(parents=True)
    with pytest.raises(BadInput, match="not empty"):
        prepare_capture_dir(tmp_path / "used")
    server = ServerProcess([sys.executable, "-c", "pass"], capture_dir=tmp_path / "used",
                           served_model_name="m")
    with pytest.raises(BadInput, match="not empty"):
        server.start()
    assert server.proc is None


def test_stubborn_server_is_escalated_to_sigkill_with_its_whole_group(tmp_path: Path) -> None:
    events: list[Event] = []
    server = ServerProcess([sys.executable, "-c", STUBBORN], capture_dir=tmp_path / "cap",
                           served_model_name="m", emit=events.append, log_path=tmp_path / "server.log",
                           stop_timeouts=(0.5, 0.5, 10.0))
    server.start()
    assert _wait_for(lambda: any(line.startswith("child ") for line in server.last_lines(20))), \
        server.last_lines()
    grandchild = int(next(x for x in server.last_lines(20) if x.startswith("child ")).split()[1])
    assert _wait_for(lambda: "grandchild up" in server.last_lines(20))
    pgid = server.pid
    assert server.alive() is None
    assert set(_group_members(pgid)) >= {pgid, grandchild}
    lines = server.last_lines(20)
    assert f"capture dir {(tmp_path / 'cap').resolve()}" in lines
    assert any("--no-enable-prefix-caching --max-num-seqs 1 --host 127.0.0.1" in x for x in lines)
    notices = [e for e in events if isinstance(e, Notice)]
    assert len(notices) == 3

    code = server.stop()
    assert code == -9  # SIGINT and SIGTERM ignored: only SIGKILL ended it
    assert _group_members(pgid) == []
    assert pid_dead(grandchild)
    warnings = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert any("SIGTERM" in w for w in warnings) and any("SIGKILL" in w for w in warnings)
    logged = [e.line for e in events if isinstance(e, LogLine)]
    assert "grandchild up" in logged
    assert "grandchild up" in (tmp_path / "server.log").read_text()
    assert server.stop() == -9  # idempotent


def test_polite_server_stops_on_sigint(tmp_path: Path) -> None:
    code = ("import time\ntry:\n    print('up', flush=True)\n    time.sleep(600)\n"
            "except KeyboardInterrupt:\n    print('bye')\n")
    events: list[Event] = []
    server = ServerProcess([sys.executable, "-c", code], capture_dir=tmp_path / "cap",
                           served_model_name="m", emit=events.append, stop_timeouts=(20.0, 5.0, 5.0))
    with server:
        assert _wait_for(lambda: "up" in server.last_lines())
        assert server.alive() is None
    assert server.returncode == 0
    assert "bye" in server.last_lines()
    assert not any(isinstance(e, Notice) and e.level == "warning" for e in events)


def test_server_stops_on_sigint_when_kldtui_runs_with_sigint_ignored(tmp_path: Path) -> None:
    """``nohup kldtui ... &`` from a script: kldtui's SIGINT is ignored, and the server it starts
    would inherit that through exec and sit out the SIGINT it is stopped with."""
    import signal

    code = ("import time\ntry:\n    print('up', flush=True)\n    time.sleep(600)\n"
            "except KeyboardInterrupt:\n    print('bye')\n")
    events: list[Event] = []
    server = ServerProcess([sys.executable, "-c", code], capture_dir=tmp_path / "cap",
                           served_model_name="m", emit=events.append, stop_timeouts=(20.0, 5.0, 5.0))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with server:
            assert _wait_for(lambda: "up" in server.last_lines())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert server.returncode == 0 and "bye" in server.last_lines()
    assert not any(isinstance(e, Notice) and e.level == "warning" for e in events)


def test_early_exit_is_reported_with_last_log_lines(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", EARLY_EXIT, "--port", "0"], capture_dir=tmp_path / "c",
                           served_model_name="m")
    with server, pytest.raises(StageFailed) as info:
        server.wait_ready(timeout=60)
    message = str(info.value)
    assert "exit code 3" in message
    assert "CUDA out of memory" in message and "loading model" in message
    assert "| Loading weights: 100% |" in message and "10%" not in message
    assert "\n" not in message
    assert server.alive() is not None


def test_missing_interpreter_is_bad_input(tmp_path: Path) -> None:
    server = ServerProcess([str(tmp_path / "no-python"), "-m", "vllm"], capture_dir=tmp_path / "c",
                           served_model_name="m")
    with pytest.raises(BadInput, match="not found"):
        server.start()


DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import kldtui.stages.serve as serve
    serve.KEEPER_TERM_WAIT_S = 0.5
    server = serve.ServerProcess([sys.executable, "-c", sys.argv[1]], capture_dir=Path(sys.argv[2]),
                                 served_model_name="m")
    server.start()
    # both up, and the grandchild past its one print (a print into the pipe of a dead kldtui would
    # end it by SIGPIPE, which is not what is tested here)
    while not any(line.startswith("child ") for line in server.last_lines(20)) \
            or "grandchild up" not in server.last_lines(20):
        time.sleep(0.05)
    print(server.pid, next(x for x in server.last_lines(20) if x.startswith("child ")).split()[1], flush=True)
    time.sleep(600)
""")


def test_a_killed_kldtui_takes_the_servers_whole_group_with_it(tmp_path: Path) -> None:
    """kill -9 of kldtui: the death signal takes the server's main process only; vLLM's engine core
    and workers (its process group) lived on, holding their memory (and a GPU host's GPUs) until
    someone found them. The keeper takes the group: SIGTERM, then SIGKILL (this one ignores SIGTERM)."""
    import os
    import signal
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, STUBBORN, str(tmp_path / "cap")],
                              stdout=subprocess.PIPE, text=True, env=env)
    assert driver.stdout is not None
    server, grandchild = (int(x) for x in driver.stdout.readline().split())
    assert not pid_dead(grandchild)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    driver.stdout.close()
    assert _wait_for(lambda: pid_dead(server) and pid_dead(grandchild), timeout=30), \
        f"left running: {_group_members(server)}"
    assert _group_members(server) == []


def test_a_stopped_server_leaves_no_keeper(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"],
                           capture_dir=tmp_path / "cap", served_model_name="m")
    server.start()
    keeper = server._keeper
    assert keeper is not None and keeper.poll() is None
    server.stop()
    assert keeper.poll() == 0  # told the server was stopped: it ends, touching nothing


@pytest.mark.parametrize("server_log", [False, True], ids=["batch", "batch --server-log"])
def test_batch_output_keeps_the_servers_warnings_in_its_log(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                           server_log: bool) -> None:
    """kldtui run --batch printed vLLM's WARNING (and ERROR) lines among its own. They go to the
    server log, whole; the batch lines say once where, and --server-log prints them all; nothing
    of the server's reaches kldtui's own stdout or stderr (its child's stderr included)."""
    import io

    from kldtui.cli.batch_reporter import BatchReporter

    out = io.StringIO()
    reporter = BatchReporter(out, server_log=server_log)
    script = tmp_path / "fake_vllm.py"  # a file: the "started" line names the argv
    script.write_text(VLLM_LIKE)
    server = ServerProcess([sys.executable, str(script)], capture_dir=tmp_path / "cap",
                           served_model_name="m", emit=reporter, log_path=tmp_path / "server.log",
                           stop_timeouts=(5.0, 5.0, 5.0))
    with server:
        assert _wait_for(lambda: "serving" in server.last_lines()), server.last_lines()
    said = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the time stamp
    logged = (tmp_path / "server.log").read_text()
    server_lines = ["WARNING 05-01 10:00:01 [config.py:1590] Casting torch.bfloat16 to torch.float32.",
                    "(EngineCore_DP0 pid=7) WARNING 05-01 10:00:02 [cpu.py:120] Pin memory is off.",
                    "ERROR 05-01 10:00:03 [serving.py:88] request cmpl-1 was aborted"]
    for line in server_lines:
        assert line in logged
    if server_log:
        assert all(f"server: {line}" in said for line in server_lines), said
    else:
        assert not any("WARNING" in line or "ERROR" in line for line in said), said
        assert said.count(f"server: note: the server's warnings and errors go to {tmp_path / 'server.log'}, "
                          "not here; --server-log prints every server line") == 1, said
    # kldtui's own line about the server is kldtui's: printed (the note named the log already)
    stops = [line for line in said if line.startswith("server: server stopped (done); exit code ")]
    assert len(stops) == 1 and "server.log" not in stops[0], said
    assert f"kldtui: {stops[0].removeprefix('server: ')}" in logged.splitlines()
    stdout, stderr = capfd.readouterr()
    assert "WARNING" not in stdout + stderr and "ERROR" not in stdout + stderr, (stdout, stderr)


DIES = textwrap.dedent("""
    import sys, time
    print("INFO loading model", flush=True)
    time.sleep(0.5)
    sys.exit(3)
""")


def test_batch_output_says_why_a_server_that_died_stopped(tmp_path: Path) -> None:
    """A server that died: kldtui's "server stopped (error); exit code 3" was held back with the
    server's output in --batch (printed only with --server-log) and kept in no file. It is printed,
    naming the log, and the log keeps it after the server's own lines."""
    import io

    from kldtui.cli.batch_reporter import BatchReporter

    out = io.StringIO()
    log = tmp_path / "server.log"
    script = tmp_path / "dies.py"  # a file: the "started" line names the argv
    script.write_text(DIES)
    server = ServerProcess([sys.executable, str(script)], capture_dir=tmp_path / "cap", served_model_name="m",
                           emit=BatchReporter(out), log_path=log)
    server.start()
    assert _wait_for(lambda: server.alive() is not None)
    assert server.stop(reason="error") == 3  # what the pipeline does when a stage fails
    said = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert f"server: server stopped (error); exit code 3; the server's output is in {log}" in said, said
    assert not any("loading model" in line for line in said), said
    assert log.read_text().splitlines()[-2:] == ["INFO loading model",
                                                 "kldtui: server stopped (error); exit code 3"]


def test_batch_note_names_the_log_of_the_server_that_warned(tmp_path: Path) -> None:
    """The note said "its server.log in the work folder" whichever server warned; the reference
    server's log is reference-run/server.log. Each log file is named the first time a line kept in
    it is held back: the reference server's, then a campaign candidate's."""
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.servers.base import ServerPlan
    from kldtui.stages.reference_capture import as_reference_stage
    from kldtui.stages.serve import start_serve
    from kldtui.workspace import Workspace

    out = io.StringIO()
    reporter = BatchReporter(out)
    script = tmp_path / "fake_vllm.py"
    script.write_text(VLLM_LIKE)
    plan = ServerPlan("embedded", "m", argv=(sys.executable, str(script)))
    work = Workspace(suite_dir=tmp_path / "suite", reference_dir=tmp_path / "suite" / "ref",
                     capture_root=tmp_path / "work" / "capture", workdir=tmp_path / "work")
    for ws, emit in ((work.reference_capture(), as_reference_stage(reporter)),
                     (work.for_candidate("q4"), reporter)):
        session = start_serve(ws, emit, plan)
        server = session.process
        assert server is not None
        try:
            assert _wait_for(lambda s=server: "serving" in s.last_lines()), server.last_lines()
        finally:
            session.stop("test done")
    notes = [line.split(" ", 1)[1] for line in out.getvalue().splitlines() if "note: the server's" in line]
    assert notes == [f"server: note: the server's warnings and errors go to {log}, not here; --server-log "
                     "prints every server line"
                     for log in (tmp_path / "work" / "reference-run" / "server.log",
                                 tmp_path / "work" / "server.log")], out.getvalue()
    assert "WARNING" in (tmp_path / "work" / "reference-run" / "server.log").read_text()
    assert "WARNING" in (tmp_path / "work" / "server.log").read_text()
