"""The headless reporter: plain lines (throttled, no cursor movement), JSONL, exit codes."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from kldtui.cli.batch_reporter import BatchReporter, run_headless
from kldtui.errors import BadInput, StageFailed
from kldtui.events import (
    LogLine,
    Notice,
    Progress,
    ResultReady,
    StageFinished,
    StageStarted,
    WindowState,
)
from kldtui.formats.report_model import as_report
from tests.fixtures_decide import make_report


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_are_throttled_per_task_and_keep_the_final_one() -> None:
    out = io.StringIO()
    clock = FakeClock()
    rep = BatchReporter(out, interval=2.0, clock=clock)
    rep(StageStarted("capture", detail="4 windows"))
    for i in range(10):  # ten updates in its first second: no line yet
        clock.now = i * 0.1
        rep(Progress("capture", "tokens", i * 100, 1000, "tokens", rate=500.0, eta_s=90))
    clock.now = 2.5  # it has run 2 s: one line, then at most one every 2 s
    rep(Progress("capture", "tokens", 900, 1000, "tokens", rate=500.0, eta_s=90))
    rep(Progress("finalize", "window 000", 1024 * 1024, 4 * 1024 * 1024, "bytes"))
    clock.now = 3.0
    rep(Progress("capture", "tokens", 950, 1000, "tokens"))
    clock.now = 5.0
    rep(Progress("capture", "tokens", 1000, 1000, "tokens"))  # the final line of a task that printed
    rep(Progress("finalize", "window 000", 3 * 1024 * 1024, 4 * 1024 * 1024, "bytes",
                 rate=100 * 1024 * 1024))  # another task, timed on its own
    rep(WindowState("compare", 3, "compared", domain="code", figures={"kl": 0.0123, "top1": 0.98}))
    rep(WindowState("capture", 3, "capturing"))  # not worth a line
    rep(LogLine("server", "INFO: request done"))  # server info lines stay in server.log
    rep(LogLine("server", "ERROR: out of memory", level="error", log="/w/server.log"))
    rep(LogLine("server", "WARNING: slow", level="warning", log="/w/server.log"))  # noted once per log
    rep(LogLine("server", "ERROR: no log file keeps this", level="error"))  # held back, it would be lost
    rep(Notice("server", "added --max-num-seqs 1"))
    rep(StageFinished("capture", summary="4 captured"))
    lines = out.getvalue().splitlines()
    body = [line.split(" ", 1)[1] for line in lines]  # drop the time stamp
    assert body == [
        "capture: started - 4 windows",
        "capture: tokens 900/1000 (90%), 500 tokens/s, ETA 1m30s",
        "capture: tokens 1000/1000 (100%)",
        "finalize: window 000 3.00/4.00 MiB (75%), 100 MiB/s",
        "compare: window 003 (code) compared, mean KL 0.0123, top-1 98.00 %",
        "server: note: the server's warnings and errors go to /w/server.log, not here; "
        "--server-log prints every server line",
        "server: ERROR: no log file keeps this",
        "server: note: added --max-num-seqs 1",
        "capture: done - 4 captured",
    ]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_a_task_that_ends_within_the_interval_prints_no_progress_line() -> None:
    """A window's rows, a small file's hash: a 0 % and a 100 % line from the same second said
    nothing the window's or the stage's own line does not (the demo printed each LM head's
    'verify LM head ... (100%)' twice, and every context's rows)."""
    out = io.StringIO()
    clock = FakeClock()
    rep = BatchReporter(out, interval=2.0, clock=clock)
    rep(Progress("capture", "context 0001 rows", 0, 255, "rows"))
    clock.now = 0.3
    rep(Progress("capture", "context 0001 rows", 255, 255, "rows", rate=850.0, eta_s=0))
    rep(WindowState("capture", 1, "captured", domain="prose", name="context 0001", unit="context"))
    for _ in range(2):  # a task whose first event is its last, reported twice
        rep(Progress("compare", "verify LM head", 266_444, 266_444, "B", rate=2.6e7, eta_s=0))
    rep(Progress("compare", "weight.safetensors", 266_444, 266_444, "B"))
    body = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert body == ["capture: context 0001 (prose) captured"]


def test_a_long_task_keeps_its_final_line_and_an_ended_task_starts_afresh() -> None:
    """A task that ran the interval says how it ended (its rate over the whole task) even when
    no earlier line was due; the next run of a task of that name (the next candidate's capture)
    is timed from its own start, and a repeated final line is not printed again."""
    out = io.StringIO()
    clock = FakeClock()
    rep = BatchReporter(out, interval=2.0, clock=clock)
    rep(Progress("capture", "tokens", 0, 6144, "tokens"))
    clock.now = 4.0
    rep(Progress("capture", "tokens", 6144, 6144, "tokens", rate=1536.0))
    rep(Progress("capture", "tokens", 6144, 6144, "tokens", rate=1536.0))  # the same final, again
    clock.now = 10.0  # the next candidate: its first event is not printed at once
    rep(Progress("capture", "tokens", 256, 6144, "tokens"))
    clock.now = 11.0
    rep(Progress("capture", "tokens", 6144, 6144, "tokens"))
    # a context captured before its rows reached 100 %: its captured line ends its task, so the
    # next candidate's context 0006 is not timed from the first one's
    rep(Progress("capture", "context 0006", 0, 255, "rows"))
    rep(WindowState("capture", 6, "captured", domain="prose", name="context 0006", unit="context"))
    rep(Progress("compare", "verify sha256", 0, 100, "B"))
    rep(StageFinished("compare", summary="KL 0.01"))  # a finished stage ends its tasks too
    clock.now = 20.0
    rep(Progress("capture", "context 0006", 0, 255, "rows"))
    rep(Progress("capture", "context 0006", 255, 255, "rows"))
    rep(Progress("compare", "verify sha256", 100, 100, "B"))
    body = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert body == ["capture: tokens 6144/6144 (100%), 1536 tokens/s",
                    "capture: context 0006 (prose) captured", "compare: done - KL 0.01"]


def test_kldtui_own_server_lines_are_printed_and_name_the_log_once() -> None:
    """kldtui's own line about a server (LogLine.own) is never held back with the server's output;
    it names the server's log unless a note did; JSONL carries the flag."""
    out = io.StringIO()
    rep = BatchReporter(out)
    rep(LogLine("server", "server stopped (error); exit code 3", log="/w/server.log", own=True))
    rep(LogLine("server", "WARNING: slow", level="warning", log="/w/server.log"))  # named already
    rep(LogLine("server", "server stopped (done); exit code 0", log="/w/server.log", own=True))
    rep(LogLine("server", "server stopped (done); exit code 0", own=True))  # no file keeps it
    body = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert body == ["server: server stopped (error); exit code 3; the server's output is in /w/server.log",
                    "server: server stopped (done); exit code 0",
                    "server: server stopped (done); exit code 0"]
    jsonl = io.StringIO()
    BatchReporter(jsonl, jsonl=True)(LogLine("server", "server stopped (error); exit code 3", own=True))
    assert json.loads(jsonl.getvalue())["own"] is True


def test_jsonl_writes_every_event_as_one_object() -> None:
    out = io.StringIO()
    rep = BatchReporter(out, jsonl=True)
    events = [StageStarted("capture"), Progress("capture", "tokens", 1, 2, "tokens"),
              WindowState("compare", 0, "compared", figures={"kl": 0.5}),
              ResultReady("compare", path="/x/comparison.json", report=as_report(make_report([0.1])))]
    for e in events:
        rep(e)
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["event"] for d in docs] == ["StageStarted", "Progress", "WindowState", "ResultReady"]
    assert docs[2]["figures"] == {"kl": 0.5} and docs[2]["window_index"] == 0
    assert rep.result_path == "/x/comparison.json"
    assert docs[3]["report"] == make_report([0.1])  # the report's JSON document, as in the file


def test_the_compare_stage_line_carries_the_headline_interval_not_the_bootstrap() -> None:
    """The batch's line of a finished compare (plain and JSONL) gives the mean KL and interval every
    other view gives (the headline interval, docs/STATISTICS.md), the original comparator's bootstrap
    only beside it under its own names."""
    from types import SimpleNamespace

    from kldtui.formats.report_names import kl_headline_interval
    from kldtui.stages.compare.driver import Comparer

    doc = make_report([0.004 * (1 + (i % 5)) for i in range(12)])
    doc["kl_window_cluster_bootstrap"].update(estimate=0.5, ci95_low=0.4, ci95_high=0.6)
    report = as_report(doc)
    head = kl_headline_interval(report)
    assert head.ci95_low is not None and head.ci95_high is not None and head.ci95_high < 0.4
    events: list[object] = []
    comparer = Comparer.__new__(Comparer)  # publish() reads only the workspace's report path
    comparer.workspace = SimpleNamespace(report_path=None)  # type: ignore[assignment]
    comparer.emit = events.append
    comparer.publish(report)
    jsonl, plain = io.StringIO(), io.StringIO()
    for rep in (BatchReporter(jsonl, jsonl=True), BatchReporter(plain)):
        for event in events:
            rep(event)  # type: ignore[arg-type]
    (doc_line,) = [json.loads(line) for line in jsonl.getvalue().splitlines()]
    figures = doc_line["figures"]
    assert doc_line["event"] == "StageFinished" and doc_line["stage"] == "compare"
    assert (figures["kl_mean"], figures["ci95_low"], figures["ci95_high"]) == \
        (head.estimate, head.ci95_low, head.ci95_high)
    assert (figures["percentile_ci95_low"], figures["percentile_ci95_high"]) == (0.4, 0.6)
    assert figures["rests_on_too_few_windows"] is False
    (line,) = plain.getvalue().splitlines()
    assert (f"compare: done - KL(reference || candidate) = {head.estimate:.6g}  95% interval "
            f"[{head.ci95_low:.6g}, {head.ci95_high:.6g}]") in line, line
    assert "the original comparator's window bootstrap 0.5 [0.4, 0.6])" in line, line


def test_exit_codes() -> None:
    err = io.StringIO()
    rep = BatchReporter(io.StringIO())
    assert run_headless(lambda emit, cancel: "ok", rep, err=err) == 0

    def bad(emit, cancel):  # type: ignore[no-untyped-def]
        raise BadInput("profile.toml: [run] nope")

    def failed(emit, cancel):  # type: ignore[no-untyped-def]
        raise StageFailed("window 003: server died")

    def broken(emit, cancel):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("bug")

    assert run_headless(bad, rep, err=err) == 2
    assert run_headless(failed, rep, err=err) == 1
    assert run_headless(broken, rep, err=err) == 1
    text = err.getvalue()
    assert "kldtui: error: profile.toml: [run] nope" in text
    assert "kldtui: error: window 003: server died" in text
    assert "internal error: ZeroDivisionError" in text


def test_early_abort_is_known_by_its_event_and_is_a_failure() -> None:
    from kldtui.errors import Interrupted
    from kldtui.events import EarlyAbort

    def aborted(emit, cancel):  # type: ignore[no-untyped-def]
        emit(EarlyAbort("compare", "window 002: mean KL 0.9 is above abort_kl_above 0.5",
                        report_path="/w/comparison.json"))
        raise StageFailed("window 002: mean KL 0.9 is above abort_kl_above 0.5")

    def interrupted(emit, cancel):  # type: ignore[no-untyped-def]
        raise Interrupted("interrupted by SIGINT")

    out, err = io.StringIO(), io.StringIO()
    rep = BatchReporter(out)
    assert run_headless(aborted, rep, err=err) == 1
    assert rep.early_abort is not None and rep.early_abort.report_path == "/w/comparison.json"
    assert "kldtui: stopped early: window 002" in err.getvalue()
    assert run_headless(interrupted, BatchReporter(io.StringIO()), err=io.StringIO()) == 130


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_set_cancel_and_exit_130(sig: signal.Signals) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    seen: list[str] = []
    started = threading.Event()

    def job(emit, cancel):  # type: ignore[no-untyped-def]
        started.set()
        while not cancel.wait(0.05):
            pass
        seen.append(cancel.reason)
        cancel.check()

    def send() -> None:
        started.wait(10)
        os.kill(os.getpid(), sig)

    threading.Thread(target=send, daemon=True).start()
    err = io.StringIO()
    out = io.StringIO()
    assert run_headless(job, BatchReporter(out), err=err) == 130
    assert seen == [f"interrupted by {sig.name}"]
    assert "run the same command again to resume" in err.getvalue()
    assert f"{sig.name} received" in out.getvalue()
    assert {s: signal.getsignal(s) for s in before} == before  # handlers restored


def test_a_signal_after_the_jobs_last_check_still_exits_130() -> None:
    """The job finishes although the signal set cancel (it came after the job's last check): the
    exit code still says the run was stopped, as the kldtui command does for a late signal."""
    def job(emit, cancel):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancel.wait(10)  # the handler ran on the main thread
        return "done anyway"

    err = io.StringIO()
    assert run_headless(job, BatchReporter(io.StringIO()), err=err) == 130
    assert "interrupted (interrupted by SIGTERM)" in err.getvalue()
    assert run_headless(lambda emit, cancel: "ok", BatchReporter(io.StringIO()), err=io.StringIO()) == 0


def test_a_stuck_job_is_force_stopped_after_the_grace_period() -> None:
    release = threading.Event()
    started = threading.Event()

    def job(emit, cancel):  # type: ignore[no-untyped-def]
        started.set()
        release.wait(60)  # ignores cancel, like a request blocked on a server
        raise StageFailed("the server went away")

    def send() -> None:
        started.wait(10)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()
    code = run_headless(job, BatchReporter(io.StringIO()), on_force_stop=release.set, grace_s=0.2,
                        err=io.StringIO())
    assert code == 130
    assert release.is_set()


def test_live_mode_draws_bars_and_still_prints_lines() -> None:
    out = io.StringIO()
    rep = BatchReporter(out, live=True)
    with rep:
        rep(StageStarted("capture", detail="6 windows"))
        rep(Progress("capture", "tokens", 100, 1000, "tokens"))
        rep(Progress("capture", "tokens", 1000, 1000, "tokens"))  # finished: the bar goes
        rep(Progress("compare", "window 000 rows", 16, 511, "rows"))
        assert list(rep._bars) == [("compare", "window 000 rows")]
        rep(WindowState("compare", 0, "compared", figures={"kl": 0.25}))  # its bars go
        assert rep._bars == {}
    text = out.getvalue()
    assert "capture: started - 6 windows" in text
    assert "window 000 compared, mean KL 0.25" in text
    jsonl = BatchReporter(io.StringIO(), jsonl=True, live=True)
    assert not jsonl.live  # JSONL is for machines: never bars


def test_live_bars_always_have_a_total_and_leave_with_their_stage() -> None:
    """Issue 15 item 9: a count without a total stayed on screen as 'reference windows 6/?'."""
    rep = BatchReporter(io.StringIO(), live=True)
    with rep:
        rep(Progress("reference", "reference windows", 6, None, "windows"))
        assert rep._bars == {}  # no total: no bar
        rep(Progress("reference", "download", 5, 10, "bytes"))
        assert list(rep._bars) == [("reference", "download")]
        rep(StageFinished("reference", summary="ready"))  # the stage is over: its bars go
        assert rep._bars == {}


def test_jsonl_stream_ends_with_one_final_event() -> None:
    """Issue 15 item 13: the outcome is in the stream, not only on stderr and in the exit code."""
    for job, outcome, code in [
            (lambda emit, cancel: emit(ResultReady("compare", path="/w/comparison.json")), "finished", 0),
            (lambda emit, cancel: (_ for _ in ()).throw(BadInput("p.toml: bad")), "bad_input", 2),
            (lambda emit, cancel: (_ for _ in ()).throw(StageFailed("server died")), "failed", 1)]:
        out = io.StringIO()
        assert run_headless(job, BatchReporter(out, jsonl=True), err=io.StringIO()) == code
        docs = [json.loads(line) for line in out.getvalue().splitlines()]
        assert all(d["schema"] == 1 for d in docs)
        final = docs[-1]
        assert final["event"] == "RunFinished" and final["outcome"] == outcome and final["exit_code"] == code
        assert [d["event"] for d in docs].count("RunFinished") == 1
        if code == 0:
            assert final["report"] == "/w/comparison.json"
        else:
            assert final["message"]


def test_a_failure_is_said_once_where_both_streams_are_one_terminal(tmp_path: Path) -> None:
    """The stage's FAILED line and the closing 'kldtui: error:' line said the same words twice on a
    terminal (or 2>&1); on separate streams the closing line stays (scripts read stderr)."""
    from kldtui.events import StageFailed as Failed

    def failing(emit, cancel):  # type: ignore[no-untyped-def]
        emit(Failed("compare", "x: suite manifest not found"))
        raise BadInput("x: suite manifest not found")

    with open(tmp_path / "both.txt", "w") as both:
        assert run_headless(failing, BatchReporter(both), err=both) == 2
    text = (tmp_path / "both.txt").read_text()
    assert text.count("x: suite manifest not found") == 1 and "compare: FAILED - x: suite" in text, text
    out, err = io.StringIO(), io.StringIO()
    assert run_headless(failing, BatchReporter(out), err=err) == 2
    assert "compare: FAILED - x: suite manifest not found" in out.getvalue()
    assert err.getvalue() == "kldtui: error: x: suite manifest not found\n"


def test_the_compare_backend_line_names_it_as_the_report_does() -> None:
    from kldtui.stages.compare.backends import Backend, BackendChoice

    choice = BackendChoice(Backend.C, threads=1, cuda_device=None, reason="x")
    assert choice.label == "c-kernel, 1 thread"  # the report's provenance says 'c-kernel backend'


def test_the_backend_chosen_is_said_with_its_reason_in_lines_and_jsonl() -> None:
    """The compare's choice of backend reaches the user: one line with the label and the reason, and
    in JSONL a BackendChosen event carrying the backend as the report names it, the label and the reason."""
    from kldtui.stages.compare.backends import Backend, BackendChoice

    reason = ("a llama.cpp server (pid 123) is running on this host and it may use every GPU: the CPU "
              "kernel with 8 of 16 threads, leaving the GPUs to the server")
    event = BackendChoice(Backend.C, threads=8, cuda_device=None, reason=reason).event()
    out = io.StringIO()
    BatchReporter(out)(event)
    assert out.getvalue().endswith(f" compare: compare backend: c-kernel, 8 threads ({reason})\n")
    out = io.StringIO()
    BatchReporter(out, jsonl=True)(event)
    doc = json.loads(out.getvalue())
    assert (doc["event"], doc["stage"], doc["backend"], doc["label"], doc["reason"]) == (
        "BackendChosen", "compare", "c-kernel", "c-kernel, 8 threads", reason)


def test_a_campaigns_tables_say_their_noise_model_and_each_note_once() -> None:
    """A campaign prints its standings after each candidate and at the end: every table repeated the
    noise model's line and the ties note under it. Each is said once, under the first table that has it;
    a note that changes (more pairs of candidates) is a new one, said where it first appears."""
    from kldtui.events import LeaderboardUpdated, Standing

    noise = "none: window-to-window variation only"
    two = "ties: sign-flip test over windows against the best (95 %)"
    three = "ties: sign-flip test over windows against the best, Holm over all 3 pairs"
    out = io.StringIO()
    rep = BatchReporter(out)
    for names, note, final in ((("q8", "q6"), two, False), (("q8", "q6"), two, False),
                               (("q8", "q6", "q4"), three, True)):
        rows = tuple(Standing(name, "compared", rank=i + 1, mean=0.01 * (i + 1), ci_low=0.005, ci_high=0.05,
                              mark="best" if i == 0 else "worse") for i, name in enumerate(names))
        rep(LeaderboardUpdated("campaign", rows=rows, windows=32, noise_model=noise, notes=(note,),
                               final=final))
    said = out.getvalue().splitlines()
    assert len([x for x in said if "leaderboard" in x]) == 3, said  # three tables
    assert [x.strip() for x in said if "noise model" in x] == [f"noise model: {noise}"], said
    assert [x.strip() for x in said if "note: ties" in x] == [f"note: {two}", f"note: {three}"], said
    # said under the first table (before the second's title), the new note under the final one
    titles = [i for i, x in enumerate(said) if "leaderboard" in x]
    assert titles[0] < said.index(f"    noise model: {noise}") < titles[1] < said.index(f"    note: {three}")
