"""`kldtui demo --hidden --batch`: the hidden-state workflow end to end on the embedded server. The
suite publishes the reference's final hidden states and LM head (no logits); each candidate is
captured in hidden mode and replayed with its own head, which the built-in model writes (it has no
checkpoint to export from); the reports count contexts and the leaderboard's ties count source
clusters; the leader's repeat capture measures the noise model the verdicts use (the embedded
server's run-to-run noise moves its hidden states); a second run redoes nothing. It runs in the folder
of the logits demo (one folder holds every demo), whose noise model is of another suite and stays."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kldtui.embedded.model import TinyModel
from kldtui.formats import fidelity as fid
from kldtui.formats.report_names import leaderboard_file_name, noise_model_file_name
from kldtui.workflow import demo
from kldtui.workspace import DEMO_HIDDEN_PROFILE, profile_key
from tests.fixtures_campaign import noise_model_of
from tests.fixtures_demo import run_uninterrupted

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]  # the whole hidden demo twice, the logits one


def _demo(workdir: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "kldtui", "demo", "--hidden", "--batch", "--plain",
                           "--workdir", str(workdir)],
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _said_twice(out: str) -> list[str]:
    """The lines of batch output that one candidate's part of it (each ``campaign: candidate`` line
    starts one; its windows' lines are the next candidate's too) says more than once: a progress
    line counts without its time stamp, rate and ETA, so "verify LM head 260/260 KiB (100%)"
    twice is the same line."""
    parts = re.split(r"^\d\d:\d\d:\d\d campaign: (?:candidate|repeat capture) .*$", out, flags=re.M)
    twice = []
    for part in parts:
        lines = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in part.splitlines() if line.strip()]
        lines = [re.sub(r"(\(\d+%\)),.*$", r"\1", line) for line in lines]
        twice += [line for line, n in Counter(lines).items() if n > 1]
    return twice


def _expected_repeat_kl(perturb: float) -> float:
    """The mean KL between two captures of the demo's model under the embedded server's run-to-run
    noise on the hidden states, from the model alone: to second order, each row's KL is half the
    variance under p of the logits' difference ``W · (e1 - e2)``, so ``s^2 tr Cov_p(W)`` with ``s``
    the states' noise scale (``p`` the row's distribution, ``W`` the head without its bias column)."""
    model = TinyModel(demo.DEMO_VOCAB, seed=demo.DEMO_MODEL_SEED, perturb=perturb)
    rows = model.head[:, :-1].astype(np.float64)
    scale = model.state_noise_scale(demo.DEMO_RUNTIME_NOISE)
    per_row = []
    for context in demo.demo_contexts():
        logits = model.logits(model.hidden(context.tokens)[:-1]).astype(np.float64)  # the scored rows
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        mean = p @ rows
        per_row.append(scale ** 2 * (p @ (rows * rows).sum(axis=1) - (mean * mean).sum(axis=1)))
    return float(np.concatenate(per_row).mean())


def test_kldtui_demo_hidden_compares_hidden_states_and_ranks_over_source_clusters(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    # the logits demo first, in the same folder: each demo rewrote the folder's one noise-model.json,
    # so the other's model flipped to one measured on another suite; and its one leaderboard.json
    key = profile_key(DEMO_HIDDEN_PROFILE)  # names this profile's leaderboard and noise model
    board_path = work / leaderboard_file_name(key)
    logits_model = noise_model_of(run_uninterrupted(work))
    logits_noise = logits_model.read_bytes()
    out = _demo(work)
    assert (work / "kldtui-hidden.toml").read_text() == demo.HIDDEN_PROFILE_TEXT
    suite = work / "suite-hidden"
    assert not (suite / "ref").exists() and (suite / fid.CHECKSUMS).is_file()  # hidden states, no logits
    contexts = len(demo.DEMO_DOMAINS) * demo.DEMO_CONTEXTS_PER_SOURCE
    clusters = len(demo.DEMO_DOMAINS)

    for name, perturb in demo.DEMO_CANDIDATES.items():
        folder = work / "candidates" / f"{name}-hidden"
        # the candidate's own head, written by the built-in model: the rounded model's, not the suite's
        own = TinyModel(demo.DEMO_VOCAB, seed=demo.DEMO_MODEL_SEED, perturb=perturb)
        own.write_head(tmp_path / name)
        head = fid.load_lm_head(folder / fid.LM_HEAD_DIR)
        assert head.raw_tensor_sha256 == fid.load_lm_head(tmp_path / name).raw_tensor_sha256
        assert head.raw_tensor_sha256 != fid.load_lm_head(suite / fid.LM_HEAD_DIR).raw_tensor_sha256
        check = json.loads((folder / "hidden-replay-qualification.json").read_text())
        assert check["status"] == "qualified" and check["kl_live_to_replay"]["max"] == 0.0
        report = json.loads((work / f"comparison-{name}-hidden.json").read_text())
        assert report["reference"]["kind"] == "hidden" and report["candidate"]["kind"] == "hidden"
        assert report["candidate"]["lm_head_file_sha256"] == head.file_sha256
        assert sorted(e["context_index"] for e in report["per_context"]) == list(range(contexts))
        assert len({e["source_cluster_id"] for e in report["per_context"]}) == clusters

    board = json.loads(board_path.read_text())
    assert board_path.name == "leaderboard-kldtui-hidden.json"
    logits_board = json.loads((work / "leaderboard.json").read_text())  # the logits demo's, kept
    assert [r["name"] for r in logits_board["rows"]] == ["fine", "coarse"]
    assert board["unit"] == "context" and board["windows"] == contexts
    assert board["cluster_unit"] == "source_cluster" and board["tie_units"] == clusters
    assert [(r["name"], r["is_best"]) for r in board["rows"]] == [("fine-hidden", True),
                                                                  ("coarse-hidden", False)]
    worse = board["rows"][1]["verdict_vs_best"]
    assert worse.startswith("coarse-hidden is worse than fine-hidden by ") and \
        f", over {clusters} source clusters (analysis partition);" in worse, worse
    # the leader's repeat capture: the server's noise moved its hidden states, so the two captures
    # measure a noise model, which the verdicts use (it said "the variation between two captures was
    # not measured": the demo had no repeat, as a repeat of identical states would have measured nothing)
    first = work / "candidates" / "fine-hidden" / fid.hidden_file_name(0)
    repeat = work / "repeat" / "fine-hidden" / fid.hidden_file_name(0)
    assert first.read_bytes() != repeat.read_bytes()
    assert board["noise_floor"]["kind"] == "measured", board["noise_floor"]
    assert board["noise_model"].startswith("measured repeat variation ") and \
        f" from 2 captures of one candidate over {contexts} contexts " in board["noise_model"], board
    unmeasured = "the variation between two captures was not measured"
    assert unmeasured not in worse, worse
    suite_hash = json.loads((work / "comparison-fine-hidden.json").read_text())["suite_token_hash_sha256"]
    model = work / noise_model_file_name(suite_hash, key)  # this profile's model, the logits demo's kept
    assert sorted(work.glob("noise-model*.json")) == sorted([logits_model, model])
    assert logits_model.read_bytes() == logits_noise
    noise = json.loads(model.read_text())
    assert noise["suite_token_hash_sha256"] == suite_hash
    assert len(noise["metric_repeat"]["per_window"]) == contexts
    assert 0 < noise["kl_mean"] < board["rows"][0]["mean"]  # run-to-run noise, below the quantization's
    # the repeat KL between the two captures is their noise's alone: both are replayed with the
    # candidate's head (the first, compared as the reference, was replayed with the suite's, which added
    # the heads' difference: 0.0036 where the noise gives 0.0015, as the logits demo measures)
    fine_head = fid.load_lm_head(work / "candidates" / "fine-hidden" / fid.LM_HEAD_DIR).file_sha256
    between = json.loads((work / "repeat" / "repeat-kl-fine-hidden.json").read_text())
    assert between["comparator"]["lm_head_file_sha256"] == fine_head
    assert between["comparator"]["candidate_lm_head_file_sha256"] == fine_head
    expected = _expected_repeat_kl(demo.DEMO_CANDIDATES["fine"])
    assert abs(noise["kl_mean"] / expected - 1) < 0.15, (noise["kl_mean"], expected)
    assert "    noise model: measured repeat variation " in out, out[-3000:]
    assert re.search(r"^    -  fine-hidden\.repeat .* tied with fine-hidden \(its first capture\)", out,
                     flags=re.M), out[-3000:]
    diff = subprocess.run([sys.executable, "-m", "kldtui", "diff", str(work / "comparison-fine-hidden.json"),
                           str(work / "comparison-coarse-hidden.json"), "--noise",
                           str(model)], capture_output=True, text=True, timeout=120)
    assert diff.returncode == 0 and "noise model: measured repeat variation " in diff.stdout, diff.stdout
    assert unmeasured not in diff.stdout and "noise model: none" not in diff.stdout, diff.stdout
    assert f"export-head: done - LM head [{demo.DEMO_VOCAB}, " in out
    # each compare (the repeat's too) names its two heads once, not once per context it compares as
    # it is finalized, and says their hashes were checked (a quick hash prints no progress line)
    assert out.count("SHA-256 matches its manifest, mapped from the page cache") == \
        2 * (len(demo.DEMO_CANDIDATES) + 1), out[-3000:]  # and the leader's repeat
    # read over SSH: every fact once. The demo printed each head's "verify LM head ... (100%)" twice
    # and its file's line twice, every context's 0 % and 100 % rows, and the reference's check once
    # more for every candidate
    assert _said_twice(out) == [], _said_twice(out)
    assert not [line for line in out.splitlines()
                if "verify LM head" in line or "weight.safetensors " in line], out[-3000:]
    assert out.count("reference: done - ") == 1, out[-3000:]
    assert f"campaign: final leaderboard ({contexts} contexts, " in out, out[-3000:]
    assert f"over the {clusters} source clusters of the {contexts} contexts" in out, out[-3000:]
    assert " window" not in out.replace("window-", ""), [line for line in out.splitlines()
                                                         if " window" in line]

    # run again: nothing is captured, exported, finalized or compared again
    files = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.is_file()}
    again = _demo(work)
    changed = sorted(str(p.relative_to(work)) for p in work.rglob("*")
                     if p.is_file() and files.get(p) != p.stat().st_mtime_ns)
    assert changed == [board_path.name], changed
    assert "server: started" not in again and "export-head" not in again, again[-3000:]
    assert _said_twice(again) == [], _said_twice(again)
    for name in demo.DEMO_CANDIDATES:
        assert f"campaign: note: {name}-hidden: compared earlier" in again, again[-3000:]
    # and the logits demo again: its own model is read, neither measured again nor the other's touched
    run_uninterrupted(work)
    changed = sorted(str(p.relative_to(work)) for p in work.rglob("*")
                     if p.is_file() and files.get(p) != p.stat().st_mtime_ns)
    assert changed == [board_path.name, "leaderboard.json"], changed

    # a folder an earlier version made: its repeat report replayed the first capture with the suite's
    # head, and the noise model measured from it holds the heads' difference too (0.0036, not 0.0015).
    # The resume compares the two captures again and measures the noise model again, not reusing it
    stale = json.loads((work / "repeat" / "repeat-kl-fine-hidden.json").read_text())
    suite_head = fid.load_lm_head(suite / fid.LM_HEAD_DIR).file_sha256
    assert suite_head != fine_head
    stale["reference"]["lm_head_file_sha256"] = stale["comparator"]["lm_head_file_sha256"] = suite_head
    (work / "repeat" / "repeat-kl-fine-hidden.json").write_text(json.dumps(stale))
    # ... and wrote its noise model under the one name earlier versions used
    old = json.loads(model.read_text())
    for key in ("kl_mean", "kl_reverse_mean", "threshold"):
        old[key] *= 2.4
    for entry in old["per_window"]:
        entry["kl_mean"] *= 2.4
    model.unlink()
    (work / "noise-model.json").write_text(json.dumps(old))
    resumed = _demo(work)
    said = (f"campaign: WARNING: {work / 'repeat' / 'repeat-kl-fine-hidden.json'}: its two sides were "
            f"replayed with different LM heads (the reference side with {suite_head[:12]}..., the candidate "
            f"side with {fine_head[:12]}...), as earlier versions replayed the first capture; the two "
            "captures are compared again and the noise model measured again")
    assert resumed.count(said) == 1, resumed[-3000:]
    assert "server: started" not in resumed, resumed[-3000:]  # compared again, not captured again
    between = json.loads((work / "repeat" / "repeat-kl-fine-hidden.json").read_text())
    assert between["reference"]["lm_head_file_sha256"] == fine_head
    assert between["comparator"]["lm_head_file_sha256"] == fine_head
    redone = json.loads(model.read_text())  # measured again, into this suite's own file
    assert abs(redone["kl_mean"] / expected - 1) < 0.15, (redone["kl_mean"], expected)
    assert redone["kl_mean"] == pytest.approx(noise["kl_mean"], rel=1e-9)


def test_an_interrupted_build_of_the_hidden_suite_is_finished_and_a_complete_one_kept(tmp_path: Path) -> None:
    root = tmp_path / "suite-hidden"
    demo.build_demo_hidden_suite(root)
    whole = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    demo.build_demo_hidden_suite(root)  # complete: left as it is
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()} == whole
    # stopped while the hidden states were written: no manifest, one file of them, nothing after
    for rel in (fid.CHECKSUMS, fid.TOP_MANIFEST, f"{fid.HIDDEN_DIR}/{fid.TENSOR_MANIFEST}",
                f"{fid.HIDDEN_DIR}/hidden_0001.safetensors"):
        (root / rel).unlink()
    demo.build_demo_hidden_suite(root)
    again = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert sorted(again) == sorted(whole)
    differ = {p for p, b in again.items() if b != whole[p]}  # the manifests' times, and what names them
    assert differ <= {Path(fid.TOP_MANIFEST), Path(fid.CHECKSUMS), Path(fid.HIDDEN_DIR) / fid.TENSOR_MANIFEST}
    assert fid.read_checksums(root) == {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest()
                                        for rel in fid.read_checksums(root)}
