"""Profiles: parsing, validation with suggestions, path resolution, and the server argv."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.servers.registry import kind_of
from kldtui.workflow.profile import load_profile, server_plan
from tests.paths import EXAMPLES

EXAMPLES = EXAMPLES

# docs/FORMATS.md, "How the published reference was served" (the dataset card's command).
CARD_COMMAND = """python -m vllm.entrypoints.cli.main serve /path/to/candidate \
  --served-model-name Kimi-K3 \
  --trust-remote-code \
  --host 0.0.0.0 --port 8000 \
  --tensor-parallel-size 16 \
  --max-model-len 4096 \
  --max-num-seqs 1 \
  --max-num-batched-tokens 256 \
  --gpu-memory-utilization 0.982 \
  --compilation-config '{"mode":0,"cudagraph_mode":"PIECEWISE","cudagraph_capture_sizes":[1]}' \
  --load-format instanttensor"""


def test_kimi_profile_reproduces_the_dataset_card_command() -> None:
    profile = load_profile(EXAMPLES / "kimi-k3-mxfp4.toml")
    kind = kind_of(profile.candidate)
    assert kind.argv(profile.candidate) == shlex.split(CARD_COMMAND)
    assert kind.environment(profile.candidate, profile.capture_target()) == {
        "VLLM_TRITON_MLA_STATIC_KV_SPLITS": "8", "VLLM_DCP_INDEXER_SHARDS": "0"}
    assert profile.reference.repo_id == "festr2/kimi-k3-full-mxfp4-kld-reference-32x2048"
    assert profile.reference.local_dir == EXAMPLES / "kimi-k3-reference"
    assert profile.run.workdir == EXAMPLES / "kimi-k3-work"
    assert profile.run.stop_window == 8
    # the launcher substitutes the port it actually uses, nothing else changes
    argv = kind.argv(profile.candidate, port=8123)
    assert argv[argv.index("--port") + 1] == "8123"
    assert len(argv) == len(shlex.split(CARD_COMMAND))


def test_all_examples_load() -> None:
    # the example scripts write SOURCES files for kldtui prepare beside the profiles (gitignored)
    for path in (p for p in EXAMPLES.glob("*.toml") if not p.name.endswith("-sources.toml")):
        profile = load_profile(path)
        assert profile.candidate.kind in ("vllm", "embedded", "attach", "llama-cpp"), path


def test_the_gguf_example_is_one_campaign_and_a_score_run_on_its_reference() -> None:
    campaign = load_profile(EXAMPLES / "tiny-gguf.toml")
    score = load_profile(EXAMPLES / "tiny-gguf-q4_0.toml")
    assert campaign.reference.local_dir == score.reference.local_dir == EXAMPLES / "tiny-gguf-reference"
    assert campaign.reference.capture == "vllm" and not campaign.campaign.repeat_leader  # see the file
    assert [(c.name, c.server.kind) for c in campaign.candidates] == [
        ("bf16", "vllm"), ("q8_0", "llama-cpp"), ("q4_0", "llama-cpp")]
    assert campaign.capture.mode.name == "logits" and score.capture.mode.name == "score"
    assert campaign.run.workdir != score.run.workdir
    q8 = campaign.candidates[1].server
    argv = kind_of(q8).argv(q8, port=9000)
    assert argv[argv.index("--model") + 1] == str(EXAMPLES / "tiny-llama-q8_0.gguf")
    # the reference is captured with the first candidate's vLLM settings, serving the float32 model
    ref = campaign.reference.server
    assert ref is not None and ref.kind == "vllm" and kind_of(ref).model(ref) == str(EXAMPLES / "tiny-llama")


def test_tiny_vllm_profile_argv() -> None:
    profile = load_profile(EXAMPLES / "tiny-vllm-cpu.toml")
    argv = kind_of(profile.candidate).argv(profile.candidate, port=9000)
    assert argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model",
                         str(EXAMPLES / "tiny-llama-bf16")]
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "9000"]
    assert "--no-enable-prefix-caching" in argv
    assert Path(argv[0]).is_absolute()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kldtui.toml"
    path.write_text(text)
    return path


def test_unknown_key_is_rejected_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, '[candidate]\nkind = "embedded"\nserved_model_nmae = "x"\n')
    with pytest.raises(BadInput, match=r"unknown key 'served_model_nmae' in \[candidate\]; "
                                       r"did you mean 'served_model_name'\?"):
        load_profile(path)
    path = write(tmp_path, '[compre]\nreverse = true\n')
    with pytest.raises(BadInput, match=r"unknown section \[compre\]; did you mean 'compare'"):
        load_profile(path)


EMB = '[candidate]\nkind = "embedded"\n'


def test_bad_values_are_one_line_bad_input(tmp_path: Path) -> None:
    cases = {
        '[candidate]\nkind = "embeded"\n': "did you mean 'embedded'",
        '[candidate]\nkind = "vllm"\n': "model is missing",
        '[candidate]\nkind = "embedded"\nport = "80"\n': "port must be int",
        '[candidate]\nurl = "http://h:1"\n': "server_capture_dir",
        EMB + '[run]\nstart_window = 4\nstop_window = 2\n': "window range",
        EMB + '[run]\nrun_name = "../x"\n': "must be a plain name",
        '[candidate\n': "not valid TOML",
    }
    for text, needle in cases.items():
        with pytest.raises(BadInput) as info:
            load_profile(write(tmp_path, text))
        assert needle in str(info.value), (text, str(info.value))
        assert "\n" not in str(info.value)
    with pytest.raises(BadInput, match="profile not found"):
        load_profile(tmp_path / "missing.toml")


def test_relative_paths_resolve_against_the_profile_folder(tmp_path: Path) -> None:
    sub = tmp_path / "profiles"
    sub.mkdir()
    path = sub / "p.toml"
    path.write_text('[reference]\nlocal_dir = "../suite"\n[candidate]\nkind = "attach"\n'
                    'url = "http://10.0.0.1:8000"\nserver_capture_dir = "chunks"\n'
                    'api_key_env = "KLDTUI_TEST_KEY"\n[run]\nworkdir = "w"\n')
    profile = load_profile(path)
    assert profile.reference.local_dir == tmp_path / "suite"
    assert profile.workspace().reference_dir == tmp_path / "suite" / "ref"
    assert profile.candidate.server_capture_dir == sub / "chunks"
    assert profile.run.workdir == sub / "w"
    with pytest.raises(BadInput, match="KLDTUI_TEST_KEY"):
        server_plan(profile)
    with pytest.raises(BadInput, match="starts no server"):
        kind_of(profile.candidate).argv(profile.candidate)


def test_embedded_argv(tmp_path: Path) -> None:
    path = write(tmp_path, '[candidate]\nkind = "embedded"\nserved_model_name = "tiny"\n'
                 'model_seed = 3\nvocab_size = 512\nperturb = 0.05\nport = 0\n')
    profile = load_profile(path)
    argv = kind_of(profile.candidate).argv(profile.candidate, port=4567)
    assert argv[1:3] == ["-m", "kldtui.embedded"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags == {"--port": "4567", "--host": "127.0.0.1", "--served-model-name": "tiny",
                     "--model-seed": "3", "--vocab-size": "512", "--perturb": "0.05",
                     "--max-num-batched-tokens": "256", "--max-num-seqs": "1"}


def test_demo_example_is_the_profile_the_demo_writes() -> None:
    from kldtui.workflow.demo import PROFILE_TEXT

    assert (EXAMPLES / "demo.toml").read_text() == PROFILE_TEXT
    profile = load_profile(EXAMPLES / "demo.toml")
    assert profile.reference.capture == "embedded"
    assert profile.candidate.kind == "embedded" and profile.candidate.perturb > 0
    assert profile.run.workdir == EXAMPLES


def test_reference_capture_kinds_need_their_keys(tmp_path: Path) -> None:
    for text, needle in [('capture = "vllm"\n', "needs model"),
                         ('capture = "attach"\nurl = "http://h:1"\n', "needs url and server_capture_dir"),
                         ('capture = "gpu"\n', "is not one of"),
                         ('model = "m"\n', "only used with capture")]:
        with pytest.raises(BadInput, match=needle):
            load_profile(write(tmp_path, EMB + "[reference]\n" + text))
    (tmp_path / "ref-model").mkdir()
    profile = load_profile(write(tmp_path, EMB + '[reference]\ncapture = "vllm"\nmodel = "ref-model"\n'
                                 'vllm_args = ["--dtype", "float32"]\nrepeat = false\n'))
    ref = profile.reference
    server = ref.server  # the reference's server: the candidate's settings, the [reference] keys over them
    assert server is not None and server.kind == "vllm" and server.label.endswith("[reference]")
    assert server.model == str(tmp_path / "ref-model") and server.vllm_args == ("--dtype", "float32")
    assert server.served_model_name == "candidate-reference" and server.port == profile.candidate.port
    assert ref.repeat is False


def test_a_context_filter_is_checked_when_the_profile_is_read(tmp_path: Path) -> None:
    path = tmp_path / "kldtui.toml"
    path.write_text('[candidate]\nkind = "embedded"\n[run]\ncontext_filter = "qualification"\n'
                    'strata = ["news", "code"]\n')
    run = load_profile(path).run
    assert (run.context_filter, run.strata) == ("qualification", ("news", "code"))
    for body, words in (('context_filter = "analysys"', "[run] context_filter 'analysys' is not a context "
                         "filter; did you mean 'analysis'? set one of all, analysis, qualification"),
                        ('strata = ["news", "news"]', "[run] strata: stratum 'news' is given twice"),
                        ('strata = [""]', "[run] strata: '' is not a stratum name"),
                        ("strata = \"news\"", "strata must be list[str]")):
        path.write_text(f'[candidate]\nkind = "embedded"\n[run]\n{body}\n')
        with pytest.raises(BadInput) as caught:
            load_profile(path)
        assert str(path) in str(caught.value) and words in str(caught.value)
        assert "\n" not in str(caught.value)


def test_server_identity_is_what_changes_the_answers_and_never_holds_a_secret(tmp_path: Path) -> None:
    # what a capture records per window and a campaign checks before reusing a report: the model and its
    # arguments, never where it listens, how long kldtui waits, its interpreter or environment
    from kldtui.servers.base import identity_changes, server_identity
    from kldtui.workflow.profile import profile_from_dict

    (tmp_path / "m").mkdir()
    table = {"kind": "vllm", "model": "m",
             "vllm_args": ["--tensor-parallel-size", "8", "--api-key", "sk-abc123"]}
    quiet = {"port": 8123, "host": "127.0.0.1", "startup_timeout": 60.0, "request_timeout": 30.0,
             "python": "/opt/venv/bin/python", "env": {"HF_TOKEN": "hf_secret", "CUDA_VISIBLE_DEVICES": "0"},
             "served_model_name": "q4", "bits_per_weight": 4.5, "parameters": 1000}
    one = server_identity(profile_from_dict({"candidate": table}, base_dir=tmp_path).candidate)
    two = server_identity(profile_from_dict({"candidate": {**table, **quiet}}, base_dir=tmp_path).candidate)
    assert one == two and identity_changes(one, two) is None
    assert one["kind"] == "vllm" and one["model"] == str(tmp_path / "m")
    assert "sk-abc123" not in json.dumps(one) and "--tensor-parallel-size" in one["vllm_args"]
    tp16 = {**table, "vllm_args": ["--tensor-parallel-size", "16", "--api-key", "sk-abc123"]}
    three = server_identity(profile_from_dict({"candidate": tp16}, base_dir=tmp_path).candidate)
    assert identity_changes(one, three) == ("vllm_args [--tensor-parallel-size 8 --api-key <redacted>], "
                                            "now [--tensor-parallel-size 16 --api-key <redacted>]")
    assert identity_changes("garbage", one) == "its recorded server settings cannot be read"
    # a forged record's values are shown on one line, escaped and cut short
    forged = {**one, "vllm_args": ["--x\n\x1b[31m", *["a"] * 500]}
    said = identity_changes(forged, one)
    assert said is not None and "\n" not in said and "\x1b" not in said and len(said) < 300, said
    assert identity_changes(None, one) is None  # recorded by an earlier version: nothing to compare
