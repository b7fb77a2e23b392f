"""``kldtui doctor``: vLLM version, capture hook (plugin or patch) and runner, disk, GPU."""

from __future__ import annotations

import argparse
import json

HELP = "check the host: vLLM and its version, the capture hook (plugin or patch), disk, GPU"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--python", default=None,
                        help="the Python that runs vLLM (default: this one), e.g. VENV/bin/python")
    parser.add_argument("--capture-dir", default=None,
                        help="where chunks will be written (default: $VLLM_KLD_CAPTURE_DIR or .)")
    parser.add_argument("--quick", action="store_true",
                        help="do not import vLLM (faster; skips checking the hooked methods)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    smoke = parser.add_argument_group("one-window smoke test through a live server (--smoke)")
    smoke.add_argument("--smoke", action="store_true",
                       help="send one window to the running server at --url and check its captured "
                            "chunks against the prompt logprobs it returns (run first on a GPU host)")
    smoke.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default: %(default)s)")
    smoke.add_argument("--served-model-name", default=None,
                       help="the model name the server serves (default: the first of /v1/models)")
    smoke.add_argument("--tokens", type=int, default=2048, help="window length (default: %(default)s)")
    smoke.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    smoke.add_argument("--keep", action="store_true", help="keep the smoke window's chunk folder")
    smoke.add_argument("--suite", default=None,
                       help="--mode score: the suite folder as seen from here (the request is one of its "
                            "windows, which the server scores against its reference)")
    smoke.add_argument("--window", type=int, default=0,
                       help="--mode score: which window of --suite (default: %(default)s)")
    from kldtui import capture_modes

    capture_modes.add_mode_argument(smoke)  # what the server saves: how its smoke window is checked


def run(args: argparse.Namespace) -> int:
    from kldtui.workflow.doctor import collect, format_checks

    if args.smoke:
        return _smoke(args)

    checks = collect(python=args.python, capture_dir=args.capture_dir, import_vllm=not args.quick)
    if args.json:
        print(json.dumps([{"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail}
                          for c in checks], indent=2))
    else:
        print(format_checks(checks))
    return 0 if all(c.ok or not c.required for c in checks) else 1


def _smoke(args: argparse.Namespace) -> int:
    from kldtui import settings
    from kldtui.errors import BadInput
    from kldtui.workflow.smoke import run_smoke, served_model

    capture_dir = args.capture_dir or settings.CAPTURE_DIR.get()
    if not capture_dir:
        raise BadInput(f"doctor --smoke: --capture-dir is missing: the folder the server's "
                       f"{settings.CAPTURE_DIR.name} points at, as seen from here")
    if args.tokens < 2:
        raise BadInput(f"doctor --smoke: --tokens {args.tokens} must be at least 2")
    api_key = settings.named_variable(args.api_key_env) if args.api_key_env else None
    name = args.served_model_name or served_model(args.url, api_key)
    suite = None
    if args.suite:
        from kldtui.formats.suite import load_suite

        suite = load_suite(args.suite)
    result = run_smoke(args.url, name, capture_dir, tokens=args.tokens, api_key=api_key, keep=args.keep,
                       mode=args.mode, suite=suite, window_index=args.window)
    for line in result.lines:
        print(("[ok  ] " if result.ok else "[FAIL] ") + line)
    return 0 if result.ok else 1
