"""``kldtui convert``: a suite's reference to llama.cpp's KL-divergence base file and back. The
exported file reads back to the suite's tokens and to its reference's log-probabilities within
the format's stated precision; the imported suite scores the positions llama.cpp scores; bad
inputs are one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kldtui.cli.main import main
from kldtui.formats import llamacpp_kld as kld
from kldtui.formats.safetensors_io import RowReader
from kldtui.formats.suite import load_logits_manifest, load_suite
from tests.fixtures_compare import make_suite
from tests.fixtures_gguf import write_gguf

CONTEXT = 40
VOCAB = 300


@pytest.fixture
def suite(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_suite(tmp_path / "suite", windows=3, context=CONTEXT, vocab=VOCAB, seed=4)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64)
    y = y - y.max(axis=1, keepdims=True)
    return y - np.log(np.exp(y).sum(axis=1, keepdims=True))


def test_export_reads_back_within_the_stated_precision(tmp_path: Path, suite, capsys) -> None:  # type: ignore[no-untyped-def]
    s, ref, _, data = suite
    out = tmp_path / "base.kld"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 chunks of 40 tokens" in text and "positions 20..38" in text
    assert "-c 40" in text and "largest step" in text
    base = kld.read_base(out)
    assert (base.n_ctx, base.n_vocab, base.n_chunk, base.first, base.rows) == (CONTEXT, VOCAB, 3, 20, 19)
    for w in s.windows:
        assert base.tokens()[w.index].tolist() == s.load_tokens(w)
    for chunk, encoded in base.iter_chunks():
        x = data[chunk][0][base.first:base.first + base.rows]
        exact = _log_softmax(x)
        decoded = kld.decode_rows(encoded, VOCAB)
        kept = np.isfinite(decoded)
        scale, _ = kld.row_header(encoded)
        # the stated precision: half a step (at most 16/65535/2 nats) plus float32 rounding
        bound = np.broadcast_to(scale[:, None] / 2 + 1e-5, kept.shape)
        assert (np.abs(decoded - exact)[kept] <= bound[kept]).all()
        assert scale.max() <= kld.MAX_STEP * (1 + 1e-6)
        # only what lies more than 16 nats below its row's top is floored
        below = x < x.max(axis=1, keepdims=True) - 16
        assert (~kept == below).all()


def test_export_refuses_to_overwrite_and_a_window_range(tmp_path: Path, suite, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "base.kld"
    out.write_bytes(b"keep me")
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert out.read_bytes() == b"keep me"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out), "--force",
                 "--start-window", "1", "--stop-window", "3"]) == 0
    assert kld.read_base(out).n_chunk == 2
    target = tmp_path / "suite" / "ref" / "manifest.json"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(target), "--force"]) == 2
    assert "is an input of this command" in capsys.readouterr().err


def test_import_makes_a_suite_of_the_scored_positions(tmp_path: Path, suite, capsys) -> None:  # type: ignore[no-untyped-def]
    s, _, _, data = suite
    out = tmp_path / "base.kld"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out)]) == 0
    dest = tmp_path / "imported"
    assert main(["convert", str(out), "--to", "suite", str(dest)]) == 2
    assert "needs --model GGUF, --bos ID or --no-bos" in capsys.readouterr().err
    assert main(["convert", str(out), "--to", "suite", str(dest), "--no-bos"]) == 0
    text = capsys.readouterr().out
    assert "positions 20..38 of each are scored" in text and "first token: --no-bos" in text
    imported = load_suite(dest)
    assert imported.suite_token_hash_sha256 == s.suite_token_hash_sha256  # the same tokens
    assert [w.scored_row_start for w in imported.windows] == [20, 20, 20]
    assert [w.scored_positions for w in imported.windows] == [19, 19, 19]
    manifest = load_logits_manifest(dest / "ref")
    assert manifest.runtime["reference_encoding"]["max_step"] <= kld.MAX_STEP * (1 + 1e-6)
    for w in imported.windows:
        with RowReader(manifest.file_path(w.index)) as r:
            rows = r.read(0, r.rows)
        exact = _log_softmax(data[w.index][0][20:39])
        kept = np.isfinite(rows)
        assert rows.shape == (19, VOCAB) and np.abs(rows - exact)[kept].max() <= kld.MAX_STEP / 2 + 1e-5
    assert main(["verify", str(dest)]) == 0
    # --force is needed to replace it, and replaces nothing else
    assert main(["convert", str(out), "--to", "suite", str(dest), "--no-bos"]) == 2
    assert "already holds a suite" in capsys.readouterr().err
    assert main(["convert", str(out), "--to", "suite", str(dest), "--no-bos", "--force"]) == 0
    capsys.readouterr()
    (dest / "notes.txt").write_text("mine")
    assert main(["convert", str(out), "--to", "suite", str(dest), "--no-bos", "--force"]) == 2
    assert "holds more than an imported suite (notes.txt)" in capsys.readouterr().err
    assert (dest / "notes.txt").read_text() == "mine" and load_suite(dest).window_count == 3
    assert not list(tmp_path.glob(".imported.*"))  # no temporary folder left beside it


def test_an_interrupted_import_leaves_no_suite(tmp_path: Path, suite, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from kldtui.formats import logits_writer
    from kldtui.stages.convert import BosChoice, import_llama_cpp

    out = tmp_path / "base.kld"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out)]) == 0
    calls = []
    real = logits_writer.LogitsFileWriter.commit

    def killed(self):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(logits_writer.LogitsFileWriter, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        import_llama_cpp(out, tmp_path / "imp", bos=BosChoice(None, "--no-bos"))
    assert not (tmp_path / "imp").exists() and not list(tmp_path.glob(".imp.*"))


def test_import_bos_from_the_gguf(tmp_path: Path, suite, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "base.kld"
    assert main(["convert", str(tmp_path / "suite"), "--to", "llama-cpp", str(out)]) == 0
    with_bos = write_gguf(tmp_path / "bos.gguf", vocab=VOCAB, add_bos=True, bos=7)
    assert main(["convert", str(out), "--to", "suite", str(tmp_path / "a"), "--model", str(with_bos)]) == 0
    assert "adds BOS 7" in capsys.readouterr().out
    a = load_suite(tmp_path / "a")
    assert all(a.load_tokens(w)[0] == 7 for w in a.windows)
    unsaid = write_gguf(tmp_path / "unsaid.gguf", vocab=VOCAB)
    assert main(["convert", str(out), "--to", "suite", str(tmp_path / "b"), "--model", str(unsaid)]) == 2
    assert "does not record tokenizer.ggml.add_bos_token" in capsys.readouterr().err
    assert main(["convert", str(out), "--to", "suite", str(tmp_path / "c"), "--bos", str(VOCAB)]) == 2
    assert "outside the vocabulary" in capsys.readouterr().err


def test_damaged_base_file_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "x.kld"
    bad.write_bytes(b"_logits_" + b"\0" * 12)
    assert main(["convert", str(bad), "--to", "suite", str(tmp_path / "s"), "--no-bos"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]
    assert not (tmp_path / "s").exists()
