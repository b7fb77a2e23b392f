"""The compiled kernel: same figures as the NumPy kernel, a per-user build cache, and a silent fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kldtui.errors import BadInput
from kldtui.metrics import ckernel
from kldtui.metrics.kernels import FIELDS, INT_FIELDS, NumpyRowKernel
from kldtui.stages import compare as cmp
from kldtui.stages.compare import backends
from tests.fixtures_compare import peaked_rows, perturb

needs_c = pytest.mark.skipif(not ckernel.available(), reason=f"no C kernel: {ckernel.why_not()}")


@needs_c
@pytest.mark.parametrize("vocab", [1, 7, 8, 1003, 4096 + 5])
def test_c_kernel_agrees_with_numpy_kernel(vocab: int) -> None:
    """Odd vocabularies exercise the scalar tail; ties exercise first-maximum argmax and the rank."""
    rng = np.random.default_rng(vocab)
    x = peaked_rows(rng, 6, vocab)
    y = perturb(rng, x, 0.01, 0.5)
    x[1] = np.round(x[1])  # many ties
    y[1] = np.round(y[1])
    x[2] = 0.0  # flat rows: every index ties for the maximum
    y[2] = 0.0
    x[3, -1] = x[3].max() + 1.0  # the maximum in the last element (the tail)
    y[4] = x[4]  # identical
    tok = rng.integers(0, vocab, size=6)
    for reverse in (False, True):
        want = NumpyRowKernel(vocab).block(x, y, tok, reverse)
        got = ckernel.CRowKernel(vocab).block(x, y, tok, reverse)
        for f in FIELDS:
            a, b = getattr(got, f), getattr(want, f)
            if a is None or b is None:
                assert a is None and b is None and not reverse
            elif f in INT_FIELDS:
                np.testing.assert_array_equal(a, b, err_msg=f)
            elif f.startswith(("logp", "entropy")):
                # the float32 path's normalisers: ~1e-7 relative, an absolute error in a log (an
                # entropy is the log-normaliser minus the mean logit: the same absolute error;
                # 1.5e-8 measured on a near-deterministic row of entropy 1.2e-3)
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, err_msg=f)
            else:
                # float32 exps (~1 ulp) in the fast path: divergences within 1e-6 relative
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-14, err_msg=f)
        assert got.kl[4] == 0.0 and got.js[4] == 0.0


@needs_c
def test_c_kernel_rejects_bad_shapes() -> None:
    k = ckernel.CRowKernel(16)
    x = np.zeros((2, 16), dtype=np.float32)
    with pytest.raises(ValueError):
        k.block(x, np.zeros((2, 15), dtype=np.float32), np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError):
        k.block(x, x, np.array([0, 16]))


def _load_in_subprocess(env: dict[str, str]) -> dict[str, object]:
    code = ("import json; from kldtui.metrics import ckernel as c; "
            "print(json.dumps({'ok': c.available(), 'why': c.why_not(), 'dir': str(c.cache_dir())}))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow  # compiles the kernel twice
@needs_c
def test_build_is_cached_per_user(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("KLDTUI_NO_C_KERNEL", None)
    first = _load_in_subprocess(env)
    assert first["ok"] and first["dir"] == str(tmp_path / "kldtui" / "fastkl")
    built = sorted((tmp_path / "kldtui" / "fastkl").iterdir())
    assert len(built) == 1 and built[0].suffix == ".so"  # no temporary left behind
    mtime = built[0].stat().st_mtime_ns
    assert _load_in_subprocess(env)["ok"]
    assert sorted((tmp_path / "kldtui" / "fastkl").iterdir()) == built
    assert built[0].stat().st_mtime_ns == mtime


def test_no_compiler_falls_back_silently(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PATH": str(tmp_path / "empty")}
    env.pop("CC", None)
    env.pop("KLDTUI_NO_C_KERNEL", None)
    got = _load_in_subprocess(env)
    assert not got["ok"] and "no C compiler" in str(got["why"])
    off = _load_in_subprocess({**os.environ, "XDG_CACHE_HOME": str(tmp_path), "KLDTUI_NO_C_KERNEL": "1"})
    assert not off["ok"] and "KLDTUI_NO_C_KERNEL" in str(off["why"])


def test_engine_backend_without_the_c_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckernel, "_state", {"lib": None, "why": "no C compiler found"})
    if not backends.cuda_present():
        assert backends.choose_backend("auto", server_signs=None).backend is backends.Backend.NUMPY
    with pytest.raises(BadInput, match="no C compiler"):
        backends.choose_backend("c", server_signs=None)
    assert backends.choose_backend("numpy", server_signs=None).backend is backends.Backend.NUMPY


@needs_c
def test_engine_uses_the_c_kernel_by_default() -> None:
    if not backends.cuda_present():
        assert backends.choose_backend("auto", server_signs=None).backend is backends.Backend.C
    assert backends.choose_backend("c", server_signs=None).backend is backends.Backend.C


def test_mmap_and_pread_reads_give_identical_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures_compare import make_suite

    suite, ref, cand, _ = make_suite(tmp_path / "s", windows=2, context=40, vocab=300)
    opts = cmp.CompareOptions(bootstrap_samples=50, reverse=True, row_block=7)
    inputs = cmp.prepare(suite, ref, cand, opts)
    got = {}
    for mode in ("mmap", "pread"):
        if mode == "pread":
            monkeypatch.setenv("KLDTUI_NO_MMAP", "1")
        with cmp.Engine(inputs.vocab_size, opts) as engine:
            got[mode] = [engine.compare_window(inputs, w) for w in inputs.windows]
    for a, b in zip(got["mmap"], got["pread"], strict=True):
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(a.rows, f), getattr(b.rows, f), err_msg=f)


def _compile_only(cc: str, flags: list[str], tmp_path: Path) -> None:
    out = tmp_path / "k.so"
    proc = subprocess.run([cc, *flags, "-fno-math-errno", "-Wall", "-Werror", "-shared", "-fPIC", "-o",
                           str(out), str(ckernel.SOURCE), "-lm"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0


@pytest.mark.slow  # a compiler run per width
@pytest.mark.parametrize("march", ["x86-64", "x86-64-v3", "x86-64-v4"])
def test_kernel_source_builds_for_every_x86_vector_width(march: str, tmp_path: Path) -> None:
    """SSE2 (2 lanes), AVX2 (4) and AVX-512 (8, with the table path) all compile warning-free."""
    cc = ckernel._compiler()
    if cc is None or os.uname().machine != "x86_64":
        pytest.skip("needs an x86-64 C compiler")
    _compile_only(cc, ["-O3", f"-march={march}"], tmp_path)


def test_kernel_source_builds_for_aarch64(tmp_path: Path) -> None:
    """NVIDIA Grace and other Arm hosts: the kernel is portable C (NEON through vector extensions).
    Uses a cross compiler here (Debian: apt-get install gcc-aarch64-linux-gnu), the native one on Arm."""
    import shutil

    cc = shutil.which("aarch64-linux-gnu-gcc") or (ckernel._compiler() if os.uname().machine == "aarch64"
                                                   else None)
    if cc is None:
        pytest.skip("no aarch64 compiler (apt-get install gcc-aarch64-linux-gnu)")
    _compile_only(cc, ["-O3", "-march=armv8-a"], tmp_path)
