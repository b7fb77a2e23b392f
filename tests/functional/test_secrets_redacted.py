"""Secrets in a profile never reach stdout, the server log, manifests or reports (issue 11 item 3):
that a value was present is recorded, the value never is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kldtui.events import Event
from kldtui.redact import REDACTED, is_secret_env, is_secret_flag, redact_argv, redact_env
from kldtui.stages.serve import ServerProcess

API_KEY = "sk-test-4f9a1c2b7d"
HF_TOKEN = "hf_test_9e8d7c6b5a"
# secrets outside the name list (issue 27 item 2): found by name words and by the shape of the value
GITHUB_PAT = "gh-pat-value-0b1c2d3e"
HF_AUTH = "hf-auth-value-4f5a6b"
DB_PASSWORD = "db-pw-7c8d9e0f"
DATABASE_URL = f"postgres://app:{DB_PASSWORD}@db.internal:5432/prod"
OTHER_SECRETS = (GITHUB_PAT, HF_AUTH, DB_PASSWORD)


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "--token", "--password", "--api_key",
                                  "--client-secret", "--api-key=x"])
def test_secret_flags(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize("flag", ["--max-num-batched-tokens", "--api-key-env", "--ssl-keyfile",
                                  "--port", "--kv-cache-dtype", "sk-value"])
def test_not_secret_flags(flag: str) -> None:
    assert not is_secret_flag(flag)


def test_argv_and_env_keep_presence_not_value() -> None:
    argv = ["python", "-m", "vllm", "--api-key", API_KEY, f"--hf-token={HF_TOKEN}", "--port", "8000"]
    assert redact_argv(argv) == ["python", "-m", "vllm", "--api-key", REDACTED,
                                 f"--hf-token={REDACTED}", "--port", "8000"]
    env = {"HF_TOKEN": HF_TOKEN, "OPENAI_API_KEY": "k" * 8, "DB_PASSWORD": "p" * 8,
           "MY_SECRET": "s" * 8, "VLLM_TRITON_MLA_STATIC_KV_SPLITS": "8"}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED, "DB_PASSWORD": REDACTED,
                               "MY_SECRET": REDACTED, "VLLM_TRITON_MLA_STATIC_KV_SPLITS": "8"}
    assert is_secret_env("hf_token") and not is_secret_env("CUDA_VISIBLE_DEVICES")


def test_launcher_never_shows_secrets(tmp_path: Path) -> None:
    """The "server: started" line and the server's own output (which echoes its arguments and
    environment, as vLLM's "non-default args" line does) are redacted on the way out."""
    events: list[Event] = []
    script = ("import os, sys; print('non-default args:', sys.argv[1:]); "
              "print('token is', os.environ['HF_TOKEN']); sys.stdout.flush()")
    server = ServerProcess([sys.executable, "-c", script, "--api-key", API_KEY],
                           capture_dir=tmp_path / "cap", served_model_name="x", emit=events.append,
                           env={"HF_TOKEN": HF_TOKEN}, log_path=tmp_path / "server.log",
                           ensure_flags=False)
    server.start()
    try:
        server.proc.wait(timeout=30)  # type: ignore[union-attr]
        assert server.alive() is not None
    finally:
        server.stop()
    shown = "\n".join(repr(e) for e in events) + (tmp_path / "server.log").read_text()
    assert "non-default args" in shown and REDACTED in shown
    assert API_KEY not in shown and HF_TOKEN not in shown
    assert API_KEY not in (server.alive() or "")
    assert server.public_argv[-1] == REDACTED


@pytest.mark.timeout(300)
def test_pipeline_records_and_prints_no_secret(tmp_path: Path) -> None:
    from kldtui.workflow.demo import PROFILE_TEXT, build_demo_suite

    workdir = tmp_path / "w"
    workdir.mkdir()
    build_demo_suite(workdir / "suite")
    text = PROFILE_TEXT.replace('kind = "embedded"\n', 'kind = "embedded"\n'
                                f'vllm_args = ["--api-key", "{API_KEY}"]\n'
                                f'env = {{HF_TOKEN = "{HF_TOKEN}", GITHUB_PAT = "{GITHUB_PAT}", '
                                f'HF_AUTH = "{HF_AUTH}", DATABASE_URL = "{DATABASE_URL}"}}\n'
                                'api_key_env = "KLDTUI_TEST_KEY"\n', 1)
    text = text.replace("[run]\n", "[run]\nstop_window = 2\n", 1)
    profile = workdir / "kldtui.toml"
    profile.write_text(text)
    env = dict(os.environ, KLDTUI_TEST_KEY=API_KEY)
    env.pop("KLDTUI_EMBEDDED_FAULT", None)
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--server-log", "--profile",
                           str(profile)], capture_output=True, text=True, timeout=240, env=env, cwd=workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "started" in proc.stdout
    assert API_KEY not in proc.stdout + proc.stderr and HF_TOKEN not in proc.stdout + proc.stderr
    for path in workdir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".log", ".txt"):
            data = path.read_text(errors="replace")
            assert API_KEY not in data and HF_TOKEN not in data, path
            assert not any(s in data for s in OTHER_SECRETS), path
    assert not any(s in proc.stdout + proc.stderr for s in OTHER_SECRETS)
    # the demo is a campaign: its first candidate has the secrets
    runtime = json.loads((workdir / "candidates" / "fine" / "manifest.json").read_text())["runtime"]
    assert runtime["env"] == {"HF_TOKEN": REDACTED, "GITHUB_PAT": REDACTED, "HF_AUTH": REDACTED,
                              "DATABASE_URL": f"postgres://app:{REDACTED}@db.internal:5432/prod"}
    i = runtime["argv"].index("--api-key")
    assert runtime["argv"][i + 1] == REDACTED
