"""``kldtui export-head`` (issue 22): the LM head read from a checkpoint's shard by its index (or a
single file) without loading the model, written as the published ``lm-head/`` (BF16, raw and file
hashes), never overwritten; tied embeddings said and exported; a quantized head refused."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from kldtui.cli.main import main
from kldtui.formats import fidelity as fid
from kldtui.metrics.replay import f32_to_bf16


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def _sharded(root: Path, head_name: str = "language_model.lm_head.weight",
             tied: bool = False) -> torch.Tensor:
    """A two-shard BF16 checkpoint with an index; the head (when it has one) in the second shard."""
    gen = torch.Generator().manual_seed(0)
    embed = torch.randn(96, 24, generator=gen).to(torch.bfloat16)
    head = torch.randn(96, 24, generator=gen).to(torch.bfloat16)
    root.mkdir(parents=True)
    shard1 = {"model.embed_tokens.weight": embed, "model.layers.0.mlp.weight": torch.randn(8, 24).bfloat16()}
    shard2 = {"model.norm.weight": torch.ones(24).bfloat16()} | ({} if tied else {head_name: head})
    save_file(shard1, str(root / "model-00001-of-00002.safetensors"))
    save_file(shard2, str(root / "model-00002-of-00002.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in shard1}
    weight_map |= {k: "model-00002-of-00002.safetensors" for k in shard2}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({"text_config": {"tie_word_embeddings": tied}}))
    return embed if tied else head


def test_a_sharded_bf16_head_is_exported_verbatim_by_its_index(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    expected = _sharded(tmp_path / "ckpt")
    out = tmp_path / "suite" / "lm-head"
    assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(out)]) == 0
    head = fid.load_lm_head(out)
    assert (head.vocab, head.hidden) == (96, 24)
    raw = _bits(expected).tobytes()
    assert np.array_equal(np.asarray(fid.head_bits(head)), _bits(expected))
    assert head.raw_tensor_sha256 == hashlib.sha256(raw).hexdigest()
    assert head.file_sha256 == hashlib.sha256(head.path.read_bytes()).hexdigest()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checkpoint_tensor_key"] == "language_model.lm_head.weight"
    assert manifest["source_shard"] == "model-00002-of-00002.safetensors"
    assert manifest["checkpoint_index_sha256"] == hashlib.sha256(
        (tmp_path / "ckpt" / "model.safetensors.index.json").read_bytes()).hexdigest()
    assert manifest["source_dtype"] == "BF16" and manifest["tied_word_embeddings"] is False
    assert manifest["kind"] == "LM head exported from the checkpoint"
    # never overwritten; a wrong expected hash keeps nothing
    capsys.readouterr()
    assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(out)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    other = tmp_path / "other"
    assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(other),
                 "--expect-raw-sha256", "0" * 64]) == 2
    assert "not the expected 0000" in capsys.readouterr().err and not other.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nor a half-written folder
    assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(other),
                 "--expect-raw-sha256", head.raw_tensor_sha256 or ""]) == 0


def test_tied_embeddings_export_the_input_embedding_and_say_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    expected = _sharded(tmp_path / "ckpt", tied=True)
    out = tmp_path / "head"
    assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(out)]) == 0
    said = capsys.readouterr()
    assert "ties its word embeddings and stores no LM head: its input embedding model.embed_tokens.weight" \
        in said.out + said.err
    assert np.array_equal(np.asarray(fid.head_bits(fid.load_lm_head(out))), _bits(expected))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tied_word_embeddings"] is True and "tied word embeddings" in manifest["kind"]
    # without the config saying so, an embedding is never taken for the head
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    args = ["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(tmp_path / "h2")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "holds no LM head kldtui knows" in err and "says its word embeddings are tied" in err
    assert "model.embed_tokens.weight" in err  # what it holds, to pass to --tensor
    assert main([*args, "--tensor", "model.embed_tokens.weight"]) == 0


def test_a_float32_single_file_head_is_rounded_to_bf16(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    weight = torch.randn(50, 8, generator=torch.Generator().manual_seed(1))
    save_file({"lm_head.weight": weight, "model.embed_tokens.weight": torch.zeros(50, 8)},
              str(ckpt / "model.safetensors"))
    out = tmp_path / "head"
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(out)]) == 0
    said = capsys.readouterr()
    assert "lm_head.weight is F32: rounded to BF16" in said.out + said.err
    head = fid.load_lm_head(out)
    assert np.array_equal(np.asarray(fid.head_bits(head)), f32_to_bf16(weight.numpy()))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source_dtype"] == "F32" and manifest["checkpoint_index_sha256"] is None
    assert manifest["source_shard"] == "model.safetensors"


def test_a_quantized_head_or_a_missing_checkpoint_is_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    save_file({"lm_head.weight": torch.zeros(50, 8, dtype=torch.int8),
               "lm_head.weight_scale": torch.ones(50)}, str(ckpt / "model.safetensors"))
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lm_head.weight is I8 [50, 8] with lm_head.weight_scale" in err[0]
    assert "export it from the unquantized checkpoint" in err[0]
    assert main(["export-head", "--checkpoint", str(tmp_path / "nope"), "--output", str(tmp_path / "h")]) == 2
    assert "not found; give the checkpoint folder" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json", "config.json"])
def test_a_fifo_in_place_of_the_checkpoints_file_is_named(tmp_path: Path, name: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """It said "neither model.safetensors.index.json nor model.safetensors (found model.safetensors:
    give that file)" of a FIFO named model.safetensors."""
    import os

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shard = {"model.safetensors.index.json": "model-00001-of-00001.safetensors",
             "config.json": "model.safetensors"}.get(name)
    if shard is not None:  # the head is there: the FIFO is not taken for an absent file, nor skipped
        save_file({"lm_head.weight": torch.zeros(50, 8)}, str(ckpt / shard))
    os.mkfifo(ckpt / name)
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{ckpt / name}: is a FIFO (named pipe), not a regular file" in err[0], err
    assert "neither" not in err[0] and not (tmp_path / "h").exists()


def test_a_stopped_export_leaves_no_folder_a_later_run_would_take_for_a_head(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run exports a candidate's head only when its lm-head/ is missing: a half-written one left by
    a stopped export would be taken for the head. The head is renamed into place once whole."""
    from kldtui.stages.export_head import export_head

    _sharded(tmp_path / "ckpt")

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fid, "write_tensor_file", stopped)
    out = tmp_path / "candidate" / "lm-head"
    with pytest.raises(KeyboardInterrupt):
        export_head(tmp_path / "ckpt", out)
    assert sorted(p.name for p in (tmp_path / "candidate").iterdir()) == []


def test_an_exported_head_is_readable_like_other_outputs(tmp_path: Path) -> None:
    """Written in a temporary folder and renamed into place, the head kept mkdtemp's 0700: another
    user of a shared disk could not read it. It gets mkdir's permissions under the umask."""
    _sharded(tmp_path / "ckpt")
    out = tmp_path / "suite" / "lm-head"
    old = os.umask(0o022)
    try:
        assert main(["export-head", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / fid.HEAD_FILE).stat().st_mode & 0o777 == 0o644
