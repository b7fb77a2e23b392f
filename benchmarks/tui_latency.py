"""Key-press latency of the dashboard while the engine compares, and the viewer's start-up time.

Runs the real demo pipeline (embedded CPU server, capture, finalize and compare in worker
threads) inside the dashboard, headless, and while the compare stage is running presses keys
(switching tabs) and times each press from posting the key until the app has handled it and gone
idle (an upper bound of what a user feels). Also measures an event-loop lag probe (how late a
10 ms timer fires). Then times ``kldtui view`` start-up in a fresh interpreter: from process start
to the first screen of a viewer with one report.

    .venv/bin/python benchmarks/tui_latency.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import cpu_summary, loadavg  # benchmarks/measure.py


def _summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return (f"n={len(ms)} median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, "
            f"max {ms[-1]:.1f} ms")


async def dashboard_latency(workdir: Path) -> dict[str, list[float]]:
    from kldtui.tui.app import create_app
    from kldtui.tui.screens.dashboard import DashboardScreen
    from kldtui.workflow.demo import prepare_demo

    profile = prepare_demo(workdir)
    app = create_app(profile=profile, config_dir=workdir / "cfg", theme="kldtui-dark", remember_theme=False)
    presses: list[float] = []
    idles: list[float] = []
    lags: list[float] = []
    handled: list[float] = []
    main = app.main
    assert isinstance(main, DashboardScreen)  # a profile opens the dashboard
    original = main.action_show_tab

    def timed_show_tab(tab: str) -> None:  # the key's action: stamp when the app handles it
        handled.append(time.perf_counter())
        original(tab)

    main.action_show_tab = timed_show_tab  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 600
        keys = ["l", "e", "b", "e"]
        i = 0
        while loop.time() < deadline:
            stage = main.model.stages["compare"].state
            busy = any(w.group == "engine" and not w.is_finished for w in app.workers)
            if not busy and stage != "running":
                break
            if stage == "running":
                before = len(handled)
                t0 = time.perf_counter()
                app.simulate_key(keys[i % len(keys)])  # what the terminal driver does for a key
                while len(handled) == before and time.perf_counter() - t0 < 10:
                    await asyncio.sleep(0.001)
                presses.append(handled[before] - t0)
                i += 1
                t1 = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - t1 - 0.01)
                if i % 10 == 0:  # and now and then the full round trip, until the app is idle again
                    t2 = time.perf_counter()
                    await pilot.press(keys[i % len(keys)])
                    idles.append(time.perf_counter() - t2)
                await asyncio.sleep(0.04)
            else:
                await asyncio.sleep(0.05)
        assert main.model.stages["compare"].state == "done", main.model.stages["compare"]
        await pilot.press("q")
    return {"press": presses, "idle": idles, "lag": lags}


VIEWER_CHILD = """
import sys, time, asyncio
t0 = float(sys.argv[1])
from kldtui.tui.app import create_app
t_import = time.time() - t0
app = create_app(reports=[sys.argv[2]], theme="kldtui-dark", remember_theme=False)
async def main():
    async with app.run_test(size=(100, 30)) as pilot:
        t_screen = time.time() - t0
        deadline = time.time() + 60
        while app.main.current_result is None:
            if time.time() > deadline:
                raise SystemExit(f"{sys.argv[2]}: no report on screen after 60 s")
            await asyncio.sleep(0.005)
        t_report = time.time() - t0
    print(t_import, t_screen, t_report)
asyncio.run(main())
"""


def viewer_startup(report: Path, runs: int = 5) -> dict[str, list[float]]:
    """Seconds from process start: imports done, first screen, report on screen."""
    out: dict[str, list[float]] = {"import": [], "screen": [], "report": []}
    for _ in range(runs):
        t0 = time.time()
        res = subprocess.run([sys.executable, "-c", VIEWER_CHILD, repr(t0), str(report)],
                             capture_output=True, text=True, check=True)
        a, b, c = (float(x) for x in res.stdout.split())
        out["import"].append(a)
        out["screen"].append(b)
        out["report"].append(c)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    print(f"CPU: {cpu_summary()}")
    print(f"load average before: {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp) / "demo"
        result = asyncio.run(dashboard_latency(workdir))
        print(f"key press during compare, key posted -> its action runs: {_summary(result['press'])}")
        print(f"key press during compare, post -> app idle again: {_summary(result['idle'])}")
        print(f"event-loop lag (10 ms timer overshoot) during compare: {_summary(result['lag'])}")
        reports = sorted(workdir.glob("comparison-*.json"))  # the demo campaign's, one per candidate
        if not reports:
            raise SystemExit(f"{workdir}: the demo left no comparison-*.json report to view")
        startup = viewer_startup(reports[0])
        for what, values in startup.items():
            print(f"kldtui view, process start -> {what}: {_summary(values)}")
        py = subprocess.run([sys.executable, "-X", "importtime", "-c", "import textual.app"],
                            capture_output=True, text=True)
        line = py.stderr.strip().splitlines()[-1]
        print(f"for scale, importing textual.app alone: {int(line.split('|')[1]) / 1000:.0f} ms")
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
