"""A campaign's disk and memory, said before its first server starts. Every candidate keeps its
finalized logits in the work folder, so their needs add up, with the reference the campaign
captures and the leader's repeat: each candidate's own check passed a campaign that filled the
disk at its third candidate. llama.cpp candidates say what their server will hold."""

from __future__ import annotations

import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from kldtui.errors import BadInput
from kldtui.events import Event, Notice
from kldtui.text import human_bytes
from kldtui.workflow.campaign import Campaign
from kldtui.workflow.diskplan import HEADER_BYTES
from kldtui.workflow.profile import Profile, load_profile
from tests.fixtures_campaign import CAMPAIGN_CONTEXT, CAMPAIGN_WINDOWS, VOCAB, write_profile
from tests.fixtures_gguf import write_gguf

Usage = namedtuple("Usage", "total used free")
ROW = VOCAB * 4  # F32 logits
WINDOW = (CAMPAIGN_CONTEXT - 1) * ROW + HEADER_BYTES


class _Said(Exception):
    """Stops the campaign once it has said its disk (no server is started here)."""


def _run_until_said(profile: Path) -> list[Event]:
    events: list[Event] = []

    def sink(event: Event) -> None:
        events.append(event)
        if isinstance(event, Notice) and event.text.startswith("disk:"):
            raise _Said

    with pytest.raises(_Said):
        Campaign(load_profile(profile), sink).run_all()
    return events


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    real = shutil.disk_usage

    def usage(path: object) -> Usage:
        total, used, _ = real(path)  # type: ignore[arg-type]
        return Usage(total, used, free)

    monkeypatch.setattr("kldtui.workflow.preflight.shutil.disk_usage", usage)


def test_the_candidates_disk_adds_up_and_is_said_before_the_first_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = write_profile(tmp_path / "c", repeat_leader=True)  # three candidates, reference captured
    reference = (CAMPAIGN_WINDOWS + 1) * WINDOW  # its windows and the repeat of its first
    candidates = 3 * CAMPAIGN_WINDOWS * WINDOW
    repeat = CAMPAIGN_WINDOWS * WINDOW
    chunks = 2 * (CAMPAIGN_CONTEXT - 1) * ROW
    total = reference + candidates + repeat + chunks
    # room for any one candidate, not for the campaign: refused, one line, nothing served
    _free(monkeypatch, total - 1)
    with pytest.raises(BadInput) as info:
        Campaign(load_profile(profile), lambda event: None).run_all()
    said = str(info.value)
    assert said.startswith(f"{profile}: disk: the campaign needs {human_bytes(total)} at peak (the reference "
                           f"9 windows {human_bytes(reference)}, q8 8 windows {human_bytes(8 * WINDOW)}, "
                           "q4 8 windows")
    assert "the leader's repeat 8 windows" in said and "fewer candidates" in said
    assert not (tmp_path / "c" / "capture").exists() and not (tmp_path / "c" / "reference-run").exists()
    # room enough: said before the reference's server starts
    _free(monkeypatch, total)
    events = _run_until_said(profile)
    notes = [e.text for e in events if isinstance(e, Notice)]
    assert notes[-1].startswith(f"disk: the campaign needs {human_bytes(total)} at peak (")
    assert not any(type(e).__name__ == "ServerStarted" for e in events)


def test_llama_cpp_candidates_say_their_memory_before_the_first_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"  # an importable llama_cpp for the interpreter's check
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(site))
    profile = write_profile(tmp_path / "c", {"q8": 0.04})
    write_gguf(tmp_path / "c" / "q4.gguf", vocab=VOCAB)
    with profile.open("a") as handle:
        handle.write('\n[[candidates]]\nname = "gguf"\nkind = "llama-cpp"\nmodel = "q4.gguf"\nn_ctx = 256\n'
                     "port = 0\n")
    events: list[Event] = []

    def sink(event: Event) -> None:
        events.append(event)
        if isinstance(event, Notice) and event.text.startswith("memory:"):
            raise _Said

    with pytest.raises(_Said):
        Campaign(load_profile(profile), sink).run_all()
    line = events[-1].text  # type: ignore[attr-defined]
    assert line.startswith("memory: gguf: llama.cpp needs about ")
    assert "logits of every position 512 KiB" in line  # n_ctx 256 x 512 tokens x 4 bytes
    assert "compute buffers" in line and "of this host's" in line
    assert any(isinstance(e, Notice) and e.text.startswith("disk: the campaign needs") for e in events)


def test_a_disk_that_cannot_be_reckoned_yet_is_said_so(tmp_path: Path) -> None:
    """vLLM servers say their vocabulary only once they answer: before the reference is captured
    the campaign says it cannot reckon the disk yet, and when it will."""
    profile = write_profile(tmp_path / "c", {"q8": 0.04})
    text = profile.read_text().replace('capture = "embedded"', 'capture = "vllm"\nmodel = "org/reference"')
    text = text.replace('kind = "embedded"', 'kind = "vllm"\nmodel = "org/q8"')
    for key in ("model_seed", "vocab_size", "perturb", "max_num_batched_tokens"):
        text = "\n".join(line for line in text.splitlines() if not line.startswith(key)) + "\n"
    profile.write_text(text)
    said = [e.text for e in _run_until_said(profile) if isinstance(e, Notice)]
    assert said[-1] == ("disk: not reckoned before the reference's logits are there (their vocabulary sets "
                        "the size of a row); each candidate's need is said before its capture")


def _campaign_in_mode(tmp_path: Path, mode: str) -> Path:
    """A one-candidate campaign in capture ``mode`` over a logits suite whose reference is there (made
    with the suite, so [reference] captures nothing)."""
    from tests.fixtures_compare import make_suite

    profile = write_profile(tmp_path / "c", {"q8": 0.04})
    shutil.rmtree(tmp_path / "c" / "suite")
    make_suite(tmp_path / "c" / "suite", windows=CAMPAIGN_WINDOWS, context=CAMPAIGN_CONTEXT, vocab=VOCAB)
    text = profile.read_text().replace('capture = "embedded"\n', "")
    profile.write_text(text + f'\n[capture]\nmode = "{mode}"\n')
    return profile


def test_score_mode_says_it_writes_no_candidate_logits(tmp_path: Path) -> None:
    """With the reference there and [capture] mode = "score", the campaign writes no logits: said so
    (it said nothing of the disk at all)."""
    profile = _campaign_in_mode(tmp_path, "score")
    said = [e.text for e in _run_until_said(profile) if isinstance(e, Notice)]
    assert said[-1] == "disk: score mode writes no candidate logits, a few dozen bytes a position"



def test_a_hidden_state_suites_campaign_counts_its_disk_in_contexts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a hidden-state suite (its reference the stored hidden states) the disk line counts
    contexts ("q8 N contexts ...") and its hint says "[run] stop_window for fewer contexts" (the
    setting keeps its name); both said windows. A logits suite's line still says windows
    (test_the_candidates_disk_adds_up_and_is_said_before_the_first_server)."""
    import re

    from tests import fidelity_fixture as fx

    folder = tmp_path / "c"
    fx.build(folder / "suite", contexts=8)
    profile = write_profile(folder, {"q8": 0.04, "q4": 0.12})
    text = profile.read_text().replace('capture = "embedded"\n', 'logits_dir = "reference-hidden"\n')
    profile.write_text(text.replace(f"vocab_size = {VOCAB}", f"vocab_size = {fx.VOCAB}"))
    _free(monkeypatch, 1)
    with pytest.raises(BadInput) as info:
        Campaign(load_profile(profile), lambda event: None).run_all()
    said = str(info.value)
    assert re.search(r"at peak \(q8 \d+ contexts [^,]+, q4 \d+ contexts [^,]+, capture chunks ", said), said
    assert said.endswith("(or [run] stop_window for fewer contexts, or fewer candidates)"), said
    assert "window" not in said.replace("stop_window", ""), said


def test_a_hidden_mode_campaign_counts_its_hidden_states_and_live_logits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[capture] mode = "hidden" said "disk: score mode writes no candidate logits", which was false:
    each candidate writes every context's BF16 hidden states (the reference's hidden width, 2 bytes
    a value) and the replay check's live logits (F32) of its sample; the plan counts both."""
    from tests import fidelity_fixture as fx

    folder = tmp_path / "c"
    fx.build(folder / "suite", contexts=8)
    profile = write_profile(folder, {"q8": 0.04, "q4": 0.12})
    text = profile.read_text().replace('capture = "embedded"\n', 'logits_dir = "reference-hidden"\n')
    text = text.replace(f"vocab_size = {VOCAB}", f"vocab_size = {fx.VOCAB}")
    profile.write_text(text + '\n[capture]\nmode = "hidden"\nreplay_check = 2\n')
    rows = fx.CONTEXT - 1
    hidden = 8 * (rows * 2 * fx.HIDDEN + HEADER_BYTES)
    live = 2 * (rows * 4 * fx.VOCAB + HEADER_BYTES)
    candidate = hidden + live
    _free(monkeypatch, 1)
    with pytest.raises(BadInput) as info:
        Campaign(load_profile(profile), lambda event: None).run_all()
    said = str(info.value)
    assert "score mode" not in said and "logits" not in said.split("(q8", 1)[0], said
    assert f"(q8 8 contexts {human_bytes(candidate)}, q4 8 contexts {human_bytes(candidate)}, " in said, said
    chunks = 2 * rows * 2 * fx.HIDDEN + 2 * rows * 4 * fx.VOCAB  # two contexts of each at once
    assert f"capture chunks {human_bytes(chunks)})" in said, said


def test_a_hidden_mode_campaign_without_a_hidden_width_says_what_it_writes(tmp_path: Path) -> None:
    """Hidden mode against a reference that cannot say the model's hidden width (logits, no LM
    head): the line says what hidden mode writes, not score mode's words."""
    profile = _campaign_in_mode(tmp_path, "hidden")
    said = [e.text for e in _run_until_said(profile) if isinstance(e, Notice)]
    assert said[-1].startswith("disk: hidden mode writes each window's hidden states (BF16, 2 bytes x the "
                               "model's hidden width a position) and the replay check's live logits; "
                               "not reckoned before the width is known"), said[-1]


def _single_run_on_hidden_states(folder: Path, mode: str) -> Profile:
    """A run's profile in ``folder`` against a hidden-state suite's stored hidden states (8 contexts)."""
    from tests import fidelity_fixture as fx
    from tests.fixtures_campaign import candidate_table

    fx.build(folder / "suite", contexts=8)
    table = candidate_table("q8", 0.04).replace("[[candidates]]\nname = \"q8\"\n", "[candidate]\n")
    table = table.replace(f"vocab_size = {VOCAB}", f"vocab_size = {fx.VOCAB}")
    (folder / "kldtui.toml").write_text(
        '[reference]\nlocal_dir = "suite"\nlogits_dir = "reference-hidden"\n\n' + table
        + f'\n[run]\nworkdir = "."\n\n[capture]\nmode = "{mode}"\n')
    return load_profile(folder / "kldtui.toml")


@pytest.mark.parametrize("mode", ["logits", "hidden"])
def test_a_single_run_on_a_hidden_state_suite_checks_its_disk_in_contexts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A run against a hidden-state suite's stored hidden states skipped the disk check (no logits
    manifest to read the vocabulary from: the LM head says it now); short of disk it says
    "finalized contexts" and "fewer contexts", in logits mode (F32 logits) and in hidden mode (the
    hidden states and the replay check's live logits)."""
    from kldtui.workflow import preflight
    from tests import fidelity_fixture as fx

    folder = tmp_path / "r"
    profile = _single_run_on_hidden_states(folder, mode)
    _free(monkeypatch, 1)
    said = preflight._disk_problem(profile, profile.workspace()) or ""
    rows = fx.CONTEXT - 1
    row = 2 * fx.HIDDEN if mode == "hidden" else 4 * fx.VOCAB
    assert f"{profile.where}: disk: the run needs " in said and " 8 finalized contexts " in said, said
    assert said.endswith("(or [run] stop_window for fewer contexts)"), said
    from kldtui.formats.suite import load_suite

    suite = load_suite(folder / "suite")
    windows = profile.windows(suite)
    live = profile.capture.mode.live_sample(suite, windows, None)  # the replay check's sentinels
    assert len(live) == (2 if mode == "hidden" else 0)
    need = preflight.capture_need(profile, suite, windows, windows, *preflight.reference_widths(
        profile.workspace()))  # type: ignore[arg-type]
    assert need is not None and need.finalized == 8 * (rows * row + HEADER_BYTES) + len(live) * (
        rows * 4 * fx.VOCAB + HEADER_BYTES)


@pytest.mark.parametrize("width", [2**30, 10**400], ids=["2^30", "401 digits"])
def test_a_forged_hidden_width_plans_no_disk_from_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """A reference's manifest with no records yet, stating hidden_width 2^30, planned the disk from it
    (2 GiB a position), and 401 digits crashed the plan's arithmetic (OverflowError, a traceback). The
    width is refused on load: the plan takes the LM head's, and loading the manifest (the reference
    stage) says what is wrong with it, one line naming it."""
    from kldtui.formats import fidelity as fid
    from kldtui.workflow import preflight
    from tests import fidelity_fixture as fx

    folder = tmp_path / "r"
    profile = _single_run_on_hidden_states(folder, "hidden")
    manifest = folder / "suite" / fid.HIDDEN_DIR / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc.update(contexts=[], total_size_bytes=0, hidden_width=width)
    manifest.write_text(json.dumps(doc))
    assert preflight.reference_widths(profile.workspace()) == (fx.VOCAB, fx.HIDDEN)  # the LM head's
    _free(monkeypatch, 1)
    said = preflight._disk_problem(profile, profile.workspace()) or ""
    from kldtui.formats.suite import load_suite

    suite = load_suite(folder / "suite")
    windows = profile.windows(suite)
    need = preflight.capture_need(profile, suite, windows, windows, fx.VOCAB, fx.HIDDEN)
    assert need is not None and need.total < 2**30  # 2^30 wide: some TiB
    assert f"{profile.where}: disk: the run needs {human_bytes(need.total)} at peak: 8 finalized contexts " \
        in said, said
    with pytest.raises(BadInput, match="hidden_width") as info:
        fid.load_tensor_manifest(manifest)
    assert str(manifest) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("mode", ["logits", "hidden"])
def test_a_small_runs_disk_note_says_its_size_in_a_unit_that_shows_it(tmp_path: Path, mode: str) -> None:
    """Before capturing, a run says the disk it needs at peak. Its amounts were written in GiB to one
    decimal, so a small run (the hidden demo's) said "this run needs 0.0 GiB at peak: 24 finalized
    contexts 0.0 GiB + capture chunks 0.0 GiB" right after the campaign's "18.8 MiB": every amount
    now reads in the unit that shows it, as the campaign's line does (kldtui.text.human_bytes)."""
    import re

    from kldtui.formats.suite import load_suite
    from kldtui.workflow import preflight
    from kldtui.workflow.pipeline import Pipeline

    folder = tmp_path / "r"
    profile = _single_run_on_hidden_states(folder, mode)
    events: list[Event] = []
    Pipeline(profile, events.append)._disk_preflight(set())
    said = [e.text for e in events if isinstance(e, Notice) and e.stage == "capture"]
    assert len(said) == 1 and said[0].startswith("disk: this run needs "), said
    suite = load_suite(folder / "suite")
    windows = profile.windows(suite)
    need = preflight.capture_need(profile, suite, windows, windows, *preflight.reference_widths(
        profile.workspace()))  # type: ignore[arg-type]
    assert need is not None and 0 < need.total < 2**30  # a small run: well under a GiB
    assert said[0].startswith(f"disk: this run needs {human_bytes(need.total)} at peak: 8 finalized contexts "
                              f"{human_bytes(need.finalized)} + capture chunks {human_bytes(need.chunks)}")
    amounts = re.findall(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)\b", said[0])
    assert len(amounts) >= 4 and all(float(number) > 0 for number, _ in amounts), said[0]  # free space too
    # "70.0 GiB free" holds "0.0 GiB": only an amount that is itself zero counts
    assert not re.search(r"(?<![\d.])0\.0 GiB", said[0]) and " GiB at peak" not in said[0], said[0]
