"""``kldtui publish``: the card's figures come from the folder; upload over the loopback Hub."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from kldtui.cli.main import main
from tests.fixtures_publish import check_card_figures
from tests.hub_server import HubServer, make_dataset


def _repeat_noise(root: Path) -> dict[str, object]:
    doc = {"direction": "KL(reference || candidate)", "positions": 32, "windows": 1,
           "window_range": [0, 1], "kl_reference_to_candidate": {"mean": 0.0012345678},
           "js": {"mean": 0.00031}, "top1_agreement": 0.984375}
    (root / "repeat-noise-window000.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


@pytest.mark.parametrize(("top1", "said"), [
    (0.984375, "98.4375 %"), (1.0, "100 %"), (0.0000012345678, "0.000123457 %"), (1e-9, "1e-07 %")])
def test_the_cards_top1_agreement_keeps_its_digits_however_small(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], top1: float, said: str) -> None:
    """The card wrote the repeat's top-1 agreement to four fixed decimals: a tiny one read 0.0000%.
    It has six significant digits, as the text summary's figures (kldtui.text.precise_number)."""
    root = make_dataset(tmp_path / "ds", windows=2, context_length=17, vocab=50)
    doc = _repeat_noise(root)
    (root / "repeat-noise-window000.json").write_text(json.dumps(dict(doc, top1_agreement=top1)) + "\n")
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"- top-1 agreement = {said}\n" in out, out
    check_card_figures(out, root)  # the fixture reads the figure back from the card


def test_dry_run_prints_card_and_files_and_writes_nothing(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset(tmp_path / "ds", windows=5, context_length=17, vocab=50)
    _repeat_noise(root)
    before = sorted(p.name for p in root.rglob("*"))
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    out = capsys.readouterr().out
    check_card_figures(out, root)
    for heading in ("## Source model and runtime", "## Contents", "## Layout",
                    "## Capture a candidate and compare", "## Repeat noise"):
        assert heading in out
    assert "kldtui download me/tiny-kld --local-dir reference" in out
    assert "--expected-vocab 50" in out
    assert "ref/logits_000.safetensors ... ref/logits_004.safetensors" in out
    assert "files would be uploaded to dataset me/tiny-kld" in out
    for rel in ("suite-manifest.json", "ref/manifest.json", "ref/logits_004.safetensors",
                "tokens/window-004-instruction.json", "README.md", "repeat-noise-window000.json"):
        assert re.search(rf"\s{re.escape(rel)}$", out, re.M), rel
    assert not (root / "README.md").exists()
    assert sorted(p.name for p in root.rglob("*") if not p.name.startswith(".")) == [
        b for b in before if not b.startswith(".")]


def test_publish_refuses_a_broken_or_incomplete_folder(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A logits suite that does not verify is refused as a hidden-state suite is: exit 2, one line
    naming the file and what to do (tests/functional/test_publish_hidden.py has the other kind)."""
    root = make_dataset(tmp_path / "ds", windows=2)
    target = root / "ref" / "logits_001.safetensors"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kldtui: error")]
    assert len(errors) == 1, errors
    assert f"{target}: window 001: SHA-256" in errors[0] and "delete it and download it again" in errors[0]
    assert errors[0].endswith("; publish refuses a suite that does not verify")
    # two problems: the first named, the rest counted and where to see them
    (root / "tokens" / "window-000-prose.json").write_text("[1, 2]\n")
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"more problem: kldtui verify {root} lists them); publish refuses" in line, line
    bare = tmp_path / "bare"
    bare.mkdir()
    assert main(["publish", str(bare), "--repo-id", "me/x", "--dry-run"]) == 2
    assert main(["publish", str(root), "--repo-id", "no-slash", "--dry-run"]) == 2


def test_upload_over_loopback_then_resume_skips_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import huggingface_hub.constants as hub_constants

    root = make_dataset(tmp_path / "ds", windows=3, context_length=9, vocab=40)
    _repeat_noise(root)
    (root / ".kldtui-verified.json").write_text("{}")  # local state never goes up
    # The loopback server speaks the LFS protocol, not Xet storage.
    monkeypatch.setattr(hub_constants, "HF_HUB_DISABLE_XET", True)
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["publish", str(root), "--repo-id", "me/tiny-kld"]) == 0
        remote = hub.repo_folder("me/tiny-kld")
        local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                       if p.is_file() and not p.name.startswith("."))
        assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file()) == local
        for rel in local:
            assert hashlib.sha256((remote / rel).read_bytes()).digest() == \
                hashlib.sha256((root / rel).read_bytes()).digest(), rel
        check_card_figures((remote / "README.md").read_text(), root)
        assert len(hub.commits) == 1
        lfs_puts = hub.requests(method="PUT", origin="cdn")
        assert len(lfs_puts) == 3 and all(r.status == 200 for r in lfs_puts)
        # Run again: the repository exists (409 accepted), nothing changed, nothing is sent.
        assert main(["publish", str(root), "--repo-id", "me/tiny-kld"]) == 0
        assert len(hub.commits) == 1 and len(hub.requests(method="PUT", origin="cdn")) == 3
        # The card changes (a repeat capture was added): only README.md and the new file go up.
        doc = _repeat_noise(root)
        doc["top1_agreement"] = 0.5
        (root / "repeat-noise-window000.json").write_text(json.dumps(doc) + "\n")
        assert main(["publish", str(root), "--repo-id", "me/tiny-kld"]) == 0
        assert len(hub.commits) == 2
        assert hub.commits[-1]["paths"] == ["README.md", "repeat-noise-window000.json"]
        assert len(hub.requests(method="PUT", origin="cdn")) == 3
        check_card_figures((remote / "README.md").read_text(), root)
        assert "published" in capsys.readouterr().out


def test_a_full_hub_snapshot_verifies_and_names_its_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A full snapshot of a published logits suite (huggingface_hub's snapshot_download, what `hf
    download` gives) holds the card publish wrote: verify passes and says what the card is, as it
    does for a hidden-state suite; a file the manifests list still fails when it is changed."""
    import huggingface_hub.constants as hub_constants
    from huggingface_hub import snapshot_download

    root = make_dataset(tmp_path / "ds", windows=3, context_length=9, vocab=40)
    monkeypatch.setattr(hub_constants, "HF_HUB_DISABLE_XET", True)
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["publish", str(root), "--repo-id", "me/tiny-kld"]) == 0
        hub.add_dataset("me/tiny-kld", hub.repo_folder("me/tiny-kld"))
        snap = Path(snapshot_download("me/tiny-kld", repo_type="dataset", local_dir=tmp_path / "snap",
                                      endpoint=hub.endpoint))
    card = snap / "README.md"
    assert card.is_file()
    capsys.readouterr()
    assert main(["verify", str(snap)]) == 0
    out, err = capsys.readouterr()
    assert f"{card}: the dataset card the Hub shows; not part of the suite's data" in err
    assert out.startswith(f"dataset {snap}: OK")
    data = bytearray((snap / "ref" / "logits_002.safetensors").read_bytes())
    data[-1] ^= 0x01
    (snap / "ref" / "logits_002.safetensors").write_bytes(bytes(data))
    assert main(["verify", str(snap)]) == 1


def _plant_raw_secrets(root: Path) -> tuple[str, ...]:
    """A reference manifest written by another tool, its runtime holding raw secrets."""
    secrets = ("ghp_" + "Q" * 36, "pw-" + "z" * 10, "hf_" + "k" * 34, "opaque-auth-1234")
    path = root / "ref" / "manifest.json"
    doc = json.loads(path.read_text())
    doc["runtime"] = {"model": "/models/tiny", "env": {"GITHUB_PAT": secrets[0], "HF_AUTH": secrets[3],
                                                        "DATABASE_URL": f"postgres://u:{secrets[1]}@db/x"},
                      "argv": ["vllm", "serve", "/models/tiny", "--hf-token", secrets[2]],
                      "note": f"pulled with {secrets[2]}"}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return secrets


def test_publish_redacts_again_what_it_reads_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import huggingface_hub.constants as hub_constants

    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    secrets = _plant_raw_secrets(root)
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "GITHUB_PAT" in captured.out and "<redacted>" in captured.out
    assert not any(s in captured.out + captured.err for s in secrets)
    assert "ref/manifest.json" in captured.err and "secret" in captured.err  # said, and nothing changed
    assert secrets[0] in (root / "ref" / "manifest.json").read_text()
    monkeypatch.setattr(hub_constants, "HF_HUB_DISABLE_XET", True)
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert main(["publish", str(root), "--repo-id", "me/tiny-kld"]) == 0
        remote = hub.repo_folder("me/tiny-kld")
        for path in remote.rglob("*"):
            if path.is_file() and path.suffix in (".json", ".md"):
                assert not any(s in path.read_text() for s in secrets), path
        assert json.loads((remote / "ref" / "manifest.json").read_text())["runtime"]["env"]["GITHUB_PAT"] \
            == "<redacted>"
    assert main(["verify", str(root)]) == 0  # the local folder, redacted in place, still verifies


def test_publish_refuses_a_link_in_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The upload would follow a link out of the folder: refused, file or folder, naming it."""
    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    secret = tmp_path / "id_rsa"
    secret.write_text("not for the Hub\n")
    (root / "notes.txt").symlink_to(secret)
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    assert f"{root / 'notes.txt'}: a symbolic link" in capsys.readouterr().err
    (root / "notes.txt").unlink()
    (tmp_path / "more").mkdir()
    (root / "extra").symlink_to(tmp_path / "more")
    assert main(["publish", str(root), "--repo-id", "me/x", "--dry-run"]) == 2
    assert f"{root / 'extra'}: a symbolic link" in capsys.readouterr().err


def test_a_manifest_from_another_tool_is_text_in_the_card_and_quoted_in_its_commands(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the reference folder may come from another tool or the Hub: its served model name must not turn
    # the card's copy-paste command into two commands, nor become a link or an image in the card
    root = make_dataset(tmp_path / "ds", windows=5, context_length=17, vocab=50)
    manifest = root / "ref" / "manifest.json"
    doc = json.loads(manifest.read_text())
    served = "m; touch pwned [x](evil.invalid) <img src=x>"
    doc["runtime"] = {**(doc.get("runtime") or {}), "served_model_name": served, "note": "a `b` c"}
    manifest.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--served-model-name 'm; touch pwned [x](evil.invalid) <img src=x>' --base-url" in out
    assert "# m; touch pwned \\[x\\](evil.invalid) \\<img src=x> KLD reference logits" in out.splitlines()
    assert '`{"model": "m; touch pwned [x](evil.invalid) <img src=x>", "prompt": [ids]' in out
    assert "- note: ``a `b` c``" in out.splitlines()


def test_the_card_reads_the_repeat_of_the_window_the_reference_starts_at(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A reference of windows 2..4 keeps its repeat as repeat-noise-window002.json (the reference
    capture's name for it); the card read window 000's only and said no repeat was stored."""
    import numpy as np

    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.formats.suite import load_suite

    root = make_dataset(tmp_path / "ds", windows=5, context_length=17, vocab=50)
    suite = load_suite(root)
    for i in (0, 1):
        (root / "ref" / f"logits_{i:03d}.safetensors").unlink()
    rng = np.random.default_rng(1)
    written = [write_logits_array(root / "ref", w, rng.normal(size=(16, 50)).astype(np.float32), 17,
                                  force=True) for w in suite.windows[2:]]
    write_logits_manifest(root / "ref", suite, written, kind="reference", runtime={"model": "synthetic"},
                          window_range=(2, 5))
    doc = {"direction": "KL(reference || candidate)", "positions": 16, "windows": 1, "window_range": [2, 3],
           "kl_reference_to_candidate": {"mean": 0.0023456}, "js": {"mean": 0.0005},
           "top1_agreement": 0.9375}
    (root / "repeat-noise-window002.json").write_text(json.dumps(doc) + "\n")
    capsys.readouterr()
    assert main(["publish", str(root), "--repo-id", "me/tiny-kld", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "A second capture of window 002 with the same model and runtime, compared with the first " \
           "(repeat-noise-window002.json):" in out
    assert "- KL(first || repeat) = 0.0023456" in out and "No repeat capture is stored" not in out
    assert re.search(r"^repeat-noise-window002\.json$", out, re.M)  # in the card's layout


def test_card_names_the_model_and_server_kldtui_captured_the_reference_from(tmp_path: Path) -> None:
    """A reference kldtui captured ([reference] capture = "llama-cpp") is served as the first
    candidate's name plus "-reference": the card named the float16 model's logits after a Q4 quant,
    and said "captured with kind `reference`" (what the folder is) instead of the server's kind."""
    import dataclasses

    from kldtui.formats.suite import load_logits_manifest, load_suite
    from kldtui.stages.publish import render_card

    root = make_dataset(tmp_path / "ds", windows=2, context_length=9, vocab=40)
    ref = load_logits_manifest(root / "ref")
    ours = dataclasses.replace(ref, runtime={"kind": "llama-cpp", "model": "/models/m-f16.gguf",
                                             "served_model_name": "q4_k_m-reference",
                                             "server_start": "2026-12-03T10:00:00Z 0123456789abcdef"})
    card = render_card(root, "me/x", load_suite(root), ours)
    assert "# m-f16.gguf KLD reference logits" in card and "of m-f16.gguf for measuring" in card
    assert "The reference was captured by kldtui from a `llama-cpp` server on " in card
    assert "captured with kind" not in card
    # the runtime's keys, but not kldtui's own token of the server start
    assert "- kind: `llama-cpp`" in card and "- served_model_name: `q4_k_m-reference`" in card, card
    assert "server_start" not in card and "0123456789abcdef" not in card, card
    # a manifest another tool wrote (no server kind) keeps its own names
    theirs = dataclasses.replace(ref, runtime={"served_model_name": "kimi-k3", "model": "/x/ckpt"})
    card = render_card(root, "me/x", load_suite(root), theirs)
    assert "# kimi-k3 KLD reference logits" in card and "captured with kind `reference`" in card
