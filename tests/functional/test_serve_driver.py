"""The serve stage's driver, called directly as the command and the pipeline call it."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from kldtui.errors import StageFailed
from kldtui.events import Cancel, Event, StageFinished
from kldtui.events import StageFailed as StageFailedEvent
from kldtui.stages.serve import ServerPlan, run_serve
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.profile import server_plan
from tests.proc_utils import pid_dead

pytestmark = pytest.mark.timeout(120)


def test_run_serve_launches_a_ready_server_and_records_what_it_is(tmp_path: Path) -> None:
    profile = prepare_demo(tmp_path)
    events: list[Event] = []
    session = run_serve(profile.workspace(), events.append, Cancel(), server_plan(profile))
    try:
        assert session.url is not None and session.process is not None
        models = httpx.get(f"{session.url}/v1/models", trust_env=False).json()["data"]
        assert [m["id"] for m in models] == ["demo"]
        assert session.capture_dir == tmp_path / "capture" / "server-001"
        assert session.runtime["launcher"] == "kldtui" and session.runtime["served_model_name"] == "demo"
        finished = [e for e in events if isinstance(e, StageFinished)]
        assert finished and finished[-1].stage == "server" and session.url in finished[-1].summary
    finally:
        session.stop("test done")
    pid = session.process.pid
    assert pid is not None and pid_dead(pid)


def test_run_serve_reports_a_server_that_dies_while_loading(tmp_path: Path) -> None:
    profile = prepare_demo(tmp_path)
    plan = ServerPlan("embedded", "demo", startup_timeout=60.0,
                      argv=(sys.executable, "-c", "import sys; print('model file is broken'); sys.exit(3)"))
    events: list[Event] = []
    with pytest.raises(StageFailed, match="model file is broken"):
        run_serve(profile.workspace(), events.append, Cancel(), plan)
    failed = [e for e in events if isinstance(e, StageFailedEvent)]
    assert failed and failed[0].stage == "server" and "exit code 3" in failed[0].message


def test_run_serve_attaches_without_launching(tmp_path: Path) -> None:
    profile = prepare_demo(tmp_path)
    launched = run_serve(profile.workspace(), lambda e: None, Cancel(), server_plan(profile))
    try:
        assert launched.url is not None
        plan = ServerPlan("attach", "demo", 10.0, url=launched.url, capture_dir=launched.capture_dir)
        attached = run_serve(profile.workspace(), lambda e: None, Cancel(), plan)
        assert attached.process is None and attached.url == launched.url
        assert attached.runtime["launcher"] == "attached"
        # a start kldtui made is recorded (what tells two captures from a copied one); one it cannot see not
        assert "server_start" in launched.runtime and "server_start" not in attached.runtime
        attached.stop()  # never stops a server it did not launch
        assert launched.process is not None and launched.process.alive() is None
    finally:
        launched.stop()


def test_run_serve_interrupted_while_loading_says_interrupted(tmp_path: Path) -> None:
    import threading

    from kldtui.errors import Interrupted
    from kldtui.events import LogLine

    profile = prepare_demo(tmp_path)
    plan = ServerPlan("embedded", "demo", startup_timeout=60.0,
                      argv=(sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(9)"))
    events: list[Event] = []
    cancel = Cancel()
    threading.Timer(0.5, cancel.set, args=("interrupted by SIGINT",)).start()
    with pytest.raises(Interrupted):
        run_serve(profile.workspace(), events.append, cancel, plan)
    lines = [e.line for e in events if isinstance(e, LogLine)]
    assert any("server stopped (interrupted)" in line for line in lines), lines
    assert not [e for e in events if isinstance(e, StageFailedEvent)]


@pytest.mark.parametrize(("config", "said"), [
    ("vllm", True),  # vLLM keeps a prefix cache: the launcher turns it off and says so
    ("llama-cpp", False),  # llama.cpp's server resets before every prompt: nothing to turn off
    ("embedded", False),
])
def test_the_prefix_cache_flag_and_its_note_are_the_server_kinds(tmp_path: Path, config: str,
                                                                 said: bool) -> None:
    import dataclasses

    from kldtui.events import Notice
    from kldtui.servers.base import CaptureTarget
    from kldtui.servers.embedded import EmbeddedConfig
    from kldtui.servers.llama_cpp import LlamaCppConfig
    from kldtui.servers.registry import kind_of
    from kldtui.servers.vllm import VllmConfig

    server = {"vllm": VllmConfig(model="org/model"), "llama-cpp": LlamaCppConfig(model=tmp_path / "m.gguf"),
              "embedded": EmbeddedConfig()}[config]
    plan = kind_of(server).plan(server, CaptureTarget())
    # the kind's own command line, with a program in front that exits at once (nothing to serve here)
    plan = dataclasses.replace(plan, argv=(sys.executable, "-c", "import sys; sys.exit(3)", *plan.argv[1:]))
    events: list[Event] = []
    profile = prepare_demo(tmp_path)
    with pytest.raises(StageFailed):
        run_serve(profile.workspace(), events.append, Cancel(), plan)
    notes = [e.text for e in events if isinstance(e, Notice)]
    prefix = [n for n in notes if "prefix" in n]
    if said:
        assert prefix == ["added --no-enable-prefix-caching (a cached prefix is never recomputed, so its "
                          "logits would not be captured)"], notes
    else:
        assert prefix == [], notes
