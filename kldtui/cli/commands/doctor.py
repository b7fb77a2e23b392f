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


def run(args: argparse.Namespace) -> int:
    from kldtui.workflow.doctor import collect, format_checks

    checks = collect(python=args.python, capture_dir=args.capture_dir, import_vllm=not args.quick)
    if args.json:
        print(json.dumps([{"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail}
                          for c in checks], indent=2))
    else:
        print(format_checks(checks))
    return 0 if all(c.ok or not c.required for c in checks) else 1
