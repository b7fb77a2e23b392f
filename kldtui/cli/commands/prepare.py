"""``kldtui prepare --tokenizer TOK --output-dir DIR``: build a suite folder from pinned text sources."""

from __future__ import annotations

import argparse

HELP = "build a suite (suite-manifest.json + tokens/) from pinned datasets and a model's tokenizer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True,
                        help="tokenizer: a local folder or a Hugging Face model id (AutoTokenizer)")
    parser.add_argument("--output-dir", required=True, help="new suite folder (refused if it exists)")
    parser.add_argument("--sources", default=None,
                        help="SOURCES.toml with [[source]] tables (default: wikitext 16, humaneval 8, "
                        "dolly 8 windows, as the published suite)")
    parser.add_argument("--context-length", type=int, default=2048, help="tokens per window (default 2048)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the tokenizer's own Python code to run (needed by some models)")
    parser.add_argument("--kind", default="KLD corpus suite", help="the manifest's 'kind' text")


def run(args: argparse.Namespace) -> int:
    from kldtui.stages.prepare import DEFAULT_SOURCES, load_sources, prepare_suite, require_packages

    require_packages()  # datasets is needed for Hub and parquet sources only (prepare says so then)
    from kldtui.cli.commands.verify import ConsoleProgress

    sources = load_sources(args.sources) if args.sources else list(DEFAULT_SOURCES)
    with ConsoleProgress() as emit:
        result = prepare_suite(args.output_dir, args.tokenizer, sources=sources,
                               context_length=args.context_length,
                               trust_remote_code=args.trust_remote_code, kind=args.kind, emit=emit)
    suite = result.suite
    counts = ", ".join(f"{d} {n}" for d, n in suite.domain_counts.items())
    print(f"suite ready: {result.output_dir} ({suite.window_count} windows of {suite.context_length} "
          f"tokens: {counts}; suite hash {suite.suite_token_hash_sha256})")
    return 0
