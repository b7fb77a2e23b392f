"""What the import contracts (pyproject [tool.importlinter]) promise, checked by running it: the
compare engine works where Textual, vLLM and torch cannot be imported, and the capture hook that
vLLM loads into its processes brings in no front end, workflow or stage code.

Import-linter sees every import, including those inside functions, so it cannot tell "never
imports torch" from "imports torch only when a torch backend is chosen"; these tests can."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import EXAMPLE_SUITE, REPO

# A child Python where the named top-level packages cannot be imported (as on a host without them).
_BLOCKING = r'''
import json, sys
BLOCKED = set(sys.argv[1].split(","))
for name in BLOCKED:  # import raises ModuleNotFoundError, importlib.util.find_spec says None
    sys.modules[name] = None
'''

def _run(blocked: str, code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCKING + code, blocked], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO)})


def test_compare_runs_without_textual_vllm_or_torch(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code = f'''
from kldtui.cli.main import main
code = main(["compare", "--suite-manifest", {str(EXAMPLE_SUITE / "suite-manifest.json")!r},
             "--reference-dir", {str(EXAMPLE_SUITE / "ref")!r}, "--candidate-dir",
             {str(EXAMPLE_SUITE / "candidate")!r}, "--output", {str(out)!r}, "--backend", "auto"])
print(json.dumps({{"code": code, "loaded": sorted(m for m, v in sys.modules.items()
                                                 if v is not None and m.split(".")[0] in BLOCKED)}}))
'''
    proc = _run("textual,vllm,torch", code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}, proc.stderr[-3000:]
    # the same figures as a compare where all three are importable
    from kldtui.cli.main import main

    here = tmp_path / "here.json"
    assert main(["compare", "--suite-manifest", str(EXAMPLE_SUITE / "suite-manifest.json"), "--reference-dir",
                 str(EXAMPLE_SUITE / "ref"), "--candidate-dir", str(EXAMPLE_SUITE / "candidate"),
                 "--output", str(here), "--backend", "auto"]) == 0
    without, with_all = (json.loads(p.read_text(encoding="utf-8")) for p in (out, here))
    assert without["windows"] == with_all["windows"] == 4
    assert without["kl_reference_to_candidate"] == with_all["kl_reference_to_candidate"]


def test_the_hook_brings_in_no_front_end_workflow_or_stage(tmp_path: Path) -> None:
    code = '''
import kldtui.hook.vllm_plugin
kldtui.hook.vllm_plugin.register()  # capture off (no VLLM_KLD_CAPTURE_DIR): does nothing
above = ("kldtui.cli", "kldtui.tui", "kldtui.workflow", "kldtui.stages", "kldtui.decide",
         "kldtui.servers", "kldtui.embedded")
print(json.dumps(sorted(m for m, v in sys.modules.items()
                        if v is not None and (m.startswith(above) or m.split(".")[0] in BLOCKED))))
'''
    proc = _run("textual,vllm,torch,httpx,huggingface_hub,rich", code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
