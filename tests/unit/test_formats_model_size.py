"""A candidate's size and bits per weight from safetensors headers, as given, and in the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kldtui.errors import BadInput
from kldtui.formats import model_size
from kldtui.formats.model_size import ModelSize
from kldtui.formats.report_model import ComparisonReport
from tests.fixtures_decide import make_report


def _dense(path: Path) -> None:
    save_file({"model.embed_tokens.weight": np.zeros((100, 16), np.float16),
               "model.layers.0.mlp.weight": np.zeros((16, 16), np.float16),
               "model.norm.weight": np.ones(16, np.float16)}, str(path))


def test_dense_safetensors_counts_every_weight_at_16_bits(tmp_path: Path) -> None:
    _dense(tmp_path / "model.safetensors")
    size = model_size.measure(tmp_path / "model.safetensors")
    assert size.source == "safetensors" and size.files == 1
    assert size.parameters == 100 * 16 + 16 * 16 + 16
    assert size.tensor_bytes == 2 * size.parameters
    assert size.file_bytes == (tmp_path / "model.safetensors").stat().st_size
    assert size.bits_per_weight == 16.0
    assert size.quantization == "F16 100%"


def test_sharded_folder_adds_its_shards(tmp_path: Path) -> None:
    save_file({"a.weight": np.zeros((10, 10), np.float32)}, str(tmp_path / "m-00001-of-00002.safetensors"))
    save_file({"b.weight": np.zeros((30,), np.float16)}, str(tmp_path / "m-00002-of-00002.safetensors"))
    size = model_size.measure(tmp_path)
    assert size.files == 2 and size.parameters == 130
    assert size.tensor_bytes == 400 + 60
    assert math.isclose(size.bits_per_weight or 0, 8 * 460 / 130)


def test_gptq_packed_weights_count_their_unpacked_weights(tmp_path: Path) -> None:
    # 4-bit GPTQ: qweight packs 8 weights per int32; scales, zeros and g_idx are not weights
    save_file({"l.qweight": np.zeros((64 // 8, 32), np.int32), "l.scales": np.zeros((1, 32), np.float16),
               "l.qzeros": np.zeros((1, 4), np.int32), "l.g_idx": np.zeros(64, np.int32),
               "lm_head.weight": np.zeros((10, 64), np.float16)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq",
                                                                              "bits": 4}}))
    size = model_size.measure(tmp_path)
    assert size.parameters == 64 * 32 + 640
    data = 8 * 32 * 4 + 32 * 2 + 4 * 4 + 64 * 4 + 640 * 2
    assert size.tensor_bytes == data
    assert math.isclose(size.bits_per_weight or 0, 8 * data / (64 * 32 + 640))


def test_packed_weights_without_bits_ask_for_the_parameters(tmp_path: Path) -> None:
    save_file({"l.qweight": np.zeros((8, 32), np.int32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(BadInput, match="config.json.*give parameters"):
        model_size.measure(tmp_path)


@pytest.mark.parametrize("make", ["empty_folder", "missing", "text", "damaged"])
def test_files_that_cannot_say_are_one_line_naming_them(tmp_path: Path, make: str) -> None:
    target = tmp_path / "m"
    if make == "empty_folder":
        target.mkdir()
    elif make == "text":
        target = tmp_path / "m.bin"
        target.write_text("x")
    elif make == "damaged":
        target = tmp_path / "m.safetensors"
        target.write_bytes(b"\xff" * 4)
    with pytest.raises(BadInput) as exc:
        model_size.measure(target)
    assert str(target) in str(exc.value) and "\n" not in str(exc.value)


def test_given_figures_fill_in_the_third_and_refuse_contradictions() -> None:
    size = model_size.given(parameters=8_000_000_000, size_bytes=4_000_000_000)
    assert size.source == "given" and size.bits_per_weight == 4.0
    assert model_size.given(parameters=1000, bits_per_weight=4.5).size_bytes == 562
    assert model_size.given(size_bytes=900, bits_per_weight=8.0).parameters == 900
    with pytest.raises(BadInput, match="give two of the three"):
        model_size.given(parameters=1000, size_bytes=1000, bits_per_weight=4.0)
    with pytest.raises(BadInput, match="parameters must be"):
        model_size.given(parameters=0, size_bytes=5)
    with pytest.raises(BadInput, match="bits_per_weight must be"):
        model_size.given(parameters=10, bits_per_weight=math.nan)


def test_report_carries_the_size_and_validates_it_on_load(tmp_path: Path) -> None:
    _dense(tmp_path / "model.safetensors")
    size = model_size.measure(tmp_path / "model.safetensors")
    doc = make_report([0.01] * 4)
    doc["candidate_size"] = size.to_json()
    report = ComparisonReport.from_json(doc, "r.json")
    assert report.candidate_size == size
    assert report.to_json()["candidate_size"] == size.to_json()
    for bad, what in [({**size.to_json(), "bits_per_weight": 900}, "bits_per_weight"),
                      ({**size.to_json(), "bits_per_weight": 3.0}, "8 x tensor_bytes / parameters"),
                      ({**size.to_json(), "parameters": -1}, "parameters"),
                      ({**size.to_json(), "source": "hearsay"}, "source"),
                      ({**size.to_json(), "file_bytes": 10}, "exceed file_bytes"),
                      ({**size.to_json(), "vouched": True}, "unknown field"),
                      ("4 GB", "expected an object")]:
        with pytest.raises(BadInput, match=f"r.json: candidate_size.*{what}"):
            ComparisonReport.from_json({**doc, "candidate_size": bad}, "r.json")


def test_describe_reads_right() -> None:
    size = ModelSize("given", parameters=8_030_000_000, tensor_bytes=4_690_000_000, bits_per_weight=4.672)
    assert size.describe() == "4.37 GiB, 8.03 B parameters, 4.672 bits per weight (given)"


def test_a_checkpoint_folder_counts_its_own_shards_once(tmp_path: Path) -> None:
    shard = {"a.weight": np.zeros((10, 10), np.float16)}
    save_file(shard, str(tmp_path / "model-00001-of-00001.safetensors"))
    save_file(shard, str(tmp_path / "consolidated.safetensors"))  # the same weights again (Mistral's layout)
    assert model_size.measure(tmp_path).parameters == 100
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a.weight": "consolidated.safetensors"}}))
    size = model_size.measure(tmp_path)
    assert size.parameters == 100 and size.files == 1
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "../x.safetensors"}}))
    with pytest.raises(BadInput, match="outside the folder"):
        model_size.measure(tmp_path)
    index.write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(BadInput, match="gone.safetensors, which is not in"):
        model_size.measure(tmp_path)
