"""The embedded example suite: reproducible from its generator, and compared by the CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kldtui.cli.main import main
from kldtui.formats.report import load_report
from tests.examples_gen import generate
from tests.paths import EXAMPLE_SUITE

EXAMPLE = EXAMPLE_SUITE


def _hashes(root: Path) -> dict[str, str]:
    # hidden files are local state (kldtui verify's cache of verified hashes), not the example
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def test_committed_example_is_what_the_generator_makes(tmp_path: Path) -> None:
    generate(tmp_path / "a")
    generate(tmp_path / "a")  # re-runnable: a second run over the first changes nothing
    assert _hashes(tmp_path / "a") == _hashes(EXAMPLE)
    total = sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file())
    assert total < 2_000_000


def test_readme_quick_start_command_works(tmp_path: Path, capsys) -> None:
    out = tmp_path / "x.json"
    code = main(["compare", "--suite-manifest", str(EXAMPLE / "suite-manifest.json"),
                 "--reference-dir", str(EXAMPLE / "ref"), "--candidate-dir", str(EXAMPLE / "candidate"),
                 "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "KL(reference || candidate) =" in text
    report = load_report(out)
    assert report.report_format == "kldtui-comparison-v1"
    assert report.windows == 4 and report.positions == 4 * 64
    assert 0.001 < report.kl_window_cluster_bootstrap.estimate < 0.1
    raw = out.read_text()
    assert raw == json.dumps(json.loads(raw), indent=2, sort_keys=True) + "\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary left behind
