"""The whole pipeline on a full-vocabulary suite through the embedded server.

Builds a suite of ``--windows`` windows x ``--tokens`` tokens (default 4 x 2048, vocabulary
163,840: the Kimi K3 width), then

1. ``reference``: captures and finalizes the reference with the embedded server (unperturbed),
   verifies it (hash once: finalize's hashes are reused);
2. ``candidate``: ``Pipeline.run_all`` with a perturbed candidate: capture, and per window
   finalize + compare in a second thread while the next window is captured.

Prints per-stage wall time, how much of finalize + compare stayed hidden behind capture (their
summed time minus the tail after the last window was captured), compare GB/s, peak RSS of this
process and of the server, peak disk of the work folder (sampled every 0.2 s), and finalize's
time against a plain read + write + fsync copy of the same bytes, with the CPU and the load average
before and after. Removes everything it wrote
unless ``--keep``.

    .venv/bin/python benchmarks/pipeline_bench.py [--windows 4] [--tokens 2048] [--vocab 163840]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from measure import cpu_summary, disk_bytes, loadavg, rss_kib  # benchmarks/measure.py

from kldtui.events import Event, StageFinished, WindowState
from kldtui.formats.suite_writer import write_suite
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import profile_from_dict

GB = 1e9


class Sampler(threading.Thread):
    """Peak disk of the work folder and peak RSS of the server processes."""

    def __init__(self, root: Path, pipeline_ref: list[Pipeline]) -> None:
        super().__init__(daemon=True)
        self.root, self.pipeline_ref = root, pipeline_ref
        self.peak_disk = 0
        self.peak_server_rss_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak_disk = max(self.peak_disk, disk_bytes(self.root))
            for p in self.pipeline_ref:
                for candidate in (p, getattr(p, "_sub", None)):
                    server = getattr(candidate, "server", None)
                    proc = getattr(server, "proc", None) or getattr(server, "_proc", None)
                    pid = getattr(proc, "pid", None)
                    if pid:
                        self.peak_server_rss_kib = max(self.peak_server_rss_kib, rss_kib(pid))


def plain_copy_seconds(files: list[Path], dest: Path) -> float:
    """Read + write + fsync of the same bytes in 16 MiB blocks (what finalize must at least do)."""
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb") as src, open(dest / f.name, "wb") as out:
            while block := src.read(16 << 20):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
    elapsed = time.perf_counter() - t0
    shutil.rmtree(dest)
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/kldtui-pipeline-bench")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()

    root = Path(args.workdir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    domains = ("prose", "code", "instruction")
    write_suite(root / "suite", [(domains[i % 3], rng.integers(3, args.vocab, args.tokens).tolist())
                                 for i in range(args.windows)])
    profile = profile_from_dict({
        "reference": {"local_dir": str(root / "suite"), "capture": "embedded"},
        "candidate": {"kind": "embedded", "served_model_name": "bench", "model_seed": 7,
                      "vocab_size": args.vocab, "perturb": 0.1, "port": 0, "startup_timeout": 300.0,
                      "request_timeout": 1800.0, "max_num_batched_tokens": 256},
        "run": {"workdir": str(root / "work"), "run_name": "candidate"},
        "compare": {"bootstrap_samples": 2000}}, base_dir=root)

    marks: list[tuple[float, Event]] = []
    lock = threading.Lock()

    def emit(event: Event) -> None:
        with lock:
            marks.append((time.perf_counter(), event))

    pipelines: list[Pipeline] = []
    sampler = Sampler(root, pipelines)
    sampler.start()
    load_before = loadavg()
    try:
        t0 = time.perf_counter()
        ref = Pipeline(profile, emit)
        pipelines.append(ref)
        ref.reference()
        t_ref = time.perf_counter() - t0
        marks.clear()
        t1 = time.perf_counter()
        cand = Pipeline(profile, emit)
        pipelines.append(cand)
        report_path = cand.run_all().report_path
        assert report_path is not None, "the pipeline wrote no report"
        t_cand = time.perf_counter() - t1
    finally:
        sampler.stop.set()
        sampler.join()

    # per-window stage durations from the window events
    started: dict[tuple[str, int], float] = {}
    spans: dict[str, list[float]] = {"capture": [], "finalize": [], "compare": []}
    begin = {"capturing": "capture", "finalizing": "finalize", "comparing": "compare"}
    end = {"captured": "capture", "finalized": "finalize", "compared": "compare"}
    last_captured = t1
    server_ready = t1
    for t, e in marks:
        if isinstance(e, WindowState):
            if e.state in begin:
                started[(begin[e.state], e.window_index)] = t
            elif e.state in end and (end[e.state], e.window_index) in started:
                spans[end[e.state]].append(t - started.pop((end[e.state], e.window_index)))
                if e.state == "captured":
                    last_captured = max(last_captured, t)
        if isinstance(e, StageFinished) and e.stage == "server":
            server_ready = t
    t_end = t1 + t_cand
    tail = t_end - last_captured
    behind = sum(spans["finalize"]) + sum(spans["compare"])
    hidden = max(0.0, behind - tail)
    compare_docs = [json.loads(p.read_text())["result"] for p in (root / "work" / "compare").glob("*.json")]
    compared_bytes = sum(int(d["bytes_compared"]) for d in compare_docs)
    compare_s = sum(float(d["elapsed_seconds"]) for d in compare_docs)
    cand_files = sorted((root / "work" / "candidate").glob("logits_*.safetensors"))
    cand_bytes = sum(f.stat().st_size for f in cand_files)
    copy_s = plain_copy_seconds(cand_files, root / "copy")
    report: dict[str, Any] = json.loads(report_path.read_text())
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"pipeline_bench: {args.windows} windows x {args.tokens} tokens x vocab {args.vocab} "
          f"({cand_bytes / GB:.2f} GB per side)")
    print(f"  CPU: {cpu_summary()}")
    print(f"  load average (1, 5, 15 min) before: {load_before}, after: {loadavg()}")
    print(f"  reference (embedded capture + finalize + verify): {t_ref:.1f} s")
    print(f"  candidate run_all: {t_cand:.1f} s (server ready after {server_ready - t1:.1f} s)")
    print(f"    capture   {sum(spans['capture']):7.1f} s over {len(spans['capture'])} windows")
    print(f"    finalize  {sum(spans['finalize']):7.1f} s   compare {sum(spans['compare']):.1f} s; "
          f"tail after the last capture {tail:.1f} s: {hidden:.1f} s of {behind:.1f} s hidden "
          f"({100 * hidden / behind if behind else 0:.0f} %)")
    print(f"  compare: {compared_bytes / compare_s / GB if compare_s else 0:.2f} GB/s while overlapping "
          f"capture ({compared_bytes / GB:.2f} GB in {compare_s:.1f} s)")
    print(f"  finalize vs a plain read+write+fsync copy of the same bytes: {sum(spans['finalize']):.1f} s "
          f"vs {copy_s:.1f} s ({sum(spans['finalize']) / copy_s if copy_s else 0:.2f}x)")
    print(f"  peak RSS: kldtui {peak_rss:.0f} MiB, server {sampler.peak_server_rss_kib / 1024:.0f} MiB")
    print(f"  peak disk: {sampler.peak_disk / GB:.2f} GB ({sampler.peak_disk / cand_bytes:.2f}x one side's "
          f"finalized logits, reference included)")
    left = list((root / "work" / "capture").rglob("logits.rows-*"))
    kl = report.get("kl_reference_to_candidate", {}).get("mean")
    print(f"  chunks left after the run: {len(left)}; mean KL {kl}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
