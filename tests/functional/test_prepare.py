"""``kldtui prepare`` from local files: token ids, hashes, manifest fields, refusals."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kldtui.cli.main import main
from kldtui.formats.suite import load_suite
from tests.fixtures_prepare import (
    build_tokenizer,
    code_rows,
    dolly_rows,
    prose_rows,
    write_jsonl,
    write_parquet,
)

pytest.importorskip("datasets")
pytest.importorskip("transformers")

CONTEXT = 32


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prepare-inputs")
    return {
        "tokenizer": build_tokenizer(root / "tokenizer"),
        "prose": write_jsonl(root / "prose" / "test.jsonl", prose_rows(80)),
        "code": write_parquet(root / "code" / "test.parquet", code_rows(12)),
        "dolly": write_jsonl(root / "dolly.jsonl", dolly_rows(15)),
        "root": root,
    }


def _sources_toml(path: Path, inputs: dict[str, Path], *, prose_windows: int = 4) -> Path:
    path.write_text(f"""
[[source]]
domain = "prose"
dataset = "{inputs['prose'].parent}"
split = "test"
windows = {prose_windows}
text_field = "text"

[[source]]
domain = "code"
dataset = "{inputs['code']}"
split = "test"
windows = 2
builder = "humaneval"

[[source]]
domain = "instruction"
dataset = "{inputs['dolly']}"
split = "train"
windows = 1
builder = "dolly"
""", encoding="utf-8")
    return path


# The construction rules, written out again from docs/FORMATS.md (not kldtui's code).
def _expected_texts(inputs: dict[str, Path]) -> dict[str, str]:
    prose = "\n\n".join(r["text"].strip() for r in prose_rows(80) if r["text"].strip())
    code = "\n\n\n".join(f"# {r['task_id']}\n{r['prompt']}{r['canonical_solution']}\n\n# Tests\n{r['test']}"
                         for r in code_rows(12))
    records = []
    for r in dolly_rows(15):
        parts = [f"### Category\n{r['category']}", f"### Instruction\n{r['instruction']}"]
        if r["context"].strip():
            parts.append(f"### Context\n{r['context']}")
        parts.append(f"### Response\n{r['response']}")
        records.append("\n\n".join(parts))
    return {"prose": prose, "code": code, "instruction": "\n\n\n".join(records)}


def test_prepare_matches_the_rule_and_verifies(inputs: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoTokenizer

    out = tmp_path / "suite"
    sources = _sources_toml(tmp_path / "SOURCES.toml", inputs)
    assert main(["prepare", "--tokenizer", str(inputs["tokenizer"]), "--output-dir", str(out),
                 "--sources", str(sources), "--context-length", str(CONTEXT)]) == 0
    doc = json.loads((out / "suite-manifest.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(inputs["tokenizer"]))
    counts = {"prose": 4, "code": 2, "instruction": 1}
    index = 0
    for n, (domain, text) in enumerate(_expected_texts(inputs).items()):
        ids = tok.encode(text, add_special_tokens=False)
        count = counts[domain]
        starts = ([(len(ids) - CONTEXT) // 2] if count == 1 else
                  [i * (len(ids) - CONTEXT) // (count - 1) for i in range(count)])
        ds = doc["datasets"][n]
        assert ds["domain"] == domain and ds["source_tokens"] == len(ids)
        assert ds["window_starts"] == starts and ds["windows"] == count
        assert ds["source_utf8_sha256"] == hashlib.sha256(text.encode()).hexdigest()
        for domain_index, start in enumerate(starts):
            w = doc["windows"][index]
            expected = ids[start:start + CONTEXT]
            stored = (out / w["token_file"]).read_text()
            assert stored == json.dumps(expected, separators=(",", ":")) + "\n"
            assert w["token_file"] == f"tokens/window-{index:03d}-{domain}.json"
            assert (w["index"], w["domain"], w["domain_index"]) == (index, domain, domain_index)
            assert (w["source_token_start"], w["source_token_end"]) == (start, start + CONTEXT)
            assert w["token_ids_first16"] == expected[:16] and w["token_ids_last16"] == expected[-16:]
            assert w["dataset_revision"] == ds["revision"]
            index += 1
    # every field of the published manifest, with the published meanings
    assert doc["format_version"] == 1 and doc["add_special_tokens"] is False
    assert doc["context_length"] == CONTEXT and doc["window_count"] == 7
    assert doc["scored_positions_per_window"] == CONTEXT - 1
    assert doc["total_scored_positions"] == 7 * (CONTEXT - 1)
    assert doc["domain_counts"] == counts
    # a local folder: its name (not the producer's full path), said to be a local folder
    assert doc["model_tokenizer"] == inputs["tokenizer"].name and doc["tokenizer_source"] == "local folder"
    assert doc["tokenizer_class"] == type(tok).__name__
    assert doc["selection"].startswith("evenly spaced") and doc["kind"]
    for ds in doc["datasets"]:
        assert {"domain", "dataset", "config", "split", "revision", "dataset_fingerprint", "rows",
                "construction", "source_utf8_sha256", "source_tokens", "window_starts",
                "windows"} <= set(ds)
        assert len(ds["revision"]) == 64  # local files: a content hash
    assert doc["datasets"][0]["rows"] == 80
    # the manifest text: keys sorted, 2-space indent, one trailing newline
    text = (out / "suite-manifest.json").read_text()
    assert text == json.dumps(doc, indent=2, sort_keys=True) + "\n"

    # A reader that follows only the published contract (as the original comparator does).
    hashes = []
    for w in doc["windows"]:
        raw = (out / w["token_file"]).read_text().rstrip("\n")
        assert hashlib.sha256(raw.encode()).hexdigest() == w["token_ids_json_sha256"]
        assert len(json.loads(raw)) == w["num_tokens"] == doc["context_length"]
        hashes.append(w["token_ids_json_sha256"])
    assert hashlib.sha256("\n".join(hashes).encode()).hexdigest() == doc["suite_token_hash_sha256"]
    suite = load_suite(out)
    suite.check_suite_hash()
    assert [suite.load_tokens(w) for w in suite.windows]
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0

    # same inputs, same suite; refused when the folder exists
    again = tmp_path / "again"
    assert main(["prepare", "--tokenizer", str(inputs["tokenizer"]), "--output-dir", str(again),
                 "--sources", str(sources), "--context-length", str(CONTEXT)]) == 0
    assert (again / "suite-manifest.json").read_text() == text
    capsys.readouterr()
    assert main(["prepare", "--tokenizer", str(inputs["tokenizer"]), "--output-dir", str(out),
                 "--sources", str(sources), "--context-length", str(CONTEXT)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_too_few_tokens_and_bad_sources(inputs: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    tok = str(inputs["tokenizer"])
    many = _sources_toml(tmp_path / "many.toml", inputs, prose_windows=500)
    assert main(["prepare", "--tokenizer", tok, "--output-dir", str(tmp_path / "x"),
                 "--sources", str(many), "--context-length", str(CONTEXT)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("kldtui: error: ") and "fewer than 500 windows x 32 tokens" in last
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.*"))

    bad = tmp_path / "bad.toml"
    for body, needle in [
        ('[[source]]\ndomain="p"\ndataset="d"\nsplit="t"\nwindows=1\n', "exactly one of"),
        ('[[source]]\ndomain="p"\ndataset="d"\nsplit="t"\nwindows=1\nbuilder="nope"\n', "unknown builder"),
        ('[[source]]\ndomain="a/b"\ndataset="d"\nsplit="t"\nwindows=1\ntext_field="x"\n', "domain"),
        ('[[source]]\ndomain="p"\ndataset="d"\nsplit="t"\nwindows=0\ntext_field="x"\n', "windows"),
        ('[[source]]\ndomain="p"\ndataset="d"\nsplit="t"\nwindows=1\ntext_field="x"\nextra=1\n', "unknown"),
        ("nothing = 1\n", "unknown top-level"),
    ]:
        bad.write_text(body)
        assert main(["prepare", "--tokenizer", tok, "--output-dir", str(tmp_path / "y"),
                     "--sources", str(bad)]) == 2
        assert needle in capsys.readouterr().err


def test_pinned_local_revision_and_missing_column(inputs: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from kldtui.stages.prepare import Source, local_content_hash, prepare_suite

    data = write_jsonl(tmp_path / "d.jsonl", prose_rows(80))
    pinned = local_content_hash([data], data)
    ok = Source("prose", str(data), "train", 2, revision=pinned, text_field="text")
    suite = prepare_suite(tmp_path / "ok", str(inputs["tokenizer"]), sources=[ok],
                          context_length=CONTEXT).suite
    assert suite.raw["datasets"][0]["revision"] == pinned
    data.write_text(data.read_text() + json.dumps({"text": "one more row"}) + "\n")
    from kldtui.errors import BadInput

    with pytest.raises(BadInput, match="not the pinned revision"):
        prepare_suite(tmp_path / "changed", str(inputs["tokenizer"]), sources=[ok], context_length=CONTEXT)
    wrong = Source("prose", str(data), "train", 2, text_field="body")
    with pytest.raises(BadInput, match="no column"):
        prepare_suite(tmp_path / "col", str(inputs["tokenizer"]), sources=[wrong], context_length=CONTEXT)
    with pytest.raises(BadInput, match="tokenizer folder not found"):
        prepare_suite(tmp_path / "tok", str(tmp_path / "no-such-tokenizer"), sources=[wrong])


def test_window_starts_formula() -> None:
    from kldtui.stages.prepare import window_starts

    assert window_starts(100, 10, 1) == [45]
    assert window_starts(100, 10, 10) == list(range(0, 100, 10))
    assert window_starts(1000, 10, 4) == [0, 330, 660, 990]
    with pytest.raises(ValueError):
        window_starts(99, 10, 10)


def test_local_datasets_are_recorded_by_their_own_name_alone(inputs: dict[str, Path], tmp_path: Path) -> None:
    """A local dataset is recorded by its file or folder name, as the hidden layout records it: no
    part of the producer's path (folders above the dataset, the sources file's folder for a
    relative path) reaches the suite, in any file."""
    import shutil

    place = tmp_path / "producer-home-7f3a" / "private-mount-42"
    for name in ("prose", "code"):
        shutil.copytree(inputs[name].parent, place / name)
    shutil.copy(inputs["dolly"], place / "dolly.jsonl")
    local = {"prose": place / "prose" / "test.jsonl", "code": place / "code" / "test.parquet",
             "dolly": place / "dolly.jsonl"}
    sources = _sources_toml(place / "SOURCES.toml", local)  # absolute paths
    relative = place / "SOURCES-relative.toml"  # paths relative to the sources file
    relative.write_text(sources.read_text().replace(f"{place}/", "./"), encoding="utf-8")
    for n, listing in enumerate((sources, relative)):
        out = tmp_path / f"suite-{n}"
        assert main(["prepare", "--tokenizer", str(inputs["tokenizer"]), "--output-dir", str(out),
                     "--sources", str(listing), "--context-length", str(CONTEXT)]) == 0
        doc = json.loads((out / "suite-manifest.json").read_text())
        assert [d["dataset"] for d in doc["datasets"]] == ["prose", "test.parquet", "dolly.jsonl"]
        assert {w["dataset"] for w in doc["windows"]} == {"prose", "test.parquet", "dolly.jsonl"}
        for f in (p for p in out.rglob("*") if p.is_file()):
            text = f.read_text()
            for part in (*place.parts[1:], str(tmp_path)):
                assert part not in text, (f, part)


def test_json_lines_without_datasets_give_the_same_suite(inputs: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The vLLM venv of the tiny example has no ``datasets``: JSON Lines are read directly."""
    import sys

    from kldtui.stages.prepare import Source, prepare_suite

    source = Source("prose", str(inputs["prose"]), "test", 3, text_field="text")
    with_ds = prepare_suite(tmp_path / "with", str(inputs["tokenizer"]), sources=[source],
                            context_length=CONTEXT).suite
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    without = prepare_suite(tmp_path / "without", str(inputs["tokenizer"]), sources=[source],
                            context_length=CONTEXT).suite
    assert without.suite_token_hash_sha256 == with_ds.suite_token_hash_sha256
    a, b = with_ds.raw["datasets"][0], without.raw["datasets"][0]
    assert {k: v for k, v in a.items() if k != "dataset_fingerprint"} == \
        {k: v for k, v in b.items() if k != "dataset_fingerprint"}
    assert b["dataset_fingerprint"] is None
    parquet = Source("code", str(inputs["code"]), "test", 1, builder="humaneval")
    from kldtui.errors import BadInput

    with pytest.raises(BadInput, match="needs the datasets package"):
        prepare_suite(tmp_path / "pq", str(inputs["tokenizer"]), sources=[parquet], context_length=CONTEXT)
