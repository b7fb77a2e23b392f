"""``kind = "llama-cpp"`` without llama.cpp: its keys, its command line, its checks before
launching (the GGUF file, the interpreter's llama-cpp-python, the vocabulary against the
reference's), and the server module's argument checks. The real engine runs in tests/llama_cpp."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.servers.llama_cpp import KIND, LlamaCppConfig
from kldtui.servers.registry import kind_of
from kldtui.workflow.preflight import preflight
from kldtui.workflow.profile import profile_from_dict
from tests.fixtures_compare import make_suite
from tests.fixtures_gguf import write_gguf


def _profile(tmp_path: Path, candidate: dict[str, object], **sections: dict[str, object]):  # type: ignore[no-untyped-def]
    return profile_from_dict({"candidate": candidate, "run": {"workdir": str(tmp_path / "w")}, **sections},
                             base_dir=tmp_path, path=tmp_path / "p.toml")


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable (empty) llama_cpp package for the interpreter's check."""
    site = tmp_path / "site"
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    # in front of the PYTHONPATH there is: one naming this checkout keeps its kldtui in the children
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    return site


def test_keys_and_command_line(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "q8.gguf")
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "q8.gguf", "n_ctx": 4096, "n_threads": 2,
                            "n_gpu_layers": -1, "kv_type": "f16", "llama_args": {"flash_attn": "true"},
                            "port": 0, "served_model_name": "q8"})
    c = p.candidate
    assert isinstance(c, LlamaCppConfig) and c.model == model  # resolved beside the profile
    assert kind_of(c) is KIND and KIND.model(c) == str(model)
    argv = KIND.argv(c, port=1234)
    assert argv[:3] == [sys.executable, "-m", "kldtui.embedded.llama_cpp"]
    joined = " ".join(argv)
    for part in (f"--model {model}", "--port 1234", "--n-ctx 4096", "--n-gpu-layers -1", "--kv-type f16",
                 "--n-threads 2", "--llama-arg flash_attn=true", "--served-model-name q8",
                 "--max-num-batched-tokens 256", "--max-num-seqs 1"):
        assert part in joined
    assert KIND.describe(c) == "llama.cpp serving q8.gguf"
    assert KIND.model_vocab(c) == 64


@pytest.mark.parametrize("table, needle", [
    ({}, "model is missing: the candidate's .gguf file"),
    ({"model": "m.gguf", "kv_type": "q8"}, "kv_type 'q8' is not one of f32, f16"),
    ({"model": "m.gguf", "n_batch": 0}, "n_batch 0 must be >= 1"),
    ({"model": "m.gguf", "perturb": 0.1}, "perturb is only for kind = 'embedded'"),
    # TOML's true is no string: refused, with the spelling that works (values are read as JSON)
    ({"model": "m.gguf", "llama_args": {"flash_attn": True}},
     'write flash_attn = "true" (a true or false in quotes)'),
])
def test_bad_keys_are_one_line(tmp_path: Path, table: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInput) as info:
        _profile(tmp_path, {"kind": "llama-cpp", **table})
    assert needle in str(info.value) and "[candidate]" in str(info.value)


def test_problems_before_launching(tmp_path: Path, fake_engine: Path) -> None:
    missing = _profile(tmp_path, {"kind": "llama-cpp", "model": "nope.gguf", "port": 0}).candidate
    assert any("nope.gguf" in x and "no such file" in x for x in KIND.problems(missing))
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file, just text...")
    bad = _profile(tmp_path, {"kind": "llama-cpp", "model": "bad.gguf", "port": 0}).candidate
    assert any("no GGUF magic" in x for x in KIND.problems(bad))
    write_gguf(tmp_path / "ok.gguf")
    ok = _profile(tmp_path, {"kind": "llama-cpp", "model": "ok.gguf", "port": 0}).candidate
    assert KIND.problems(ok) == []


def test_an_interpreter_without_llama_cpp_is_named(tmp_path: Path) -> None:
    write_gguf(tmp_path / "ok.gguf")
    c = _profile(tmp_path, {"kind": "llama-cpp", "model": "ok.gguf", "port": 0}).candidate
    problems = KIND.problems(c)  # this venv has no llama-cpp-python
    assert any("llama-cpp-python is not installed there" in x and "pip install llama-cpp-python" in x
               for x in problems)


def test_a_vocabulary_mismatch_stops_the_run_before_launching(tmp_path: Path, fake_engine: Path) -> None:
    make_suite(tmp_path / "suite", windows=2, context=20, vocab=500)
    write_gguf(tmp_path / "trimmed.gguf", vocab=496)
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "trimmed.gguf", "port": 0},
                 reference={"local_dir": str(tmp_path / "suite")})
    problems = preflight(p, p.workspace())
    assert len(problems) == 1
    assert "vocabulary has 496 tokens, the reference's 500" in problems[0]
    assert "pad or trim" in problems[0] and "trimmed.gguf" in problems[0]
    write_gguf(tmp_path / "same.gguf", vocab=500)
    same = _profile(tmp_path, {"kind": "llama-cpp", "model": "same.gguf", "port": 0},
                    reference={"local_dir": str(tmp_path / "suite")})
    assert preflight(same, same.workspace()) == []
    # the whole command: one line, exit 2, nothing launched
    profile = tmp_path / "run.toml"
    profile.write_text('[reference]\nlocal_dir = "suite"\n[candidate]\nkind = "llama-cpp"\n'
                       f'model = "trimmed.gguf"\nport = 0\n[run]\nworkdir = "{tmp_path / "w2"}"\n')
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "vocabulary has 496" in x]
    assert len(lines) == 1 and not (tmp_path / "w2" / "server.log").exists()


def test_a_window_longer_than_the_context_stops_the_run_before_launching(tmp_path: Path,
                                                                          fake_engine: Path) -> None:
    """The embedded server refuses a prompt of n_ctx tokens or more: said before launching, with the
    n_ctx that fits; n_ctx = 0 takes the GGUF's trained context (256 here)."""
    make_suite(tmp_path / "suite", windows=2, context=300, vocab=64)
    write_gguf(tmp_path / "m.gguf", vocab=64)
    ref = {"local_dir": str(tmp_path / "suite")}
    for n_ctx, limit in ((300, 299), (0, 255)):
        p = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "port": 0, "n_ctx": n_ctx},
                     reference=ref)
        assert KIND.max_prompt_tokens(p.candidate) == limit
        problems = preflight(p, p.workspace())
        assert problems == [f"{p.where}: [candidate] llama.cpp serving m.gguf: the suite's windows have up "
                            f"to 300 tokens, its context takes {limit}; set n_ctx = 301 (or more) in "
                            "[candidate]"]
    fits = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "port": 0, "n_ctx": 301},
                    reference=ref)
    assert preflight(fits, fits.workspace()) == []


def test_the_server_module_checks_its_arguments(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "kldtui.embedded.llama_cpp"]
    proc = subprocess.run(run + ["--model", str(tmp_path / "none.gguf")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "none.gguf: GGUF file not found" in proc.stderr
    write_gguf(tmp_path / "m.gguf")
    proc = subprocess.run(run + ["--model", str(tmp_path / "m.gguf"), "--llama-arg", "novalue"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not KEY=VALUE" in proc.stderr
    proc = subprocess.run(run + ["--model", str(tmp_path / "m.gguf")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "llama-cpp-python cannot be imported" in proc.stderr


def test_memory_is_reckoned_from_the_header_and_bounded(tmp_path: Path, fake_engine: Path) -> None:
    """The weights, every position's float32 logits and the KV cache (from the GGUF's layer and
    head counts) are what llama.cpp holds; a context that cannot fit this host is refused before
    launching, naming n_ctx."""
    from kldtui.formats.gguf import read_gguf
    from kldtui.servers.llama_cpp import memory_need

    shape = {"llama.block_count": 2, "llama.embedding_length": 32, "llama.attention.head_count": 4,
             "llama.attention.head_count_kv": 2}
    model = write_gguf(tmp_path / "m.gguf", vocab=64, extra=shape)
    info = read_gguf(model)
    assert info.kv_values_per_token() == 2 * 2 * (8 + 8)  # layers x kv heads x (key + value head size)
    c = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "n_ctx": 4096, "port": 0}).candidate
    need = memory_need(c, info)
    assert need.weights == info.tensor_bytes and need.logits == 4096 * 64 * 4
    assert need.kv_cache == 4096 * 64 * 4  # f32 by default
    assert need.total == need.weights + need.logits + need.kv_cache and need.host > 2**30
    half = memory_need(_profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "n_ctx": 4096,
                                           "kv_type": "f16", "port": 0}).candidate, info)
    assert half.kv_cache == need.kv_cache // 2
    assert "logits of every position 1.00 MiB, KV cache 1.00 MiB" in need.describe()
    assert KIND.problems(c) == []
    huge = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "n_ctx": 2**40, "port": 0}).candidate
    problems = KIND.problems(huge)
    assert len(problems) == 1 and "more than this host's" in problems[0] and "lower n_ctx" in problems[0]


def test_a_folder_given_as_the_gguf_is_one_line_naming_its_files(tmp_path: Path, fake_engine: Path) -> None:
    """A folder is not "no such file": the kind says it is a folder and which .gguf files it holds,
    and the size measurement does not say the same mistake a second time."""
    make_suite(tmp_path / "suite", windows=2, context=20, vocab=64)
    models = tmp_path / "models"
    models.mkdir()
    write_gguf(models / "m-q8_0.gguf")
    write_gguf(models / "m-q4_0.gguf")
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "models", "port": 0},
                 reference={"local_dir": str(tmp_path / "suite")})
    problems = preflight(p, p.workspace())
    assert problems == [f"{p.where}: [candidate] model = '{models}' is a folder; give the path of the "
                        ".gguf file in it (m-q4_0.gguf, m-q8_0.gguf)"]
    (tmp_path / "empty").mkdir()
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "empty", "port": 0},
                 reference={"local_dir": str(tmp_path / "suite")})
    assert [x for x in preflight(p, p.workspace()) if "is a folder" in x and "holds none" in x]


def test_a_file_that_is_no_model_names_the_candidate(tmp_path: Path, fake_engine: Path) -> None:
    """The size measurement's complaint names the profile and the candidate (a campaign has several),
    once: the kind's own check said the same file is no GGUF."""
    make_suite(tmp_path / "suite", windows=2, context=20, vocab=64)
    (tmp_path / "notes.txt").write_text("not a model")
    profile = profile_from_dict(
        {"candidates": [{"name": "q8", "kind": "llama-cpp", "model": str(write_gguf(tmp_path / "q8.gguf")),
                         "port": 0},
                        {"name": "q4", "kind": "llama-cpp", "model": "notes.txt", "port": 0}],
         "reference": {"local_dir": str(tmp_path / "suite")}, "run": {"workdir": str(tmp_path / "w")}},
        base_dir=tmp_path, path=tmp_path / "p.toml")
    member = profile.member(profile.candidates[1])
    problems = preflight(member, profile.member_workspace("q4"))
    assert problems == [f"{profile.where}: [[candidates]] 'q4' model: {tmp_path / 'notes.txt'}: not a GGUF "
                        "file (no GGUF magic); give a .gguf model file"]
    from kldtui.servers.embedded import EmbeddedConfig

    sized = EmbeddedConfig(weights=tmp_path / "notes.txt", label=f"{profile.where}: [[candidates]] 'e'")
    with pytest.raises(BadInput) as info:
        sized.model_size()
    said = str(info.value)
    assert said.startswith(f"{profile.where}: [[candidates]] 'e' weights: {tmp_path / 'notes.txt'}: ")


def test_a_campaign_candidate_is_named_in_the_context_problem(tmp_path: Path, fake_engine: Path) -> None:
    """In a campaign the n_ctx to raise is a [[candidates]] table's, named: there is no [candidate]."""
    make_suite(tmp_path / "suite", windows=2, context=300, vocab=64)
    model = write_gguf(tmp_path / "m.gguf", vocab=64)
    profile = profile_from_dict(
        {"candidates": [{"name": "q8", "kind": "llama-cpp", "model": str(model), "port": 0, "n_ctx": 1024},
                        {"name": "q4", "kind": "llama-cpp", "model": str(model), "port": 0, "n_ctx": 256}],
         "reference": {"local_dir": str(tmp_path / "suite")}, "run": {"workdir": str(tmp_path / "w")}},
        base_dir=tmp_path, path=tmp_path / "p.toml")
    member = profile.member(profile.candidates[1])
    assert preflight(member, profile.member_workspace("q4")) == [
        f"{profile.where}: [[candidates]] 'q4' llama.cpp serving m.gguf: the suite's windows have up to 300 "
        "tokens, its context takes 255; set n_ctx = 301 (or more) in [[candidates]] 'q4'"]


def test_a_missing_reference_gguf_stops_the_run_before_launching(tmp_path: Path, fake_engine: Path) -> None:
    """[reference] capture = "llama-cpp" with a model file that is not there: one line naming
    [reference] model, exit 2, no server started (it was started, exited, and the run ended 1)."""
    import shutil

    make_suite(tmp_path / "suite", windows=2, context=20, vocab=64)
    shutil.rmtree(tmp_path / "suite" / "ref")  # the run captures it
    write_gguf(tmp_path / "q8.gguf", vocab=64)
    profile = tmp_path / "run.toml"
    profile.write_text('[reference]\nlocal_dir = "suite"\ncapture = "llama-cpp"\nmodel = "f16.gguf"\n'
                       '[[candidates]]\nname = "q8"\nkind = "llama-cpp"\nmodel = "q8.gguf"\nport = 0\n'
                       f'[run]\nworkdir = "{tmp_path / "w"}"\n')
    proc = subprocess.run([sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    missing = tmp_path / "f16.gguf"
    assert proc.stderr.splitlines() == [f"kldtui: error: {profile}: [reference] model = '{missing}': no such "
                                        "file; give the path of the .gguf file"]
    assert "Traceback" not in proc.stdout and not (tmp_path / "w" / "server.log").exists()
    # once the reference is there, its model is not needed again: nothing is said of it
    make_suite(tmp_path / "captured", windows=2, context=20, vocab=64)
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "q8.gguf", "port": 0},
                 reference={"local_dir": str(tmp_path / "captured"), "capture": "llama-cpp",
                            "model": "f16.gguf"})
    assert preflight(p, p.workspace()) == []


def test_a_misspelled_llama_arg_is_refused_before_launching(tmp_path: Path, fake_engine: Path) -> None:
    """llama_cpp.Llama takes ``**kwargs`` and drops a name it does not know without a word: a
    misspelled ``flash_atn`` ran the whole campaign without flash attention. The kind asks the
    interpreter's llama-cpp-python which keywords it takes; the server refuses one too."""
    (fake_engine / "llama_cpp" / "__init__.py").write_text(
        "class Llama:\n"
        "    def __init__(self, model_path, *, n_ctx=512, flash_attn=False, type_k=None, **kwargs):\n"
        "        pass\n")
    write_gguf(tmp_path / "m.gguf")
    typo = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "port": 0,
                               "llama_args": {"flash_atn": "true"}}).candidate
    assert KIND.problems(typo) == [f"{typo.label} llama_args: 'flash_atn' is not a llama_cpp.Llama keyword; "
                                   "did you mean 'flash_attn'?"]
    right = _profile(tmp_path, {"kind": "llama-cpp", "model": "m.gguf", "port": 0,
                                "llama_args": {"flash_attn": "true"}}).candidate
    assert KIND.problems(right) == []
    run = [sys.executable, "-m", "kldtui.embedded.llama_cpp", "--model", str(tmp_path / "m.gguf"),
           "--port", "0"]
    proc = subprocess.run(run + ["--llama-arg", "zzz=1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("kldtui.embedded.llama_cpp: --llama-arg 'zzz' is not a llama_cpp.Llama "
                                   "keyword; give one of its keywords")


def test_the_vocabulary_is_held_against_the_reference_gguf_the_run_will_capture(tmp_path: Path,
                                                                                fake_engine: Path) -> None:
    """Before the reference is captured ([reference] capture = "llama-cpp") its GGUF says its
    vocabulary: a candidate of another width is refused before launching (it was found after the
    whole reference was captured, at the candidate's first chunk)."""
    import shutil

    make_suite(tmp_path / "suite", windows=2, context=20, vocab=64)
    shutil.rmtree(tmp_path / "suite" / "ref")
    write_gguf(tmp_path / "f16.gguf", vocab=64)
    write_gguf(tmp_path / "trimmed.gguf", vocab=60)
    reference = {"local_dir": str(tmp_path / "suite"), "capture": "llama-cpp", "model": "f16.gguf"}
    p = _profile(tmp_path, {"kind": "llama-cpp", "model": "trimmed.gguf", "port": 0}, reference=reference)
    problems = preflight(p, p.workspace())
    assert len(problems) == 1
    assert ("[candidate] llama.cpp serving trimmed.gguf: its vocabulary has 60 tokens, the reference's 64 "
            "([reference] llama.cpp serving f16.gguf); the logits cannot be compared") in problems[0]
    write_gguf(tmp_path / "same.gguf", vocab=64)
    same = _profile(tmp_path, {"kind": "llama-cpp", "model": "same.gguf", "port": 0}, reference=reference)
    assert preflight(same, same.workspace()) == []
