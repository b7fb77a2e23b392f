"""register()/install(): inactive without the variable, loud when vLLM's methods are missing or changed."""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
import types

import pytest

from kldtui.hook import vllm_plugin as vp


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    return mod


def _fake_vllm(monkeypatch, v1_cls=None, v2_cls=None, v1_marker=False, version="9.9.9"):
    """A stand-in vLLM package tree in sys.modules (only what install() looks at)."""
    mods = {"vllm": _module("vllm", __version__=version, __path__=[]),
            "vllm.v1": _module("vllm.v1", __path__=[]),
            "vllm.v1.worker": _module("vllm.v1.worker", __path__=[]),
            "vllm.v1.worker.gpu_model_runner": _module("vllm.v1.worker.gpu_model_runner")}
    if v1_cls is not None:
        mods["vllm.v1.worker.gpu_model_runner"].GPUModelRunner = v1_cls
    if v1_marker:
        mods["vllm.v1.worker.gpu_model_runner"].KLDTUI_CAPTURE_PATCHED = True
    if v2_cls is not None:
        for name in ("vllm.v1.worker.gpu", "vllm.v1.worker.gpu.sample"):
            mods[name] = _module(name, __path__=[])
        mods[vp.V2_MODULE] = _module(vp.V2_MODULE, PromptLogprobsWorker=v2_cls)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(vp, "_registered", {})


class GoodV1:
    def _get_prompt_logprobs_dict(self, hidden_states, num_scheduled_tokens):
        return {}


class GoodV2:
    def compute_prompt_logprobs(self, logits_fn, hidden_states, input_batch, all_token_ids,
                                num_computed_tokens, prompt_lens):
        return {}


def test_register_without_variable_does_nothing(monkeypatch):
    monkeypatch.delenv("VLLM_KLD_CAPTURE_DIR", raising=False)
    monkeypatch.setattr(vp, "_registered", {})
    vp.register()
    assert vp.installed() == {}


def test_register_does_not_import_vllm_when_inactive():
    code = ("import os, sys; os.environ.pop('VLLM_KLD_CAPTURE_DIR', None); "
            "from kldtui.hook import vllm_plugin as vp; vp.register(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_install_wraps_both_runners_once(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    v1, v2 = type("V1", (GoodV1,), {}), type("V2", (GoodV2,), {})
    v1._get_prompt_logprobs_dict = GoodV1._get_prompt_logprobs_dict
    v2.compute_prompt_logprobs = GoodV2.compute_prompt_logprobs
    _fake_vllm(monkeypatch, v1, v2)
    vp.register()
    assert vp.installed() == {"v1": "plugin", "v2": "plugin"}
    first = v1._get_prompt_logprobs_dict
    assert getattr(first, vp.WRAPPED_ATTR)
    assert getattr(v2.compute_prompt_logprobs, vp.WRAPPED_ATTR)
    monkeypatch.setattr(vp, "_registered", {})
    vp.install()  # a second load in the same process does not wrap twice
    assert v1._get_prompt_logprobs_dict is first


def test_missing_method_is_loud_with_the_version(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    _fake_vllm(monkeypatch, type("Bare", (), {}), version="0.99.1")
    with pytest.raises(vp.CaptureHookError, match=r"_get_prompt_logprobs_dict is missing in vLLM 0\.99\.1"):
        vp.register()


def test_changed_signature_is_loud(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))

    class Changed:
        def compute_prompt_logprobs(self, logits_fn, hidden_states, batch):
            return {}

    _fake_vllm(monkeypatch, type("V1", (GoodV1,), {}), Changed, version="0.40.0")
    with pytest.raises(vp.CaptureHookError, match=r"compute_prompt_logprobs has parameters .*vLLM 0\.40\.0"):
        vp.install()


def test_patched_vllm_is_left_to_the_patch(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_KLD_CAPTURE_DIR", str(tmp_path))
    v1 = type("V1", (GoodV1,), {})
    original = v1._get_prompt_logprobs_dict
    _fake_vllm(monkeypatch, v1, v1_marker=True)
    assert vp.install() == {"v1": "patch"}
    assert v1._get_prompt_logprobs_dict is original


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "kldtui_capture"]
    assert [e.value for e in eps] == ["kldtui.hook.vllm_plugin:register"]
    assert eps[0].load() is vp.register
