"""``kldtui capture``: capture a window range from a running server (the original script's flags).

The server is already running (``kldtui serve`` in another shell, or a vLLM started elsewhere:
attach mode). Its capture folder (``VLLM_KLD_CAPTURE_DIR`` of the server) must be reachable from
this host as ``--server-capture-dir``; request folders are moved from there to
``--capture-dir/--run-name/window-NNN-DOMAIN-chunks`` and recorded in
``--capture-dir/capture-RUN.json``. Re-running resumes.
"""

from __future__ import annotations

import argparse

from kldtui import capture_modes
from kldtui.cli.output import OutputOptions, add_output_arguments

HELP = ("capture a range of windows (a hidden-state suite: contexts) from a running server: their prompt "
        "logits, or with --mode their scores or hidden states (resumable)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite-dir", required=True, help="suite folder (suite-manifest.json, tokens/)")
    parser.add_argument("--capture-dir", required=True,
                        help="where the run folder and capture-RUN.json go")
    parser.add_argument("--run-name", required=True, help="name of this capture run")
    parser.add_argument("--expected-vocab", type=int, default=None,
                        help="vocabulary every chunk must have (default: the first chunk's)")
    parser.add_argument("--start-window", type=int, default=0, metavar="N",
                        help="first window (a hidden-state suite: context) of the range (default 0)")
    parser.add_argument("--stop-window", type=int, default=None, metavar="N",
                        help="window (context) after the last one: the range is [start, stop) "
                             "(default: all)")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server's URL")
    parser.add_argument("--served-model-name", default="Kimi-K3",
                        help="the model name the server serves, as in its /v1/models (default: %(default)s)")
    parser.add_argument("--server-capture-dir", default=None,
                        help="the server's VLLM_KLD_CAPTURE_DIR as seen from this host "
                        "(default: $VLLM_KLD_CAPTURE_DIR)")
    parser.add_argument("--api-key-env", default=None,
                        help="name of the environment variable holding the server's API key")
    parser.add_argument("--request-timeout", type=float, default=600.0,
                        help="seconds to wait for one window's (context's) answer")
    capture_modes.add_mode_argument(parser)
    parser.add_argument("--replay-check", type=int, default=None, metavar="N",
                        help="hidden mode: capture the live logits of N contexts beside their hidden states "
                        "(the suite's sentinels first), so finalize can check the replay against them "
                        "(default 4; 0: none)")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kldtui import bounds, settings
    from kldtui.cli.commands.run import run_batch_job
    from kldtui.errors import BadInput
    from kldtui.events import Cancel, EventSink
    from kldtui.formats.suite import load_suite
    from kldtui.stages.capture import CaptureServer, changed_server, run_capture
    from kldtui.stages.serve import check_attached
    from kldtui.workspace import Workspace

    # refuses a run name such as '..' or 'a/b' before anything else
    workspace = Workspace.for_capture(args.suite_dir, args.capture_dir, args.run_name)
    bounds.timeout(args.request_timeout, "--request-timeout")
    bounds.server_url(args.base_url, "--base-url")
    server_dir = args.server_capture_dir or settings.CAPTURE_DIR.get()
    if not server_dir:
        raise BadInput(f"--server-capture-dir is not set and ${settings.CAPTURE_DIR.name} is empty; give the "
                       "folder the server writes its chunks to")
    if not Path(server_dir).is_dir():
        raise BadInput(f"{server_dir}: the server capture folder does not exist here; attach mode "
                       "needs the server's VLLM_KLD_CAPTURE_DIR reachable from this host")
    api_key = None
    if args.api_key_env:
        api_key = settings.named_variable(args.api_key_env)
        if not api_key:
            raise BadInput(f"--api-key-env {args.api_key_env}: that environment variable is empty")
    suite = load_suite(args.suite_dir)
    suite.check_suite_hash()
    windows = suite.select(args.start_window, args.stop_window)
    if args.replay_check is not None and not args.mode.saves_live_sample:
        raise BadInput(f"--replay-check: {args.mode.label} saves no live logits sample; it is for "
                       "hidden mode")
    if args.replay_check is not None and args.replay_check < 0:
        raise BadInput(f"--replay-check {args.replay_check}: give a number of contexts >= 0")
    live = args.mode.live_sample(suite, windows, args.replay_check)
    # windows recorded in another capture mode are refused before the server is reached (the capture
    # stage checks again once it holds the folder)
    if (other_mode := changed_server(workspace, None, args.mode, windows=suite.windows)) is not None:
        raise BadInput(other_mode)

    def job(emit: EventSink, cancel: Cancel) -> object:
        url = check_attached(args.base_url, args.served_model_name, api_key=api_key, emit=emit)
        server = CaptureServer(url, args.served_model_name, Path(server_dir), api_key=api_key,
                               request_timeout=args.request_timeout, mode=args.mode, live_windows=live)
        return run_capture(workspace, emit, cancel, suite=suite, windows=windows, server=server,
                           expected_vocab=args.expected_vocab)

    from kldtui.folder_lock import hold

    with hold([workspace.captures], what="--capture-dir"):  # one capture per capture folder
        return run_batch_job(job, OutputOptions.from_args(args))
