"""Local inputs for ``kldtui prepare`` tests: small text datasets and a tokenizer folder.

The tokenizer is a byte-level BPE trained here with the ``tokenizers`` library and saved as a
transformers tokenizer folder, so AutoTokenizer loads it exactly as it would a model's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = ("the model reads token windows and scores every position against a reference while "
         "quantized weights move its distribution slightly def return import class value list "
         "for if else print sum range len data file path open write read").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def prose_rows(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """Wikitext-like rows: headings, paragraphs, and blank rows that the builder drops."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            rows.append({"text": ""})
        elif kind == 1:
            rows.append({"text": f" = {sentence(rng, 3).title()} = \n"})
        else:
            rows.append({"text": f" {sentence(rng, rng.randint(12, 30))} . \n"})
    return rows


def code_rows(n: int, seed: int = 2) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"task_id": f"Task/{i}",
             "prompt": f"def f{i}(x):\n    \"\"\"{sentence(rng, 8)}\"\"\"\n",
             "canonical_solution": f"    return x + {rng.randint(0, 99)}\n",
             "test": f"def check(c):\n    assert c({i}) == {i}\n",
             "entry_point": f"f{i}"} for i in range(n)]


def dolly_rows(n: int, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"instruction": sentence(rng, 10) + "?",
             "context": sentence(rng, 15) if i % 2 else "  ",
             "response": sentence(rng, 20) + ".",
             "category": rng.choice(["open_qa", "closed_qa", "summarization"])} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_tokenizer(out_dir: Path, vocab_size: int = 400) -> Path:
    """A byte-level BPE tokenizer trained on the test vocabulary, saved for AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(0)
    tok.train_from_iterator([sentence(rng, 20) for _ in range(200)], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out_dir)
    return out_dir


def article_rows(articles: int, *, seed: int = 4, sites: int = 3, min_paragraphs: int = 2,
                 max_paragraphs: int = 12) -> list[dict[str, Any]]:
    """Rows of paragraphs grouped into articles (``title``) published by sites (``site``): the
    documents and source clusters of a hidden-layout plan (``source_id_field = "title"``,
    ``cluster_field = "site"``); articles differ in length, so some hold several contexts."""
    rng = random.Random(seed)
    rows = []
    for a in range(articles):
        site = f"site-{a % sites}.example"
        for _ in range(rng.randint(min_paragraphs, max_paragraphs)):
            rows.append({"title": f"article {a}", "site": site, "text": sentence(rng, rng.randint(20, 40))})
    return rows


def write_hidden_plan(path: Path, data: dict[str, Path], *, strata: str, per_source: int = 2) -> Path:
    """A PLAN.toml with ``strata`` (its [[stratum]] tables, written out) over the ``data`` files:
    ``prose`` (articles: documents by title, clusters by site) and ``code`` (one task a row)."""
    path.write_text(f"""
[plan]
contexts_per_source = {per_source}
{strata}
[[source]]
key = "articles"
dataset = "{data['articles']}"
split = "train"
stratum = "prose"
text_field = "text"
source_id_field = "title"
cluster_field = "site"
language = "en"
license = "CC0"

[[source]]
key = "tasks"
dataset = "{data['code']}"
split = "test"
stratum = "code"
builder = "humaneval"
rows_per_source = 3
representation = "source_file"
language = "python"
""", encoding="utf-8")
    return path
