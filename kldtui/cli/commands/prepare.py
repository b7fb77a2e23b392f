"""``kldtui prepare --tokenizer TOK --output-dir DIR [--layout hidden --sources PLAN.toml]``: build a
suite folder from pinned text sources: evenly spaced windows (``--layout logits``, the default) or a
stratified, clustered context suite of the hidden-state layout (``--layout hidden``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

HELP = "build a suite (suite-manifest.json + tokens/) from pinned datasets and a model's tokenizer"
LAYOUTS = ("logits", "hidden")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True,
                        help="tokenizer: a local folder or a Hugging Face model id (AutoTokenizer)")
    parser.add_argument("--output-dir", required=True, help="new suite folder (refused if it exists)")
    parser.add_argument("--layout", choices=LAYOUTS, default="logits",
                        help="logits: evenly spaced windows per source (the published logits suite's "
                        "layout); hidden: a stratified, clustered context suite with analysis/"
                        "qualification partitions and sentinels (the hidden-state suite's layout; needs "
                        "--sources PLAN.toml)")
    parser.add_argument("--sources", default=None,
                        help="logits layout: SOURCES.toml with [[source]] tables (default: wikitext 16, "
                        "humaneval 8, dolly 8 windows, as the published suite); hidden layout: PLAN.toml "
                        "with [[stratum]] and [[source]] tables (required)")
    parser.add_argument("--context-length", type=int, default=2048, help="tokens per window (default 2048)")
    parser.add_argument("--seed", type=int, default=None,
                        help="hidden layout: the seed every selection, offset, partition and sentinel salt "
                        "derives from (recorded in the suite; default 1)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the tokenizer's own Python code to run (needed by some models)")
    parser.add_argument("--kind", default=None,
                        help="the manifest's 'kind' text (default 'KLD corpus suite', or "
                        "'distribution-fidelity suite' for the hidden layout)")


def _logits(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.errors import BadInput

    if args.seed is not None:
        raise BadInput("--seed draws a --layout hidden suite; the logits layout's windows are evenly spaced "
                       "(no seed): drop --seed, or add --layout hidden with a PLAN.toml")
    from kldtui.stages.prepare import DEFAULT_SOURCES, load_sources, prepare_suite

    sources = load_sources(args.sources) if args.sources else list(DEFAULT_SOURCES)
    with ConsoleProgress() as emit:
        result = prepare_suite(args.output_dir, args.tokenizer, sources=sources,
                               context_length=args.context_length, trust_remote_code=args.trust_remote_code,
                               kind=args.kind or "KLD corpus suite", emit=emit)
    suite = result.suite
    counts = ", ".join(f"{d} {n}" for d, n in suite.domain_counts.items())
    print(f"suite ready: {result.output_dir} ({suite.window_count} windows of {suite.context_length} "
          f"tokens: {counts}; suite hash {suite.suite_token_hash_sha256})")
    return 0


def _hidden(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.errors import BadInput
    from kldtui.stages.prepare_hidden import KIND, load_plan, prepare_hidden_suite

    if not args.sources:
        raise BadInput("--layout hidden needs --sources PLAN.toml ([[stratum]] tables with their context "
                       "counts and the [[source]] tables feeding them; docs/PRODUCING.md)")
    plan = load_plan(args.sources)
    seed = 1 if args.seed is None else args.seed
    with ConsoleProgress() as emit:
        result = prepare_hidden_suite(args.output_dir, args.tokenizer, plan,
                                      context_length=args.context_length, seed=seed,
                                      trust_remote_code=args.trust_remote_code, kind=args.kind or KIND,
                                      emit=emit)
    doc = result.suite.raw
    counts = ", ".join(f"{d} {n}" for d, n in result.suite.domain_counts.items())
    parts = doc["partition_counts"]
    print(f"suite ready: {result.output_dir} ({result.contexts} contexts of {result.suite.context_length} "
          f"tokens: {counts}; analysis {parts.get('analysis', 0)}, qualification "
          f"{parts.get('qualification', 0)}, sentinels {doc['sentinel_count']}; seed {seed}; suite hash "
          f"{result.suite.suite_token_hash_sha256})")
    return 0


RUNNERS: dict[str, Callable[[argparse.Namespace], int]] = {"logits": _logits, "hidden": _hidden}


def run(args: argparse.Namespace) -> int:
    from kldtui.stages.prepare import require_packages

    require_packages()  # datasets is needed for Hub and parquet sources only (prepare says so then)
    return RUNNERS[args.layout](args)
