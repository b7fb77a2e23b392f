"""``python -m kldtui.embedded``: start the embedded OpenAI-compatible server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kldtui import capture_modes, settings
from kldtui.errors import BadInput


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kldtui.embedded",
                                description="kldtui's embedded OpenAI-compatible server: a tiny "
                                "deterministic model on the CPU that captures prompt logits like "
                                "the vLLM hook.")
    p.add_argument("--model", default="kldtui-embedded", help="model name shown as root in /v1/models")
    p.add_argument("--model-seed", type=int, default=0, help="seed of the model's weights")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--perturb", type=float, default=0.0,
                   help="quantization-like weight rounding step, relative to each matrix's std "
                   "(0: the reference; 0.1 gives a mean KL of about 0.03)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--write-lm-head", type=Path, default=None, metavar="FOLDER",
                   help="write the model's LM head (BF16, the published lm-head/ layout) into the new "
                   "folder FOLDER and exit, instead of serving: the built-in model has no checkpoint "
                   "for kldtui export-head")
    add_server_arguments(p)
    return p


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every model of this server takes: address, naming, chunking, capture, key."""
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed in the log)")
    p.add_argument("--served-model-name", default="kldtui-embedded")
    p.add_argument("--max-num-batched-tokens", type=int, default=256)
    p.add_argument("--runtime-noise", type=float, default=0.0,
                   help="run-to-run noise: Gaussian noise of this standard deviation added to every "
                   "logit, drawn from --runtime-seed and the prompt (0: bit-exact); in hidden mode, "
                   "added to the final hidden states instead, sized to move each logit as much")
    p.add_argument("--runtime-seed", type=int, default=0, help="which run (the noise's seed)")
    p.add_argument("--max-num-seqs", type=int, default=1)
    p.add_argument("--capture-dir", type=Path, default=None,
                   help=f"where prompt-logit chunks go (default: "
                   f"${settings.CAPTURE_DIR.name}; unset = off)")
    p.add_argument("--capture-mode", choices=capture_modes.names(), default=None,
                   help="; ".join(f"{m.name}: {m.summary}" for m in capture_modes.modes())
                   + f" (default: ${settings.CAPTURE_MODE.name}, else {capture_modes.DEFAULT.name})")
    for mode in capture_modes.modes():
        mode.add_server_arguments(p)
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (like vLLM)")
    # Accepted for command-line compatibility with vLLM; the embedded model has no prefix cache.
    p.add_argument("--no-enable-prefix-caching", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--enable-prefix-caching", action="store_true", help=argparse.SUPPRESS)


def server_config(args: argparse.Namespace, prog: str, **model: Any) -> Any:
    """The server's config from :func:`add_server_arguments`' flags and the environment, with the
    model's own fields (``model``, ``vocab_size``, ``max_model_len``...); an int (the exit status,
    after one line on stderr) when a flag or a variable is wrong."""
    from kldtui.embedded.server import Faults, ServerConfig

    if args.max_num_seqs != 1:
        print(f"{prog}: only --max-num-seqs 1 is supported", file=sys.stderr)
        return 2
    if args.runtime_noise < 0 or not args.runtime_noise < float("inf") or args.runtime_seed < 0:
        print(f"{prog}: --runtime-noise must be a finite number >= 0 and --runtime-seed >= 0",
              file=sys.stderr)
        return 2
    if args.max_num_batched_tokens < 1:
        print(f"{prog}: --max-num-batched-tokens must be >= 1", file=sys.stderr)
        return 2
    # the capture mode reads its settings as in a vLLM server, from the environment; flags win
    flags = settings.CAPTURE_MODE.entry(args.capture_mode) if args.capture_mode else {}
    for mode in capture_modes.modes():
        flags.update(mode.server_env_from_args(args))
    env = settings.child_environment(flags)
    try:
        settings.check_environment(env, settings.READ_BY_SERVER)
        capture = args.capture_dir or settings.CAPTURE_DIR.get()
        faults = Faults.parse(settings.EMBEDDED_FAULT.get())
        capture_mode = capture_modes.server_mode(env)
    except (BadInput, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if capture is not None:
        capture.mkdir(parents=True, exist_ok=True)
    return ServerConfig(
        served_model_name=args.served_model_name, runtime_noise=args.runtime_noise,
        runtime_seed=args.runtime_seed,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        capture_dir=capture, api_key=args.api_key, faults=faults,
        mode=capture_mode, settings=env, **model)


def run_server(args: argparse.Namespace, prog: str, config: Any, model: Any = None,
               what: str | None = None) -> int:
    """Serve until stopped; 1 when the address cannot be listened on."""
    from kldtui.embedded.server import serve

    try:
        serve(args.host, args.port, config, model, what)
    except OSError as exc:
        print(f"ERROR {prog}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def write_head(args: argparse.Namespace, prog: str) -> int:
    """``--write-lm-head``: the model's head into a new folder; 2 after one line when it cannot be."""
    from kldtui.embedded.model import TinyModel

    folder = args.write_lm_head
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        print(f"{prog}: {folder}: exists and is not an empty folder; write the head into a new folder "
              "(a head is never overwritten)", file=sys.stderr)
        return 2
    try:
        TinyModel(args.vocab_size, seed=args.model_seed, perturb=args.perturb).write_head(folder)
    except (BadInput, OSError) as exc:
        print(f"{prog}: {folder}: the LM head cannot be written ({exc})", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = "kldtui.embedded"
    if args.vocab_size < 2:
        print(f"{prog}: --vocab-size must be >= 2", file=sys.stderr)
        return 2
    if args.write_lm_head is not None:
        return write_head(args, prog)
    config = server_config(args, prog, model=args.model, model_seed=args.model_seed,
                           vocab_size=args.vocab_size, perturb=args.perturb,
                           max_model_len=args.max_model_len)
    if isinstance(config, int):
        return config
    return run_server(args, prog, config)


if __name__ == "__main__":
    raise SystemExit(main())
