"""Attach mode: the pipeline drives a server started elsewhere (with an API key) and leaves it up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kldtui.errors import StageFailed
from kldtui.stages.serve import ServerProcess
from kldtui.workflow.demo import prepare_demo
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import profile_from_dict

pytestmark = pytest.mark.timeout(180)


@pytest.mark.slow  # a whole pipeline run
def test_attach_mode_uses_the_running_server_and_never_stops_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    demo = prepare_demo(tmp_path / "demo")
    Pipeline(demo).reference()  # the demo's reference, captured by its own embedded server
    chunks = tmp_path / "elsewhere-chunks"
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "remote",
            "--model-seed", "7", "--vocab-size", "2048", "--perturb", "0.1", "--api-key", "s3cret"]
    with ServerProcess(argv, capture_dir=chunks, served_model_name="remote", api_key="s3cret") as remote:
        url = remote.wait_ready(timeout=60)
        doc = {"reference": {"local_dir": str(tmp_path / "demo" / "suite")},
               "candidate": {"kind": "attach", "url": url, "served_model_name": "remote",
                             "api_key_env": "KLDTUI_TEST_API_KEY", "server_capture_dir": str(chunks)},
               "run": {"workdir": str(tmp_path / "work"), "stop_window": 2},
               "compare": {"bootstrap_samples": 200}}
        profile = profile_from_dict(doc, base_dir=tmp_path)

        monkeypatch.setenv("KLDTUI_TEST_API_KEY", "wrong")
        with pytest.raises(StageFailed, match="refused the API key"):
            Pipeline(profile).run_all()

        monkeypatch.setenv("KLDTUI_TEST_API_KEY", "s3cret")
        pipeline = Pipeline(profile)
        report = json.loads(pipeline.run_all().report_path.read_text())
        assert report["windows"] == 2 and report["window_range"] == [0, 2]
        assert remote.alive() is None  # an attached server is never stopped by kldtui
        manifest = json.loads((tmp_path / "work" / "candidate" / "manifest.json").read_text())
        assert manifest["runtime"]["launcher"] == "attached" and manifest["runtime"]["url"] == url
