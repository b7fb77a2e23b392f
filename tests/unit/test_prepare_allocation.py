"""The hidden layout's allocation (kldtui.stages.prepare_hidden.allocate): exact counts per stratum,
whole source clusters per partition, sentinels among analysis contexts, non-overlapping spans,
determinism for a seed, and one-line refusals of plans that cannot be met."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from kldtui.errors import BadInput
from kldtui.stages.prepare_hidden import (
    Document,
    NearDuplicates,
    Plan,
    PlanSource,
    Salts,
    StratumPlan,
    allocate,
    context_starts,
    parse_plan,
)

LENGTH = 16


def _documents(stratum: str, count: int, *, clusters: int, seed: int) -> list[Document]:
    rng = random.Random(seed)
    sizes = [LENGTH - 1, LENGTH, 3 * LENGTH, 5 * LENGTH + 3]
    return [Document(f"{stratum}-src", stratum, f"data/{stratum}", f"doc-{i}", f"cluster-{i % clusters}",
                     f"{seed:02x}{i:062x}", tokens=rng.choice(sizes)) for i in range(count)]


def _tokens(doc: Document) -> Sequence[int]:
    base = int(doc.source_id.split("-")[1]) * 1000
    return [base + t for t in range(doc.tokens)]


def _plan(*strata: StratumPlan, per_source: int = 2) -> Plan:
    sources = tuple(PlanSource(f"{s.name}-src", "d", "train", s.name, text_field="text") for s in strata)
    return Plan(strata, sources, per_source, where="PLAN.toml")


STRATA = (StratumPlan("prose", 12, qualification=4, sentinels=3), StratumPlan("code", 7, qualification=2,
                                                                             sentinels=1))
DOCS = _documents("prose", 20, clusters=7, seed=1) + _documents("code", 15, clusters=15, seed=2)


def test_counts_partitions_and_sentinels_are_exact() -> None:
    out = allocate(_plan(*STRATA), DOCS, _tokens, length=LENGTH, salts=Salts(1))
    assert [c.document.stratum for c in out] == ["prose"] * 12 + ["code"] * 7
    for stratum in STRATA:
        mine = [c for c in out if c.document.stratum == stratum.name]
        assert sum(c.partition == "qualification" for c in mine) == stratum.qualification
        assert sum(c.sentinel for c in mine) == stratum.sentinels
        assert all(c.partition == "analysis" for c in mine if c.sentinel)
    partitions: dict[str, set[str]] = {}
    for c in out:
        partitions.setdefault(c.document.cluster, set()).add(c.partition)
    assert all(len(p) == 1 for p in partitions.values())  # no cluster in two partitions
    per_doc: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for c in out:
        assert len(c.tokens) == LENGTH and list(c.tokens) == list(_tokens(c.document))[c.start:c.stop]
        per_doc.setdefault((c.document.stratum, c.document.source_id), []).append((c.start, c.stop))
    assert max(len(v) for v in per_doc.values()) == 2  # several contexts from a long document
    for spans in per_doc.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # never overlapping
    keys = [(c.document.stratum, c.selection_key, c.start) for c in out[:12]]
    assert keys == sorted(keys)  # by selection key within a stratum


def test_the_same_seed_draws_the_same_suite_and_another_seed_another() -> None:
    def draw(seed: int, docs: list[Document]) -> list[tuple[str, int, str, bool]]:
        return [(c.document.source_id, c.start, c.partition, c.sentinel)
                for c in allocate(_plan(*STRATA), docs, _tokens, length=LENGTH, salts=Salts(seed))]

    assert draw(1, DOCS) == draw(1, list(reversed(DOCS)))  # not the order sources list documents in
    assert draw(1, DOCS) != draw(2, DOCS)


def test_duplicate_documents_count_once() -> None:
    docs = _documents("code", 4, clusters=4, seed=3)
    twin = Document("code-src", "code", "data/code", "doc-copy", "cluster-x", docs[0].content_sha256,
                    99 * LENGTH)
    with pytest.raises(BadInput, match="8 contexts asked, its sources give only"):
        allocate(_plan(StratumPlan("code", 8)), [*docs, twin], _tokens, length=LENGTH, salts=Salts(1))


def test_context_starts_stay_in_their_segments() -> None:
    doc = Document("s", "x", "d", "i", "c", "0" * 64, tokens=10 * LENGTH + 5)
    for count in (1, 2, 3, 10):
        starts = context_starts(Salts(4), doc, count, LENGTH)
        segment = doc.tokens // count
        assert all(i * segment <= s <= (i + 1) * segment - LENGTH for i, s in enumerate(starts))


@pytest.mark.parametrize(("plan", "needle"), [
    (_plan(StratumPlan("prose", 500)), "PLAN.toml: stratum 'prose': 500 contexts asked, its sources give"),
    # clusters of 2 contexts each: an odd qualification count cannot be whole clusters
    (_plan(StratumPlan("prose", 12, qualification=3)), "qualification = 3 cannot be made of whole source "
     "clusters"),
])
def test_impossible_plans_are_refused_in_one_line(plan: Plan, needle: str) -> None:
    docs = [Document("prose-src", "prose", "d", f"doc-{i}", f"cluster-{i}", f"{i:064x}", tokens=4 * LENGTH)
            for i in range(20)]
    with pytest.raises(BadInput, match=needle) as err:
        allocate(plan, docs, _tokens, length=LENGTH, salts=Salts(1))
    assert "\n" not in str(err.value) and ("set qualification = 2 or 4" in str(err.value)
                                           or "lower its 'contexts'" in str(err.value))


def test_a_cluster_feeding_two_strata_is_refused() -> None:
    a = Document("a", "prose", "d", "doc-1", "shared", "1" * 64, tokens=2 * LENGTH)
    b = Document("b", "code", "d", "doc-2", "shared", "2" * 64, tokens=2 * LENGTH)
    with pytest.raises(BadInput, match="also feeds stratum 'prose'"):
        allocate(_plan(StratumPlan("prose", 1), StratumPlan("code", 1)), [a, b], _tokens, length=LENGTH,
                 salts=Salts(1))


@pytest.mark.parametrize(("doc", "needle"), [
    ({"source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x", "text_field": "t"}]},
     "no [[stratum]] tables"),
    ({"stratum": [{"name": "x", "contexts": 2, "sentinels": 3}],
      "source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x", "text_field": "t"}]},
     "3 sentinels but only 2 analysis contexts"),
    ({"stratum": [{"name": "x", "contexts": 2}, {"name": "y", "contexts": 1}],
      "source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x", "text_field": "t"}]},
     "stratum 'y' has no [[source]]"),
    ({"stratum": [{"name": "x", "contexts": 2}],
      "source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x", "text_field": "t",
                  "windows": 2}]},
     "'windows' is the logits layout's"),
    ({"stratum": [{"name": "x", "contexts": 2}],
      "source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x", "text_field": "t",
                  "document_start": "(unclosed"}]},
     "document_start '(unclosed' is not a regular expression"),
])
def test_plan_file_errors_name_the_file_and_the_fix(doc: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(BadInput) as err:
        parse_plan(doc, "PLAN.toml")
    assert str(err.value).startswith("PLAN.toml: ") and needle in str(err.value)


def test_the_example_plan_reads_as_documented() -> None:
    from kldtui.stages.prepare_hidden import load_plan
    from tests.paths import REPO

    plan = load_plan(REPO / "examples" / "hidden-suite-sources.toml")
    assert [(s.name, s.contexts, s.qualification, s.sentinels) for s in plan.strata] == [
        ("prose", 16, 4, 2), ("code", 8, 2, 1), ("instruction", 8, 2, 1)]
    assert plan.contexts == 32 and plan.contexts_per_source == 2
    assert [(s.key, s.dataset, s.stratum) for s in plan.sources] == [
        ("wikitext", "Salesforce/wikitext", "prose"), ("humaneval", "openai/openai_humaneval", "code"),
        ("dolly", "databricks/databricks-dolly-15k", "instruction")]


def test_document_start_groups_rows_into_articles() -> None:
    from kldtui.stages.prepare_hidden import documents_of
    from tests.fixtures_prepare import prose_rows

    rows = prose_rows(40)  # a heading (" = Title = ") every fourth row, from row 1
    source = PlanSource("wiki", "d", "test", "prose", builder="wikitext", document_start="^ = [^=]")
    docs = documents_of(source, rows, dataset_label="d", revision="r", where="PLAN.toml: source 1")
    # row 0 (blank) alone before the first heading gives no text: no document
    assert [d.source_id for d in docs.documents] == [f"row-{n}" for n in range(1, 40, 4)]
    assert docs.rows_of["row-5"] == 4 and docs.texts["row-5"].startswith("= ")
    assert all(d.source_cluster_id == d.source_id for d in docs.documents)  # no cluster field: itself
    with pytest.raises(BadInput) as err:
        parse_plan({"stratum": [{"name": "x", "contexts": 1}],
                    "source": [{"key": "a", "dataset": "d", "split": "t", "stratum": "x",
                                "builder": "wikitext", "document_start": "(", "rows_per_source": 2}]},
                   "PLAN.toml")
    assert "give one of rows_per_source, document_start" in str(err.value)


def _near_world(changed: int, step: int = 40) -> tuple[list[Document], dict[str, list[int]]]:
    """Four documents of 640 tokens: an original, a copy with ``changed`` tokens replaced (every
    ``step``-th), and two unrelated ones."""
    rng = random.Random(5)
    original = [rng.randrange(50_000) for _ in range(4 * LENGTH * 10)]
    copy = list(original)
    for i in range(changed):
        copy[i * step] = 60_000 + i
    tokens = {"orig": original, "copy": copy, "other": [rng.randrange(50_000) for _ in original],
              "other2": [rng.randrange(50_000) for _ in original]}
    docs = [Document("s", "prose", "d", name, name, f"{n:064x}", len(ids))
            for n, (name, ids) in enumerate(tokens.items())]
    return docs, tokens


def test_near_duplicate_documents_are_passed_over() -> None:
    docs, tokens = _near_world(changed=4)  # 4 of 640 tokens: 5-gram Jaccard about 0.94
    near = NearDuplicates(0.85, Salts(1).selection)
    by_name = {d.source_id: d for d in docs}
    assert [near.admit(by_name[k], tokens[k]) for k in ("orig", "other", "copy", "other2")] == [
        True, True, False, True]
    assert near.rejected == ["s/copy"]

    def draw(threshold: float, contexts: int, names: tuple[str, ...]) -> list[str]:
        plan = replace(_plan(StratumPlan("prose", contexts), per_source=1),
                       near_duplicate_threshold=threshold)
        out = allocate(plan, [by_name[n] for n in names], lambda d: tokens[d.source_id], length=LENGTH,
                       salts=Salts(1))
        return sorted(c.document.source_id for c in out)

    kept = draw(0.85, 3, ("orig", "copy", "other", "other2"))
    assert len({"orig", "copy"} & set(kept)) == 1  # one of the pair, never both
    assert draw(0.0, 3, ("orig", "copy", "other")) == ["copy", "orig", "other"]  # 0: no check
    with pytest.raises(BadInput, match="give only 2 once 1 near-duplicate documents are passed over"):
        draw(0.85, 3, ("orig", "copy", "other"))


def test_the_minhash_estimate_separates_near_from_far() -> None:
    near = NearDuplicates(0.85, Salts(2).selection)
    _, tokens = _near_world(changed=4)
    a, b, c = (near.signature(tokens[k]) for k in ("orig", "copy", "other"))
    assert (a == b).mean() > 0.85 and (a == c).mean() < 0.05
    _, far = _near_world(changed=120, step=5)  # every fifth token: nearly every 5-gram changed
    assert (a == near.signature(far["copy"])).mean() < 0.2
    assert near.signature([1, 2, 3]) is None
