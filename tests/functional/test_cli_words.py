"""Issue 26: every word the producer's commands print is true, and every failure is actionable.
Each test reads stdout/stderr as a user does (the command in a subprocess where a terminal or a
pipe matters, ``main([...])`` elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.text import table_figure
from tests.fixtures_decide import make_report as decide_report
from tests.fixtures_decide import suite_domains
from tests.fixtures_decide import write_report as decide_write
from tests.fixtures_tui import make_report, write_report
from tests.paths import REPO as ROOT


def kldtui(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "kldtui", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout, stdin=subprocess.DEVNULL)


# -- numbers with their caveat ----------------------------------------------------------------------
def test_summary_of_few_windows_shows_no_95_percent_interval(tmp_path: Path) -> None:
    few = write_report(tmp_path / "few.json", make_report("few", 0.01, seed=2,
                                                          domains=["prose", "prose", "code", "dialog"]))
    done = kldtui("view", str(few))
    assert done.returncode == 0, done.stderr
    head, *rest = done.stdout.splitlines()
    assert "95% interval [" not in head, head
    assert "(4 windows, 256 positions: too few windows for a 95 % interval, which needs 8)" in head, head
    by_domain = next(line for line in rest if "by domain" in line)
    assert "dialog" in by_domain and "(1 window: no interval)" in by_domain and "[" not in by_domain
    assert "(no interval: too few windows)" in done.stdout  # the perplexity ratio's interval too
    enough = write_report(tmp_path / "enough.json", make_report("enough", 0.01, seed=2))
    done = kldtui("view", str(enough))
    assert "95% interval [" in done.stdout.splitlines()[0] and "8 windows" in done.stdout


def test_view_of_several_reports_to_a_file_prints_the_leaderboard(tmp_path: Path) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("int4", 0.05, 1), ("fp8", 0.01, 2))]
    done = kldtui("view", *paths)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["#", "candidate", "mean"], lines[0]  # the leaderboard its help promises
    assert lines[1].split()[:2] == ["1", "fp8"] and lines[2].split()[:2] == ["2", "int4"]
    assert f"== {paths[0]}" in done.stdout and f"== {paths[1]}" in done.stdout  # then each summary


def _noise_reports(tmp_path: Path) -> tuple[Path, Path, Path]:
    domains = suite_domains(32)
    base = np.random.default_rng(4).gamma(4.0, 0.0025, 32)
    a = decide_write(tmp_path / "a.json", decide_report(base, domains, candidate_dir="/runs/a"))
    b = decide_write(tmp_path / "b.json", decide_report(base + 0.002, domains, candidate_dir="/runs/b"))
    rep = decide_write(tmp_path / "repeat.json", decide_report(
        np.full(32, 0.003), domains, reference_dir="/r/run1", candidate_dir="/r/run2"))
    again = decide_write(tmp_path / "a2.json", decide_report(
        base * np.exp(np.random.default_rng(20).normal(0, 1.0, 32)), domains, candidate_dir="/runs/a2"))
    model = tmp_path / "noise.json"
    assert main(["noise", str(a), str(again), "--repeat-report", str(rep), "--output", str(model),
                 "--allow-different-models"]) == 0  # made-up capture folders: no manifests to check
    return a, b, model


def test_view_takes_a_noise_model_as_leaderboard_does(tmp_path: Path, capsys: Any) -> None:
    a, b, model = _noise_reports(tmp_path)
    capsys.readouterr()
    done = kldtui("view", str(a), str(b))
    assert done.stdout.splitlines()[2].rstrip().endswith("worse"), done.stdout
    done = kldtui("view", "--noise", str(model), str(a), str(b))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].rstrip().endswith("tied"), done.stdout  # as leaderboard --noise
    assert "noise model: measured repeat variation" in done.stdout
    assert main(["leaderboard", "--noise", str(model), str(a), str(b), "--plain"]) == 0
    assert capsys.readouterr().out.splitlines()[2].rstrip().endswith("tied")
    bad = tmp_path / "bad-noise.json"
    bad.write_text("{}")
    done = kldtui("view", "--noise", str(bad), str(a), str(b))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "bad-noise.json" in done.stderr


def test_leaderboard_of_one_report_marks_nothing_and_says_why(tmp_path: Path, capsys: Any) -> None:
    path = write_report(tmp_path / "one.json", make_report("one", 0.01, seed=1))
    assert main(["leaderboard", str(path), "--plain"]) == 0
    out = capsys.readouterr().out
    row = out.splitlines()[1]
    assert not row.rstrip().endswith("best"), row  # it said "best" beside "no row is marked"
    assert "one report: nothing to rank it against" in out
    assert "no row is marked" not in out


def test_leaderboard_of_few_windows_marks_no_best(tmp_path: Path, capsys: Any) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s, domains=["prose"] * 4)))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.03, 2))]
    assert main(["leaderboard", *paths, "--plain"]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()[1:3]
    assert all(r.rstrip().endswith("no verdict") for r in rows), rows
    assert all("too few windows (4)" in r and "[" not in r for r in rows), rows  # no "95 %" from 4 windows
    assert "(estimate only)" in rows[1]
    assert "too few windows (4) for a verdict: the rows are in order of mean KL only" in out
    assert "tie: best = lowest mean KL" in out  # every mark is explained


def test_leaderboard_explains_provisional(tmp_path: Path, capsys: Any) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.03, 2))]
    assert main(["leaderboard", *paths, "--plain"]) == 0  # no noise model: a difference is provisional
    out = capsys.readouterr().out
    assert "(provisional)" in out.splitlines()[2], out
    assert "provisional: the difference is shown over these windows, but not yet against how much a " \
           "whole capture's KL moves between captures of one model (three or more captures of one " \
           "candidate given to kldtui noise measure it)" in out


def test_leaderboard_json_keeps_its_figures(tmp_path: Path, capsys: Any) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("x", 0.01, 1), ("y", 0.03, 2))]
    out_json = tmp_path / "board.json"
    assert main(["leaderboard", *paths, "--plain", "--json", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    assert [r["name"] for r in doc["rows"]] == ["x", "y"] and doc["rows"][0]["ci95_low"] is not None


# -- failures that are actionable: one line, exit 2, at once ----------------------------------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _offline() -> dict[str, str]:
    return {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HUB_OFFLINE": ""}


def one_line_exit_2(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    err = done.stderr
    assert err.count("\n") == 1 and err.startswith("kldtui: error: "), err
    assert "internal error" not in err and "Traceback" not in err and "Retrying" not in err
    return err


def _unusable_files(folder: Path) -> dict[str, Path]:
    """One file of each kind a user may pass where a report or a noise model belongs."""
    folder.mkdir()
    files = {"FIFO": folder / "fifo.json", "not JSON": folder / "bad.json", "list": folder / "list.json",
             "missing": folder / "missing.json", "folder": folder / "folder"}
    os.mkfifo(files["FIFO"])  # opened without blocking: no writer ever comes
    files["not JSON"].write_text("{\n'windows': 3}\n")
    files["list"].write_text("[1, 2]\n")
    files["folder"].mkdir()
    return files


PROBLEM = {"FIFO": "is a FIFO (named pipe), not a regular file", "not JSON": "is not valid JSON",
           "list": "found a list", "missing": "not found", "folder": "is a folder"}


def test_unusable_report_or_noise_file_is_one_line_naming_it_and_what_to_do(tmp_path: Path) -> None:
    """A report or noise model that is a FIFO, not JSON, a JSON list, missing or a folder: each
    command that reads it says so in one line (exit 2) naming the file, the problem and what to do."""
    from concurrent.futures import ThreadPoolExecutor

    from kldtui.decide.noise import NOISE_REMEDY
    from kldtui.formats.report_model import REPORT_REMEDY

    good = str(write_report(tmp_path / "good.json", make_report("good", 0.01, seed=1)))
    other = str(write_report(tmp_path / "other.json", make_report("other", 0.02, seed=2)))
    files = _unusable_files(tmp_path / "given")
    # a folder given to view, leaderboard or diff is a work folder: they look for the reports in it
    in_folder = "give the path of a report JSON or of a work folder that holds one"
    runs: list[tuple[str, str, list[str], str]] = []
    for kind, path in files.items():
        bad = str(path)
        runs += [(kind, "view", ["view", bad], in_folder if kind == "folder" else REPORT_REMEDY),
                 (kind, "leaderboard", ["leaderboard", good, bad, "--plain"],
                  in_folder if kind == "folder" else REPORT_REMEDY),
                 (kind, "diff", ["diff", good, bad], in_folder if kind == "folder" else REPORT_REMEDY),
                 (kind, "noise", ["noise", good, bad, "-o", str(tmp_path / "noise.json")], REPORT_REMEDY),
                 (kind, "view --noise", ["view", "--noise", bad, good, other], NOISE_REMEDY)]
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda run: kldtui(*run[2]), runs))
    for (kind, command, _, remedy), result in zip(runs, done, strict=True):
        err = one_line_exit_2(result)
        assert str(files[kind]) in err, (kind, command, err)
        problem = ("without a comparison.json" if remedy == in_folder
                   else "not a kldtui noise floor" if (kind, command) == ("list", "view --noise")
                   else PROBLEM[kind])
        assert problem in err, (kind, command, err)
        assert err.rstrip().endswith(remedy), (kind, command, err)
    assert not (tmp_path / "noise.json").exists()


def test_prepare_offline_with_the_default_sources_is_one_line(tmp_path: Path) -> None:
    from tests.fixtures_prepare import build_tokenizer

    tok = build_tokenizer(tmp_path / "tok")
    err = one_line_exit_2(kldtui("prepare", "--tokenizer", str(tok), "--output-dir", str(tmp_path / "s"),
                                 env=_offline()))
    assert "dataset Salesforce/wikitext" in err and "cannot be reached" in err, err
    assert "--sources" in err  # what to do: local sources, or a reachable Hub
    err = one_line_exit_2(kldtui("prepare", "--tokenizer", "org/some-model", "--output-dir",
                                 str(tmp_path / "s"), env=_offline()))
    assert "tokenizer org/some-model" in err and "cannot be reached" in err
    assert not (tmp_path / "s").exists()


def test_prepare_names_a_missing_local_tokenizer_or_source_at_once(tmp_path: Path) -> None:
    err = one_line_exit_2(kldtui("prepare", "--tokenizer", "./my-tokenizr", "--output-dir",
                                 str(tmp_path / "s"), env=_offline()))
    assert err.startswith("kldtui: error: ./my-tokenizr: tokenizer folder not found"), err
    sources = tmp_path / "SOURCES.toml"
    sources.write_text('[[source]]\ndomain = "prose"\ndataset = "data/missing.jsonl"\nsplit = "test"\n'
                       'windows = 2\ntext_field = "text"\n')
    from tests.fixtures_prepare import build_tokenizer

    tok = build_tokenizer(tmp_path / "tok")
    err = one_line_exit_2(kldtui("prepare", "--tokenizer", str(tok), "--output-dir", str(tmp_path / "s"),
                                 "--sources", str(sources), env=_offline()))
    assert f"local dataset {tmp_path / 'data' / 'missing.jsonl'} does not exist" in err, err


# A host without torch (prepare only tokenizes): the import system finds no torch at all.
NO_TORCH = """import importlib.machinery as _m

_find = _m.PathFinder.find_spec.__func__


def _no_torch(cls, name, path=None, target=None):
    if name == "torch" or name.startswith("torch."):
        return None
    return _find(cls, name, path, target)


_m.PathFinder.find_spec = classmethod(_no_torch)
"""


def test_prepare_does_not_print_transformers_torch_advice(tmp_path: Path) -> None:
    from tests.fixtures_prepare import build_tokenizer, prose_rows, write_jsonl

    tok = build_tokenizer(tmp_path / "tok")
    data = write_jsonl(tmp_path / "prose.jsonl", prose_rows(80))
    sources = tmp_path / "SOURCES.toml"
    sources.write_text(f'[[source]]\ndomain = "prose"\ndataset = "{data}"\nsplit = "test"\nwindows = 2\n'
                       'text_field = "text"\n')
    no_torch = tmp_path / "no-torch"
    no_torch.mkdir()
    (no_torch / "sitecustomize.py").write_text(NO_TORCH)
    done = kldtui("prepare", "--tokenizer", str(tok), "--output-dir", str(tmp_path / "s"), "--sources",
                  str(sources), "--context-length", "32",
                  env={"PYTHONPATH": f"{no_torch}{os.pathsep}{ROOT}"})
    assert done.returncode == 0, done.stderr
    assert "PyTorch was not found" not in done.stderr + done.stdout, done.stderr
    assert "suite ready" in done.stdout


def test_publish_offline_is_one_line_before_any_hashing(tmp_path: Path) -> None:
    from tests.hub_server import make_dataset

    root = make_dataset(tmp_path / "ds", windows=2, context_length=17, vocab=50)
    done = kldtui("publish", str(root), "--repo-id", "me/tiny-kld", env=_offline())
    err = one_line_exit_2(done)
    assert "publish me/tiny-kld" in err and "cannot be reached" in err and "--dry-run" in err
    assert "verifying" not in done.stdout + done.stderr


# -- words ----------------------------------------------------------------------------------------------
def test_hints_name_kldtui_as_it_was_started(tmp_path: Path, monkeypatch: Any) -> None:
    script = Path(sys.executable).with_name("kldtui")
    if not script.is_file():
        import pytest

        pytest.skip("no kldtui console script beside this Python")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # the venv's bin is not on PATH (the README's quick start)
    done = subprocess.run([str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert f"try `{script} demo`" in done.stderr, done.stderr
    assert "see examples/" not in done.stderr  # a pip user has no examples/ folder
    assert "kldtui-demo/kldtui.toml" in done.stderr
    from kldtui.workflow.next_steps import report_next_steps

    monkeypatch.chdir(script.parent.parent.parent)
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    lines = report_next_steps(Path("w/comparison.json"))
    assert lines[1] == f"next: {script.relative_to(Path.cwd())} view w/comparison.json", lines


def test_every_flag_has_help_and_a_meaningful_metavar() -> None:
    from kldtui.cli.main import build_parser
    from kldtui.cli.parser import Parser, arguments, commands

    missing, odd = [], []

    def walk(parser: Parser, name: str) -> None:
        for command in commands(parser):
            walk(command.parser, command.name)
        for action in arguments(parser):
            if action.option_strings and action.dest != "help":
                if not action.help:
                    missing.append((name, action.option_strings))
                longs = [o for o in action.option_strings if o.startswith("--")]
                if action.metavar is None and action.nargs != 0 and longs and \
                        longs[0][2:].replace("-", "_") != action.dest:
                    odd.append((name, longs[0], action.dest.upper()))  # e.g. --theme VIEW_THEME

    walk(build_parser(), "kldtui")
    assert not missing and not odd, (missing, odd)


def test_verify_counts_what_it_checked(tmp_path: Path, capsys: Any) -> None:
    from tests.hub_server import make_dataset

    root = make_dataset(tmp_path / "ds", windows=3, context_length=17, vocab=50)
    assert main(["verify", str(root)]) == 0
    first = capsys.readouterr()
    assert main(["verify", str(root)]) == 0
    again = capsys.readouterr()
    text = again.out + again.err
    assert "file(s)" not in first.out + first.err + text
    assert "3 token files and the suite hash checked" in text, text
    assert "3 logits files unchanged since verified (not hashed again; kldtui verify --reverify hashes " \
        "them)" in text, text


def test_output_cut_short_by_its_reader_is_no_failure(tmp_path: Path) -> None:
    paths = [str(write_report(tmp_path / f"{n}.json", make_report(n, lvl, seed=s)))
             for n, lvl, s in (("int4", 0.05, 1), ("fp8", 0.01, 2), ("q3", 0.07, 3))]
    for command in (["leaderboard", *paths, "--plain"], ["view", *paths]):
        # `kldtui leaderboard ... | head -1`: the reader is gone before kldtui writes
        read, write = os.pipe()
        os.close(read)
        proc = subprocess.run([sys.executable, "-m", "kldtui", *command], stdout=write,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              timeout=120, stdin=subprocess.DEVNULL)
        os.close(write)
        assert proc.returncode == 0, (command[0], proc.returncode, proc.stderr)
        assert proc.stderr == "", proc.stderr  # no "Exception ignored", no internal error


def test_card_does_not_call_a_local_tokenizer_folder_a_hub_id(tmp_path: Path, capsys: Any) -> None:
    from tests.hub_server import make_dataset

    root = make_dataset(tmp_path / "ds", windows=2, context_length=17, vocab=50)
    manifest = root / "suite-manifest.json"
    doc = json.loads(manifest.read_text())
    doc.update({"model_tokenizer": "tok", "tokenizer_class": "PreTrainedTokenizerFast",
                "tokenizer_source": "local folder"})
    manifest.write_text(json.dumps(doc, indent=2))
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    card = capsys.readouterr().out
    assert "Tokenizer: a local tokenizer folder (`tok`, PreTrainedTokenizerFast), not a Hub id" in card
    assert "pip install kldtui" not in card and "pip install -e ." in card  # no index serves kldtui


def test_shell_completion_completes_commands_flags_and_choices(tmp_path: Path) -> None:
    import shutil

    script = tmp_path / "kldtui.bash"
    done = kldtui("completion", "bash")
    assert done.returncode == 0, done.stderr
    script.write_text(done.stdout)
    probe = tmp_path / "probe.sh"
    probe.write_text(f"""source {script}
t() {{
    COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=()
    _kldtui; echo "${{COMPREPLY[*]}}"
}}
t kldtui le
t kldtui leaderboard --no
t kldtui --profile x.toml ru
t kldtui compare --backend ""
t kldtui view --th
t kldtui completion ""
""")
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run([bash, str(probe)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.splitlines() == [
        "leaderboard", "--no-noise-floor --noise", "run", "auto c numpy torch torch-cpu torch-cuda",
        "--theme", "bash zsh fish"], out.stdout
    for shell, check in (("zsh", ["-n"]), ("fish", ["--no-execute"])):
        done = kldtui("completion", shell)
        assert done.returncode == 0 and "kldtui" in done.stdout
        exe = shutil.which(shell)
        if exe is not None:  # the script parses in that shell
            path = tmp_path / f"kldtui.{shell}"
            path.write_text(done.stdout)
            parsed = subprocess.run([exe, *check, str(path)], capture_output=True, text=True, timeout=30)
            assert parsed.returncode == 0, parsed.stderr
            if shell == "fish":  # and fish completes from it
                asked = subprocess.run([exe, "-c", f"source {path}; complete -C 'kldtui leader'; "
                                        "complete -C 'kldtui view --no'"], capture_output=True, text=True,
                                       timeout=30)
                names = [line.split("\t")[0] for line in asked.stdout.splitlines()]
                assert sorted(names) == ["--no-noise-floor", "--noise", "leaderboard"], asked.stdout


def test_version_says_which_build(tmp_path: Path) -> None:
    done = kldtui("--version")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    from kldtui import __version__

    assert lines[0] == f"kldtui {__version__}"
    assert lines[1].startswith(("checkout ", "installed at ")) and "Python 3." in lines[1], lines
    assert lines[2].startswith("compare kernel: "), lines


def test_doctor_reports_the_kernel_torch_and_the_hub(tmp_path: Path) -> None:
    done = kldtui("doctor", "--quick", "--json", env=_offline())
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    kernel = checks["compare kernel"]["detail"]
    assert "compiler" in kernel or "no C compiler" in kernel, kernel
    assert "torch" in checks
    hub = checks["Hugging Face Hub"]
    assert not hub["ok"] and "cannot be reached" in hub["detail"] and "127.0.0.1" in hub["detail"]
    cache = tmp_path / "cache"  # an empty kernel cache: doctor (not --quick) builds it and says so
    done = kldtui("doctor", "--json", env={**_offline(), "XDG_CACHE_HOME": str(cache)}, timeout=300)
    kernel = {c["name"]: c for c in json.loads(done.stdout)}["compare kernel"]["detail"]
    if "no C compiler" not in kernel:
        assert "built now in" in kernel and str(cache) in kernel, kernel


def test_batch_lines_write_rates_and_bytes_as_the_dashboard_does() -> None:
    import io

    from kldtui.cli.batch_reporter import BatchReporter
    from kldtui.events import Progress

    out = io.StringIO()
    rep = BatchReporter(out, interval=0.0)  # every line, however soon
    rep(Progress("capture", "tokens", 512, 3072, "tokens", rate=6264.3))
    rep(Progress("finalize", "window 000", 2 * 2**20, 4186112, "bytes", rate=3.4e8))
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["capture: tokens 512/3072 (17%), 6264 tokens/s",
                     "finalize: window 000 2.00/3.99 MiB (50%), 324 MiB/s"], lines  # was 6.26e+03 tokens/s


def test_no_hint_installs_kldtui_from_a_package_index() -> None:
    """No package index serves kldtui yet: every install hint (messages, README, docs) installs
    from a checkout (``pip install -e '.[plot]'``) or installs the library itself."""
    import re

    wrong = re.compile(r"""pip install\s+(-\S+\s+)*['"]?kldtui\b|install kldtui\[""")
    files = [*sorted((ROOT / "kldtui").rglob("*.py")), ROOT / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) if wrong.search(line)]
    assert not found, "\n".join(found)


def test_charts_and_exports_show_no_interval_from_too_few_windows(tmp_path: Path, capsys: Any) -> None:
    """The viewer's charts (c), kldtui plot and the Markdown export draw or print no "95 %"
    interval that rests on fewer windows than an interval needs: the mean, and why."""
    import xml.etree.ElementTree as ET

    from kldtui.decide.exports import export_table
    from kldtui.decide.leaderboard import leaderboard_from_files
    from kldtui.decide.plots import chart_data
    from kldtui.formats.report import load_report
    from kldtui.tui.widgets.board_charts import render_charts
    from tests.fixtures_exports import make_reports

    reports = make_reports(tmp_path / "few", windows=6, samples=500)  # 6 windows, 2 per domain
    capsys.readouterr()
    board = leaderboard_from_files(reports, samples=500)
    data = chart_data(export_table(board, [load_report(p) for p in reports], paths=reports))
    text = render_charts(data, 100).plain
    drawn = text.replace("├─┤ 95 % interval", "")  # the legends name the mark
    assert "├" not in drawn and "┤" not in drawn, text  # no interval drawn
    assert "too few windows (6): the mean alone" in text
    assert "prose  too few windows (2): no interval" in text
    for series in data.windows:
        assert f"{table_figure(series.mean)} too few windows (6)" in text
    assert main(["leaderboard", *map(str, reports), "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert "too few windows (6)" in markdown and "| [" not in markdown, markdown
    svg = tmp_path / "few.svg"
    assert main(["plot", *map(str, reports), "-o", str(svg)]) == 0
    ids = {el.get("id") for el in ET.parse(svg).getroot().iter() if el.get("id")}
    assert not any(i.startswith(("window-band-", "size-interval-", "domain-interval-")) for i in ids), ids
    # nor any error bar or cap (a zero-length bar still draws its caps): the panels hold the points,
    # the window lines and the bars only
    from kldtui.decide.plots import figure

    fig = figure(export_table(board, [load_report(p) for p in reports], paths=reports))
    size_ax, _, domain_ax = fig.axes
    assert [len(ax.containers) for ax in (size_ax, domain_ax)] == [0, len(reports)], (
        size_ax.containers, domain_ax.containers)  # the bars' own containers only, no ErrorbarContainer
    assert not any(c.get_segments() for ax in (size_ax, domain_ax) for c in ax.collections)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_readme_command_a_campaign_leaderboard_equals_runs_as_written(tmp_path: Path) -> None:
    """README ("Several candidates: a campaign"): leaderboard.json is what a `kldtui leaderboard`
    command writes; the command as quoted must run (it gave --json no file: argparse's usage, exit
    2). tests/functional/test_demo_resume.py holds the equality itself, with the noise model."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = re.findall(r"`(kldtui leaderboard comparison-\*\.json [^`]*)`", readme)
    assert quoted, "README.md: the campaign section quotes the leaderboard command"
    reports = [str(write_report(tmp_path / f"comparison-{name}.json", make_report(name, kl, seed=i)))
               for i, (name, kl) in enumerate((("q8", 0.01), ("q4", 0.04)))]
    for command in quoted:
        argv = shlex.split(command)[1:]
        at = argv.index("--noise")
        del argv[at:at + 2]  # a noise model of its own: the reports here have none
        argv = [a for a in argv if a != "comparison-*.json"]
        argv[1:1] = reports
        argv = [str(tmp_path / "board.json") if a == "FILE.json" else a for a in argv]
        assert main(argv) == 0, command
        assert len(json.loads((tmp_path / "board.json").read_text())["rows"]) == 2


def test_the_decision_commands_help_is_true_of_a_hidden_state_suites_contexts(capsys: Any) -> None:
    """The static --help of diff, plan, plot and compare spoke of windows alone ("B - A per window",
    "how many windows", "per-window KL", "window resamples"), where a hidden-state suite's reports and
    output count contexts; each now names both (the command's output says the reports' own unit)."""
    said = {"diff": ["B - A per window (per context of a hidden-state suite), 95 percent paired interval "
                     "over them", "every window's difference (a hidden-state suite's: every context's)"],
            "plan": ["how many windows (source clusters of a hidden-state suite) would tell two candidates "
                     "apart", "difference per window (source cluster) to resolve", "standard deviation "
                     "between windows (source clusters)", "windows (a hidden-state suite: source clusters) "
                     "the suite has"],
            "plot": ["per-window (a hidden-state suite: per-context) KL"],
            "compare": ["of windows (a hidden-state suite: contexts, and source clusters)"]}
    for command, words in said.items():
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        text = " ".join(capsys.readouterr().out.split()).replace("per- context", "per-context")
        assert all(w in text for w in words), (command, text)


def test_the_range_flags_help_is_true_of_a_hidden_state_suites_contexts(capsys: Any) -> None:
    """--start-window / --stop-window of capture, finalize, noise and convert said "first window" and
    "window after the last one" alone, where a hidden-state suite's range is of contexts; each now names
    both, as compare's does (the flags keep their names)."""
    start = "--start-window N first window (a hidden-state suite: context) of the range (default 0)"
    stop = "--stop-window N window (context) after the last one: the range is [start, stop) (default: all)"
    said = {"capture": [start, stop, "one window's (context's) answer"],
            "finalize": [start, stop],
            "noise": ["first window (a hidden-state suite: context) of the range (default 0)",
                      "stop before this window (context) (default: all)"],
            "convert": ["--to llama-cpp: first window (a hidden-state suite: context)",
                        "--to llama-cpp: stop before this window (context)"]}
    for command, words in said.items():
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert all(w in text for w in words), (command, [w for w in words if w not in text], text)


def test_verifys_range_refusal_names_a_hidden_state_suites_contexts(tmp_path: Path, capsys: Any) -> None:
    """`kldtui verify` of a hidden-state suite's manifest (or of logits checked against it) refused a
    range it does not have with "window range [0, 99) is outside the suite (windows 0-3, ...)" and a
    negative start with "windows count from 0"; both name its contexts now, with the flags' names
    kept. A logits suite's refusals are unchanged."""
    from tests import fidelity_fixture as fx
    from tests.hub_server import make_dataset

    suite = tmp_path / "fid"
    fx.build(suite, contexts=4)
    manifest = suite / "suite-manifest.json"
    assert main(["verify", str(manifest), "--stop-window", "99"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (f"kldtui: error: context range [0, 99) is outside the suite (contexts 0-3, {manifest}); "
                    "check --start-window/--stop-window (a context's index)"), said
    assert main(["verify", str(manifest), "--start-window", "-1"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == "kldtui: error: --start-window -1 is negative; contexts count from 0", said
    logits = make_dataset(tmp_path / "logits")
    assert main(["verify", str(logits / "suite-manifest.json"), "--stop-window", "99"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (f"kldtui: error: window range [0, 99) is outside the suite (windows 0-3, "
                    f"{logits / 'suite-manifest.json'}); check --start-window/--stop-window"), said
    assert main(["verify", str(logits), "--start-window", "-1"]) == 2
    said = capsys.readouterr().err.strip()
    assert said == "kldtui: error: --start-window -1 is negative; windows count from 0", said


def test_captures_command_help_is_true_of_a_hidden_state_suites_contexts(capsys: Any) -> None:
    """capture's one-line help (in `kldtui --help` and atop `kldtui capture --help`) said "the prompt
    logits of a window range": a hidden-state suite's range is of contexts, and what is captured is
    what --mode says (hidden states, scores). It names both now, as the range flags' help does."""
    words = ("capture a range of windows (a hidden-state suite: contexts) from a running server: their "
             "prompt logits, or with --mode their scores or hidden states (resumable)")
    for argv in (["--help"], ["capture", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert words in text and "logits of a window range" not in text, (argv, text)


def test_finalizes_help_names_each_modes_files(capsys: Any) -> None:
    """`kldtui finalize --help` said "into logits_NNN.safetensors files" only; with --mode hidden it
    writes hidden_NNNN.safetensors (and the replay check's live logits), with score scores_NNN."""
    import re

    from kldtui.capture_modes import HIDDEN, LOGITS, SCORE

    with pytest.raises(SystemExit):
        main(["finalize", "--help"])
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    for mode in (LOGITS, SCORE, HIDDEN):
        assert mode.file_name(7).replace("7", "N").replace("0", "N") in out, (mode.name, out)
    assert "replay check's live logits" in out and "into logits_NNN.safetensors files" not in out


def test_finalize_keep_chunks_and_compares_help_are_true_of_every_mode(capsys: Any) -> None:
    """`kldtui finalize --keep-chunks` said deleting the chunks leaves "the logits on disk once" and
    compare's one-line help said it compares "finalized logits": in score or hidden mode what is on
    disk and compared is scores or hidden states. Both name no one mode's output now."""
    with pytest.raises(SystemExit):
        main(["finalize", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: delete it, so what was captured is on disk once)" in out, out
    assert "logits are on disk once" not in out
    words = ("compare a candidate's logits, scores or hidden states with the reference "
             "(KL, JS, top-k, next-token, bootstrap)")
    for argv in (["--help"], ["compare", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert words in text and "finalized logits with" not in text, (argv, text)
