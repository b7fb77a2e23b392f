"""``kldtui convert SUITE_DIR --to llama-cpp FILE``: a suite's reference as the file
``llama-perplexity --kl-divergence-base`` writes (kldtui.stages.convert.export_llama_cpp)."""

from __future__ import annotations

import argparse

from kldtui.cli.convert_targets.base import ConvertTarget, TargetFlag

NAME = "llama-cpp"
FLAGS = (
    TargetFlag("--reference-dir", "the reference logits folder (default: SUITE_DIR/ref)"),
    TargetFlag("--start-window", "first window (a hidden-state suite: context)", default=0, type=int),
    TargetFlag("--stop-window", "stop before this window (context)", type=int),
)


def _convert(args: argparse.Namespace) -> int:
    from kldtui.cli.commands.verify import ConsoleProgress
    from kldtui.stages.convert import export_llama_cpp

    with ConsoleProgress() as progress:  # windows written, on stderr
        result = export_llama_cpp(args.source, args.destination, reference_dir=args.reference_dir,
                                  start_window=args.start_window, stop_window=args.stop_window,
                                  force=args.force, emit=progress)
    for line in result.lines():
        print(line)
    # OMP_WAIT_POLICY=PASSIVE: llama-perplexity's last lines (its Mean KLD) are often lost at
    # exit when ggml's spinning OpenMP threads starve its logging thread (docs/FORMATS.md)
    print(f"next: OMP_WAIT_POLICY=PASSIVE llama-perplexity -m MODEL.gguf --kl-divergence-base "
          f"{result.path} --kl-divergence -c {result.n_ctx} -b {result.n_ctx} -ctk f32 -ctv f32 -fa off")
    return 0


TARGET = ConvertTarget(NAME, "a suite's reference to llama.cpp's KL-divergence base file",
                       "write SOURCE's reference as a base file", FLAGS, _convert)
