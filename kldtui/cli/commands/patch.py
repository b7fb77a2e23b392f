"""``kldtui patch --vllm-src DIR [--check]``: check, then apply, the capture patch."""

from __future__ import annotations

import argparse

HELP = "check and apply the capture patch (patches/vllm-kld-capture.patch) to a vLLM source checkout"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vllm-src", required=True, metavar="DIR",
                        help="root of the vLLM source checkout (the folder that holds vllm/)")
    parser.add_argument("--check", action="store_true",
                        help="only check (dry run): exit 0 if it applies or is applied, 1 if not")
    parser.add_argument("--print", dest="print_patch", action="store_true",
                        help="print the patch and exit")


def run(args: argparse.Namespace) -> int:
    from kldtui.hook.patching import apply_patch, patch_file, patch_status

    if args.print_patch:
        print(patch_file().read_text(encoding="utf-8"), end="")
        return 0
    if args.check:
        status = patch_status(args.vllm_src)
        print(f"{status.state}: {status.detail}")
        return 0 if status.state in ("applies", "applied") else 1
    status = apply_patch(args.vllm_src)
    print(f"{status.state}: {status.detail}")
    return 0
