"""``kldtui diff``, ``kldtui leaderboard`` and ``kldtui noise`` (from reports) end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.decide import PUBLISHED_SUITE_HASH, load_floor
from tests.fixtures_decide import make_report, suite_domains, write_report
from tests.fixtures_hostile import plant

DOMAINS = suite_domains(32)


def _base(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).gamma(4.0, 0.0025, 32)


def test_diff_prints_table_and_verdict_and_writes_json(tmp_path, capsys):
    base = _base()
    a = write_report(tmp_path / "a.json", make_report(base, DOMAINS, candidate_dir="/runs/q4"))
    b = write_report(tmp_path / "b.json", make_report(base * 1.5, DOMAINS, candidate_dir="/runs/q3"))
    out_json = tmp_path / "diff.json"
    code = main(["diff", str(a), str(b), "--bootstrap-samples", "1000", "--json", str(out_json),
                 "--per-window"])
    out = capsys.readouterr().out
    assert code == 0
    assert "noise model: none" in out
    lines = out.splitlines()
    assert any(line.startswith("all ") and line.rstrip().endswith("A closer (provisional)") for line in lines)
    assert any(line.startswith("code ") for line in lines)
    assert lines[-2].startswith("verdict: q3 is worse than q4 by ")
    doc = json.loads(out_json.read_text())
    assert doc["overall"]["outcome"] == "a_closer" and doc["bootstrap_samples"] == 1000
    assert doc["a"]["name"] == "q4" and doc["b"]["name"] == "q3"
    assert len(doc["per_window"]["difference"]) == 32
    assert not list(tmp_path.glob(".*tmp"))


def test_diff_shows_kl_by_confidence_and_depth_of_both(tmp_path, capsys):
    """Each side's bucket means with its own window-clustered interval, in the text and --json; a bucket
    only one report has is left out."""
    base = _base(3)
    ra = make_report(base, DOMAINS, candidate_dir="/runs/q4")
    rb = make_report(base * 1.2, DOMAINS, candidate_dir="/runs/q3")
    ra["kl_by_reference_confidence"] = [
        {"low": 0.0, "high": 0.25, "positions": 900, "kl_mean": 0.031, "top1_agreement": 0.5,
         "ci95_low": 0.028, "ci95_high": 0.034, "windows": 32},
        {"low": 0.95, "high": 1.0, "positions": 4000, "kl_mean": 0.0008, "top1_agreement": 0.99,
         "ci95_low": 0.0006, "ci95_high": 0.001, "windows": 32}]
    rb["kl_by_reference_confidence"] = [
        {"low": 0.0, "high": 0.25, "positions": 950, "kl_mean": 0.037, "top1_agreement": 0.45,
         "ci95_low": 0.033, "ci95_high": 0.041, "windows": 32}]
    for r, k in ((ra, 0.016), (rb, 0.019)):
        r["kl_by_position"] = [{"start": 0, "stop": 256, "positions": 8192, "kl_mean": k,
                                "ci95_low": k * 0.9, "ci95_high": k * 1.1, "windows": 32}]
    a = write_report(tmp_path / "a.json", ra)
    b = write_report(tmp_path / "b.json", rb)
    out_json = tmp_path / "diff.json"
    assert main(["diff", str(a), str(b), "--bootstrap-samples", "200", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "KL by reference confidence, A and B (each with its own window-clustered 95 % interval" in out
    assert any(line.split() == ["[0,0.25)", "A", "0.031", "[0.028,", "0.034]", "B", "0.037", "[0.033,",
                                "0.041]"] for line in out.splitlines())
    assert "[0.95,1]" not in out  # only A has it
    assert any(line.split()[:3] == ["0-255", "A", "0.016"] for line in out.splitlines())
    doc = json.loads(out_json.read_text())
    assert doc["kl_by_reference_confidence"] == [
        {"bucket": "[0,0.25)", "kl_a": 0.031, "ci95_low_a": 0.028, "ci95_high_a": 0.034, "kl_b": 0.037,
         "ci95_low_b": 0.033, "ci95_high_b": 0.041}]
    assert doc["kl_by_depth"][0]["bucket"] == "0-255" and doc["kl_by_depth"][0]["kl_b"] == 0.019


def test_diff_uses_a_stored_floor_and_says_so(tmp_path, capsys):
    base = _base(2)
    pa = write_report(tmp_path / "a.json", make_report(base, DOMAINS, candidate_dir="/r/a"))
    pb = write_report(tmp_path / "b.json", make_report(base + 0.002, DOMAINS, candidate_dir="/r/b"))
    repeat = make_report(np.full(32, 0.003), DOMAINS, reference_dir="/r/run1", candidate_dir="/r/run2")
    rep = write_report(tmp_path / "repeat.json", repeat)
    floor = tmp_path / "floor.json"
    # the report's capture folders do not exist here: whether they hold one model cannot be checked
    assert main(["noise", str(rep), "--output", str(floor)]) == 2
    assert "cannot check that they are captures of one model" in capsys.readouterr().err
    assert main(["noise", str(rep), "--output", str(floor), "--allow-different-models"]) == 0
    assert "repeat KL between the captures: mean 0.003" in capsys.readouterr().out
    assert load_floor(floor).per_window[5] == 0.003
    assert main(["diff", str(pa), str(pb), "--bootstrap-samples", "500", "--noise", str(floor)]) == 0
    out = capsys.readouterr().out
    assert f"noise model: repeat KL 0.003 between two captures of one model (measured: report {rep})" in out
    assert "verdict: b is worse than a by 0.002 KL" in out
    assert "provisional: smaller than the repeat KL" in out
    # the measured repeat variation of the metric: two captures of a against the reference
    rng = np.random.default_rng(20)
    again = write_report(tmp_path / "a2.json", make_report(base + rng.normal(0, 1e-4, 32), DOMAINS,
                                                          candidate_dir="/r/a-again"))
    model = tmp_path / "noise.json"
    assert main(["noise", str(pa), str(again), "--repeat-report", str(rep), "--output", str(model),
                 "--allow-different-models"]) == 0
    out = capsys.readouterr().out
    assert "repeat variation of the metric: measured repeat variation" in out and "2 captures" in out
    assert "over 32 windows (per-window sd " in out  # a logits suite's units (contexts of a hidden-state one)
    assert "repeat KL between" in out and "over 32 windows\n" in out
    assert main(["diff", str(pa), str(pb), "--bootstrap-samples", "500", "--noise", str(model)]) == 0
    out = capsys.readouterr().out
    assert "noise model: measured repeat variation" in out and "not measured with one repeat" in out
    assert "over 32 windows (per-window sd " in out and "shared by every window of a capture" in out
    assert "verdict: b is worse than a by 0.002 KL" in out
    assert "provisional: the noise model has one repeat" in out
    # a second repeat measures the capture-wide variation: the verdict is no longer provisional
    third = write_report(tmp_path / "a3.json", make_report(base + rng.normal(0, 1e-4, 32), DOMAINS,
                                                          candidate_dir="/r/a-third"))
    assert main(["noise", str(pa), str(again), str(third), "--output", str(model),
                 "--allow-different-models"]) == 0
    assert "from 3 captures of one candidate over 32 windows: " in capsys.readouterr().out
    assert main(["diff", str(pa), str(pb), "--bootstrap-samples", "500", "--noise", str(model)]) == 0
    out = capsys.readouterr().out
    assert "from 3 captures of one candidate over 32 windows: " in out and "per-window sd" in out
    assert "verdict: b is worse than a by 0.002 KL" in out
    assert "larger than the measured repeat variation" in out
    assert "provisional" not in out.split("verdict:")[1]
    assert main(["diff", str(pa), str(pb), "--bootstrap-samples", "500", "--no-noise-floor"]) == 0
    assert "verdict: b is worse than a" in capsys.readouterr().out


def test_diff_refusal_is_one_line_exit_2(tmp_path, capsys):
    base = _base(3)
    pa = write_report(tmp_path / "a.json", make_report(base, DOMAINS))
    pb = write_report(tmp_path / "b.json", make_report(base, DOMAINS, suite_hash="9" * 64))
    assert main(["diff", str(pa), str(pb)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different suites" in err and "Traceback" not in err
    (tmp_path / "junk.json").write_text("{not json")
    assert main(["diff", str(pa), str(tmp_path / "junk.json")]) == 2
    assert "junk.json" in capsys.readouterr().err


def test_leaderboard_text_and_json(tmp_path, capsys):
    base = _base(4)
    paths = []
    for name, scale in (("mid", 1.4), ("best", 1.0), ("worst", 2.5)):
        paths.append(str(write_report(tmp_path / f"{name}.json", make_report(
            base * scale, DOMAINS, suite_hash=PUBLISHED_SUITE_HASH, candidate_dir=f"/runs/{name}"))))
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", *paths, "--bootstrap-samples", "500", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["#", "candidate"]
    assert lines[1].split()[:2] == ["1", "best"] and lines[1].rstrip().endswith("best")
    assert lines[2].split()[:2] == ["2", "mid"] and lines[3].split()[:2] == ["3", "worst"]
    assert "published repeat KL 0.004 for the Kimi K3 suite" in out and "Holm" in out
    # the test behind the ties and the noise model: each said once (the footer repeated the test)
    assert out.count("sign-flip test") == 1 and out.count("noise model:") == 1, out
    assert main(["leaderboard", *paths, "--bootstrap-samples", "500", "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.count("sign-flip test") == 1 and markdown.count("noise model:") == 1, markdown
    doc = json.loads(out_json.read_text())
    assert [r["name"] for r in doc["rows"]] == ["best", "mid", "worst"]
    assert doc["noise_floor"]["threshold"] == 0.004


def test_noise_refuses_mixed_inputs(tmp_path, capsys):
    rep = write_report(tmp_path / "r.json", make_report(np.full(4, 0.003), DOMAINS[:4]))
    assert main(["noise", str(rep), "--output", str(tmp_path / "f.json"), "--report", "x.json"]) == 2
    assert "apply to two run folders only" in capsys.readouterr().err
    assert main(["noise", str(tmp_path), "--output", str(tmp_path / "f.json")]) == 2
    assert "give SECOND" in capsys.readouterr().err
    assert not (tmp_path / "f.json").exists()


def test_noise_from_two_run_folders_runs_compare_and_stores_both_directions(tmp_path, capsys):
    from kldtui.decide.noise import measure_floor
    from kldtui.errors import Interrupted
    from kldtui.events import Cancel
    from tests.fixtures_compare import make_suite, oracle_rows, perturb

    suite, run1, run2, data = make_suite(tmp_path / "s", windows=4, context=17, vocab=300, seed=3,
                                         candidate=lambda rng, x: perturb(rng, x, 0.01, 0.05))
    floor_path, report_path = tmp_path / "floor.json", tmp_path / "repeat.json"
    args = ["noise", str(run1), str(run2), "--suite-manifest", str(suite.path), "--output", str(floor_path)]
    # run1 is the suite's reference and run2 a candidate: not two captures of one model
    assert main(args) == 2
    assert "is a reference capture and the other a candidate" in capsys.readouterr().err
    code = main([*args, "--report", str(report_path), "--allow-different-models"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "over 4 windows" in captured.out
    floor = load_floor(floor_path)
    for w, (x, y, nxt) in data.items():
        rows = oracle_rows(x, y, nxt)
        assert floor.per_window[w] == pytest.approx(rows["kl"].mean(), rel=1e-6)
        assert floor.per_window_reverse[w] == pytest.approx(rows["kl_reverse"].mean(), rel=1e-6)
    assert floor.threshold == max(floor.kl_mean, floor.kl_reverse_mean)
    assert floor.suite_token_hash_sha256 == suite.suite_token_hash_sha256
    assert floor.run1 == str(run1) and floor.run2 == str(run2)
    report = json.loads(report_path.read_text())
    assert report["per_window_arrays"]["kl_mean"] == [floor.per_window[w] for w in range(4)]
    # the same floor from the saved report
    assert main(["noise", str(report_path), "--output", str(tmp_path / "again.json")]) == 2
    assert "--allow-different-models" in capsys.readouterr().err
    assert main(["noise", str(report_path), "--output", str(tmp_path / "again.json"),
                 "--allow-different-models"]) == 0
    assert load_floor(tmp_path / "again.json").per_window == floor.per_window
    cancel = Cancel()
    cancel.set("stopped by the test")
    with pytest.raises(Interrupted):
        measure_floor(suite.path, run1, run2, cancel=cancel, server_signs=None)


@pytest.mark.parametrize("planted", ["link", "fifo", "folder", "no folder"])
def test_measure_floors_report_keeps_the_output_rule(tmp_path, capsys, planted):
    """The repeat report measure_floor saves (a campaign's repeat-kl-NAME.json, kldtui noise --report) is
    written by the reports' one writer: a link at its name is replaced, never written through; a FIFO
    there is replaced, never opened (nothing blocks); a folder there, or no folder to write it in, is one
    line naming the file and what to do."""
    from kldtui.decide.noise import measure_floor
    from kldtui.errors import BadInput
    from tests.fixtures_compare import make_suite

    suite, run1, run2, _ = make_suite(tmp_path / "s", windows=3, context=9, vocab=50, seed=5)
    victim = tmp_path / "yours.json"
    victim.write_text("yours\n")
    out = plant(tmp_path / "repeat-kl-candidate.json", planted, victim)
    if planted in ("link", "fifo"):
        _, report = measure_floor(suite.path, run1, run2, report_path=out, server_signs=None)
        assert not out.is_symlink() and out.is_file()
        assert json.loads(out.read_text()) == json.loads(json.dumps(report.to_json()))
        assert victim.read_text() == "yours\n"  # the link's target is untouched
        return
    with pytest.raises(BadInput) as info:
        measure_floor(suite.path, run1, run2, report_path=out, server_signs=None)
    said = str(info.value)
    assert "\n" not in said and said.startswith(f"{out}: ")
    assert said.endswith("move that folder away, then run again" if planted == "folder"
                         else f"folder {out.parent} does not exist; create it first"), said


@pytest.mark.parametrize("planted", ["link", "fifo", "folder", "no folder"])
def test_save_floor_keeps_the_output_rule_itself(tmp_path, planted):
    """save_floor applies the output-file rule itself (a caller that skipped its check could not write
    through the rule): a link at the noise model's name is replaced, never written through; a FIFO there
    is replaced, never opened; a folder there, or no folder to write it in, is one line naming the file
    and what to do, and nothing is written."""
    from kldtui.decide.noise import floor_from_reports, save_floor
    from kldtui.errors import BadInput

    floor = floor_from_reports(make_report(np.full(32, 0.003), DOMAINS, reference_dir="/r/run1",
                                           candidate_dir="/r/run2"), None, source="x")
    victim = tmp_path / "yours.json"
    victim.write_text("yours\n")
    out = plant(tmp_path / "noise-model.json", planted, victim)
    if planted in ("link", "fifo"):
        assert save_floor(out, floor) == out
        assert not out.is_symlink() and out.is_file() and victim.read_text() == "yours\n"
        assert load_floor(out).per_window == floor.per_window
        return
    with pytest.raises(BadInput) as info:
        save_floor(out, floor)
    assert str(info.value) == (
        f"{out}: is a folder where kldtui writes its noise model; move that folder away, then run again"
        if planted == "folder" else f"{out}: folder {out.parent} does not exist; create it first")
    assert not out.parent.exists() if planted == "no folder" else not any(out.iterdir())


def test_noise_s_output_made_a_folder_during_the_work_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    """kldtui noise checks --output before any work in its own words (unchanged); a folder made at the
    name after that check is the noise model's writer's one line, exit 2, not an IsADirectoryError."""
    import kldtui.decide.noise as noise

    repeat = make_report(np.full(32, 0.003), DOMAINS, reference_dir="/r/run1", candidate_dir="/r/run2")
    rep = write_report(tmp_path / "repeat.json", repeat)
    out = tmp_path / "floor.json"
    out.mkdir()
    args = ["noise", str(rep), "--output", str(out), "--allow-different-models"]
    assert main(args) == 2
    assert capsys.readouterr().err == f"kldtui: error: {out}: is a folder; give a file name\n"
    out.rmdir()
    real = noise.floor_from_reports

    def measure_then_plant(*a, **kw):
        floor = real(*a, **kw)
        out.mkdir()
        return floor

    monkeypatch.setattr(noise, "floor_from_reports", measure_then_plant)
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"kldtui: error: {out}: is a folder where kldtui writes its noise model; move that folder away, then "
        "run again\n")
    assert not any(out.iterdir())


def test_noise_refuses_a_repeat_replayed_with_two_heads(tmp_path, capsys):
    """A report of two hidden-state captures whose sides record different LM heads (an earlier version
    replayed a capture compared as the reference with the suite's head, adding the heads' difference to
    the repeat KL) is refused as a repeat, however it is given, naming the report, the heads and what
    to do; with the same head on both sides the same report is a repeat."""
    import shutil

    from tests.fixtures_compare import make_suite

    _, _, cap1, _ = make_suite(tmp_path / "s", windows=2, context=9, vocab=50, seed=1)
    cap2 = tmp_path / "s" / "again"
    shutil.copytree(cap1, cap2)  # two captures of one candidate, as their manifests say
    suite_head, own_head = "a" * 64, "b" * 64

    def repeat(path, ref_head, cand_head, ref=cap1, cand=cap2, seed=7):
        doc = make_report(np.random.default_rng(seed).gamma(4.0, 0.0004, 32), DOMAINS,
                          reference_dir=str(ref), candidate_dir=str(cand))
        doc["reference"] = {"kind": "hidden", "label": "first capture", "manifest_sha256": None,
                            "lm_head_file_sha256": ref_head}
        doc["candidate"] = {"kind": "hidden", "label": "second capture", "manifest_sha256": None,
                            "lm_head_file_sha256": cand_head}
        doc["comparator"] = {"two_pass_full_vocabulary": True, "lm_head_file_sha256": ref_head,
                             "candidate_lm_head_file_sha256": cand_head}
        return write_report(tmp_path / path, doc)

    stale, fresh = repeat("stale.json", suite_head, own_head), repeat("fresh.json", own_head, own_head)
    words = ("its two sides were replayed with different LM heads (the reference side with aaaaaaaaaaaa..., "
             "the candidate side with bbbbbbbbbbbb...), so it is not two captures of one model replayed "
             "alike; compare the two captures again with kldtui compare, which replays a capture compared "
             "as the reference with its own lm-head/ (earlier versions used the suite's), or add "
             "--allow-different-models if they really are different models")
    out = tmp_path / "noise.json"
    assert main(["noise", str(stale), "--output", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"kldtui: error: {stale}: {words}"]
    assert not out.exists()
    assert main(["noise", str(fresh), "--output", str(out)]) == 0  # one head: a repeat
    capsys.readouterr()
    # as the repeat report beside two captures' reports against the reference
    pa = write_report(tmp_path / "a.json", make_report(_base(6), DOMAINS, candidate_dir=str(cap1)))
    pb = write_report(tmp_path / "b.json", make_report(_base(6) * 1.01, DOMAINS, candidate_dir=str(cap2)))
    assert main(["noise", str(pa), str(pb), "--repeat-report", str(stale), "--output", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"kldtui: error: {stale}: {words}"]
    # as the reverse of a report of the two captures: each is checked
    back = repeat("back.json", own_head, suite_head, ref=cap2, cand=cap1, seed=8)
    assert main(["noise", str(fresh), str(back), "--output", str(out)]) == 2
    assert f"kldtui: error: {back}: its two sides were replayed with different LM heads (the reference " \
        "side with bbbbbbbbbbbb..., the candidate side with aaaaaaaaaaaa...)" in capsys.readouterr().err
    # two different models' captures, each replayed with its own head, are what the flag admits
    assert main(["noise", str(stale), "--output", str(out), "--allow-different-models"]) == 0


def test_noise_from_two_capture_folders_and_the_reference(tmp_path, capsys):
    """Two captures of one candidate plus the reference: the repeat variation of the metric and the repeat
    KL in one command; two folders that served different models are refused."""
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from tests.fixtures_compare import make_suite, perturb

    suite, ref, cap1, data = make_suite(tmp_path / "s", windows=4, context=17, vocab=300, seed=3,
                                        candidate=lambda rng, x: perturb(rng, x, 0.05, 0.1))
    rng = np.random.default_rng(4)
    cap2 = tmp_path / "s" / "again"
    written = [write_logits_array(cap2, suite.window(w), y + perturb(rng, np.zeros_like(y), 0.001, 0.002), 17)
               for w, (_, y, _) in data.items()]
    write_logits_manifest(cap2, suite, written, kind="candidate")
    out = tmp_path / "noise.json"
    assert main(["noise", str(cap1), str(cap2), "--suite-manifest", str(suite.path), "--reference", str(ref),
                 "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "repeat variation of the metric: measured repeat variation" in text and "repeat KL between" in text
    model = load_floor(out)
    assert model.has_metric and model.repeat is not None and model.repeat.windows == 4
    assert len(model.per_window) == 4
    assert 0 < model.repeat_variation_for(range(4)) < 0.01
    doc = json.loads(out.read_text())
    assert doc["metric_repeat"]["repeat_variation"] == model.repeat_variation_for(range(4))
    # a third capture that says it served another model
    other = tmp_path / "s" / "other"
    write_logits_manifest(other, suite, [write_logits_array(other, suite.window(w), y, 17)
                                         for w, (_, y, _) in data.items()], kind="candidate",
                          runtime={"model": "someone/else", "served_model_name": "else"})
    manifest = json.loads((cap2 / "manifest.json").read_text())
    manifest["runtime"] = {"model": "me/q4", "served_model_name": "q4"}
    (cap2 / "manifest.json").write_text(json.dumps(manifest))
    assert main(["noise", str(cap2), str(other), "--suite-manifest", str(suite.path), "--output",
                 str(tmp_path / "x.json")]) == 2
    assert "served 'me/q4'" in capsys.readouterr().err


def test_noise_from_two_reports_refuses_one_capture_twice(tmp_path, capsys):
    base = _base(5)
    pa = write_report(tmp_path / "a.json", make_report(base, DOMAINS, candidate_dir="/r/a"))
    same = write_report(tmp_path / "same.json", make_report(base * 1.01, DOMAINS, candidate_dir="/r/a"))
    assert main(["noise", str(pa), str(same), "--output", str(tmp_path / "n.json")]) == 2
    assert "compare the same capture" in capsys.readouterr().err
    twin = write_report(tmp_path / "twin.json", make_report(base, DOMAINS, candidate_dir="/r/a2"))
    assert main(["noise", str(pa), str(twin), "--output", str(tmp_path / "n.json")]) == 2
    # two capture folders alike, neither there to show a server start of its own: a copy cannot be ruled
    # out (a deterministic server's two captures give a model that says so: the test below)
    err = capsys.readouterr().err
    assert (f"{pa} and {twin} have identical per-window KL and cannot be shown to be two captures (/r/a has "
            "no readable manifest.json): capture the candidate again with kldtui run, from a server start of "
            "its own, compare it, and give every capture's report once (a deterministic server then gives a "
            "noise model that says so)") in err, err
    assert not (tmp_path / "n.json").exists()
    unnamed = write_report(tmp_path / "unnamed.json", make_report(base, DOMAINS, candidate_dir=None))
    assert main(["noise", str(pa), str(unnamed), "--output", str(tmp_path / "n.json")]) == 2
    assert "they are one capture twice; capture the candidate again" in capsys.readouterr().err


def test_noise_from_two_captures_of_a_deterministic_server_says_so(tmp_path, capsys):
    """Two capture folders alike, each from a server start of its own (their manifests' runtime
    server_start): a deterministic server. kldtui noise writes the 'deterministic' model the campaign
    writes and says what it means (it refused them, and ranking without a model then said "capture
    again ... kldtui noise", which gives the same again); a copy of a capture stays refused."""
    import shutil

    from tests.fixtures_compare import make_suite, perturb

    suite, ref, cap1, _ = make_suite(tmp_path / "s", windows=4, context=17, vocab=300, seed=3,
                                     candidate=lambda rng, x: perturb(rng, x, 0.05, 0.1))
    cap2 = tmp_path / "s" / "again"
    shutil.copytree(cap1, cap2)

    def started(folder, start):
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["runtime"] = {"launcher": "kldtui", "model": "me/q4", "server_start": start}
        (folder / "manifest.json").write_text(json.dumps(manifest))

    started(cap1, "2026-12-03T10:00:00Z 0123456789abcdef")
    started(cap2, "2026-12-03T10:05:00Z fedcba9876543210")
    folders = ["--suite-manifest", str(suite.path)]
    meaning = ("verdicts ranked with it stay provisional: the server answered two captures of one model "
               "identically (deterministic), so there is no variation between captures to hold it against, "
               "and capturing again gives the same")
    for extra, source in (([*folders, "--reference", str(ref)], f"{ref} vs {cap1} and {ref} vs {cap2}"),
                          (folders, f"{cap1} and {cap2}")):
        out = tmp_path / f"noise-{len(extra)}.json"
        assert main(["noise", str(cap1), str(cap2), *extra, "--output", str(out)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "noise model: none: the server is deterministic (captures of one model, each from a server "
            f"start of its own, came out identical: {source}), so nothing moves between captures to "
            "measure; differences rest on the windows alone", meaning, f"wrote {out}"]
        model = load_floor(out)
        assert model.kind == "deterministic" and model.threshold == 0 and not model.has_metric
        assert model.provisional_reason() is not None and "capturing again gives the same" in \
            model.provisional_reason()
    # the seed's form, one saved report of RUN2 against RUN1 (a repeat KL of 0 everywhere), the same (it
    # wrote a model that the loader then refused as measuring nothing)
    repeat = tmp_path / "repeat.json"
    assert main(["noise", str(cap1), str(cap2), *folders, "--report", str(repeat), "-o",
                 str(tmp_path / "again.json")]) == 0
    capsys.readouterr()
    assert main(["noise", str(repeat), "-o", str(tmp_path / "from-report.json")]) == 0
    assert capsys.readouterr().out.splitlines()[1] == meaning
    assert load_floor(tmp_path / "from-report.json").kind == "deterministic"
    # a copy records the same server start; a folder from an attached server or an earlier kldtui none
    copy = tmp_path / "s" / "copy"
    shutil.copytree(cap2, copy)
    refused = tmp_path / "refused.json"
    assert main(["noise", str(cap2), str(copy), *folders, "--reference", str(ref), "-o", str(refused)]) == 2
    assert ("cannot be shown to be two captures (both record the same server start, so one folder is a copy "
            "of the other): capture the candidate again with kldtui run") in capsys.readouterr().err
    started(copy, None)
    assert main(["noise", str(cap2), str(copy), *folders, "-o", str(refused)]) == 2
    assert (f"{cap2} and {copy} gave identical logits (KL 0 between them in every window) and cannot be "
            f"shown to be two captures ({copy} records no server start (not captured by kldtui run, or by an "
            "earlier version))") in capsys.readouterr().err
    assert not refused.exists()
    # the same folder twice
    assert main(["noise", str(cap1), str(cap1), *folders, "--reference", str(ref), "-o", str(refused)]) == 2
    assert "compare the same capture" in capsys.readouterr().err


def test_diff_columns_line_up_under_a_domain_name_longer_than_14(tmp_path, capsys):
    """The outcome table's names sat in 14 columns: a longer domain's name (a hidden-state suite's
    stratum "code_tests_documentation_issues") pushed its row's count, means, interval, ratio and verdict
    to the right of every other row's; --per-window's domain column likewise (12). Each column is as
    wide as its widest cell."""
    long = "code_tests_documentation_issues"
    domains = [long if d == "code" else d for d in DOMAINS]
    base = _base(5)
    a = write_report(tmp_path / "a.json", make_report(base, domains, candidate_dir="/runs/q4"))
    b = write_report(tmp_path / "b.json", make_report(base * 1.5, domains, candidate_dir="/runs/q3"))
    assert main(["diff", str(a), str(b), "--bootstrap-samples", "300", "--per-window"]) == 0
    lines = capsys.readouterr().out.splitlines()
    top = next(i for i, line in enumerate(lines) if "mean KL A" in line)
    table = lines[top:top + 2 + len(set(domains))]  # the heading, all, each domain
    assert table[1].startswith("all ") and any(row.startswith(long + "  ") for row in table), "\n".join(table)
    heading = table[0]
    for word in ("B / A", "verdict"):  # left-aligned columns: every row's cell starts under the heading
        at = heading.index(word)
        assert all(row[at - 2:at] == "  " and row[at] != " " for row in table[1:]), (word, "\n".join(table))
    for word in ("windows", "mean KL A", "mean KL B"):  # right-aligned: every cell ends under it
        end = heading.index(word) + len(word)
        shown = "\n".join(table)
        assert all(row[end - 1] != " " and row[end:end + 2] == "  " for row in table[1:]), (word, shown)
    top = next(i for i, line in enumerate(lines) if line.lstrip().startswith("window  domain"))
    per = lines[top:top + 33]
    end = per[0].index("KL A") + len("KL A")
    assert all(row[end - 1] != " " and row[end] == " " for row in per[1:]), "\n".join(per)
    assert any(f"  {long}  " in row for row in per[1:]), "\n".join(per)
