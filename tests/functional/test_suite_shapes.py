"""Suites of other shapes than Kimi K3's (vocabulary, context length, window count) go through
prepare -> capture (embedded server) -> finalize -> verify -> compare -> diff -> publish --dry-run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.formats.suite import load_logits_manifest, load_suite
from kldtui.stages.serve import ServerProcess
from tests.fixtures_prepare import build_tokenizer, code_rows, prose_rows, write_jsonl, write_parquet
from tests.fixtures_publish import check_card_figures

pytest.importorskip("datasets")
pytest.importorskip("transformers")

# (tokenizer vocab, model vocab, context length, windows per source)
SHAPES = [
    pytest.param(300, 311, 24, (3, 2), id="vocab311-ctx24-5windows"),
    pytest.param(400, 1000, 57, (1,), id="vocab1000-ctx57-1window"),
]


def _capture(tmp: Path, suite_dir: Path, vocab: int, run: str, perturb: float) -> Path:
    argv = [sys.executable, "-m", "kldtui.embedded", "--port", "0", "--served-model-name", "tiny",
            "--vocab-size", str(vocab), "--max-num-batched-tokens", "16", "--max-num-seqs", "1",
            "--perturb", str(perturb)]
    srv = tmp / f"srv-{run}"
    with ServerProcess(argv, capture_dir=srv, served_model_name="tiny") as server:
        url = server.wait_ready(timeout=60)
        assert main(["capture", "--suite-dir", str(suite_dir), "--capture-dir", str(tmp / "cap"),
                     "--run-name", run, "--base-url", url, "--server-capture-dir", str(srv),
                     "--served-model-name", "tiny", "--expected-vocab", str(vocab)]) == 0
    return tmp / "cap"


@pytest.mark.slow  # prepare to publish, every stage
@pytest.mark.parametrize(("tok_vocab", "vocab", "context", "windows"), SHAPES)
def test_shape_goes_through_every_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str], tok_vocab: int,
                                        vocab: int, context: int, windows: tuple[int, ...]) -> None:
    tok = build_tokenizer(tmp_path / "tok", vocab_size=tok_vocab)
    prose = write_jsonl(tmp_path / "prose.jsonl", prose_rows(60))
    code = write_parquet(tmp_path / "code.parquet", code_rows(10))
    tables = [f'[[source]]\ndomain = "prose"\ndataset = "{prose}"\nsplit = "train"\nwindows = {windows[0]}\n'
              'text_field = "text"\n']
    if len(windows) > 1:
        tables.append(f'[[source]]\ndomain = "code"\ndataset = "{code}"\nsplit = "test"\n'
                      f'windows = {windows[1]}\nbuilder = "humaneval"\n')
    (tmp_path / "SOURCES.toml").write_text("\n".join(tables))
    root = tmp_path / "suite"
    assert main(["prepare", "--tokenizer", str(tok), "--output-dir", str(root), "--sources",
                 str(tmp_path / "SOURCES.toml"), "--context-length", str(context)]) == 0
    suite = load_suite(root)
    n = sum(windows)
    assert (suite.window_count, suite.context_length) == (n, context)

    cap = _capture(tmp_path, root, vocab, "reference", 0.0)
    assert main(["finalize", "--suite-dir", str(root), "--capture-dir", str(cap), "--run-name", "reference",
                 "--output-dir", str(root / "ref"), "--kind", "reference"]) == 0
    for run, perturb in (("a", 0.05), ("b", 0.3)):
        _capture(tmp_path, root, vocab, run, perturb)
        assert main(["finalize", "--suite-dir", str(root), "--capture-dir", str(cap), "--run-name", run,
                     "--output-dir", str(tmp_path / run)]) == 0
    ref = load_logits_manifest(root / "ref")
    assert ref.vocab_size == vocab and {e.shape for e in ref.entries.values()} == {(context - 1, vocab)}
    capsys.readouterr()
    assert main(["verify", str(root)]) == 0
    assert "OK" in capsys.readouterr().out

    for run in ("a", "b"):
        assert main(["compare", "--reference-dir", str(root / "ref"), "--candidate-dir", str(tmp_path / run),
                     "--suite-manifest", str(root), "--output", str(tmp_path / f"{run}.json"),
                     "--bootstrap-samples", "200"]) == 0
    reports = {run: json.loads((tmp_path / f"{run}.json").read_text()) for run in ("a", "b")}
    for doc in reports.values():
        assert doc["positions"] == n * (context - 1) and doc["windows"] == n
        assert len(doc["per_window"]) == n
    kl = {run: doc["kl_reference_to_candidate"]["mean"] for run, doc in reports.items()}
    assert 0 < kl["a"] < kl["b"]
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert f"; {n} window{'s' if n != 1 else ''}; 95 % intervals" in capsys.readouterr().out

    # publish: the card describes this shape
    (root / "repeat-noise-window000.json").write_text(json.dumps(reports["a"]))
    assert main(["publish", str(root), "--repo-id", "me/shape", "--dry-run"]) == 0
    check_card_figures(capsys.readouterr().out, root)
