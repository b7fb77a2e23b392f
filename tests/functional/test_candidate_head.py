"""A hidden-mode candidate's own LM head (kldtui.stages.candidate_head): ``kldtui run`` exports it
from the candidate's safetensors checkpoint into ``candidate/lm-head/`` (the same file as ``kldtui
export-head`` writes) before finalize's replay check and compare need it; a candidate whose head
cannot be exported (a GGUF, a quantized head, a Hub model id not on disk) is refused in one line
naming the folder and the command, before any server starts, alone or in a campaign."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from kldtui.cli.main import main
from kldtui.embedded.model import TinyModel
from kldtui.errors import BadInput
from kldtui.events import Event, Notice, StageFinished, StageStarted
from kldtui.formats import fidelity as fid
from kldtui.servers.base import HubModel
from kldtui.text import human_bytes
from kldtui.workflow.campaign import Campaign
from kldtui.workflow.pipeline import Pipeline
from kldtui.workflow.profile import load_profile
from tests import fidelity_fixture as fx
from tests.fixtures_commands import started_from_a_venv
from tests.fixtures_gguf import write_gguf

pytestmark = pytest.mark.timeout(300)
SEED = 7


@pytest.fixture(autouse=True)
def _hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Hugging Face cache a Hub model id is looked up in: this test's own (empty until filled)."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    return cache


def _cache_snapshot(cache: Path, repo_id: str, head: torch.Tensor, *, revision: str = "main",
                    commit: str = "a" * 40) -> Path:
    """``repo_id`` at ``revision`` in a Hugging Face cache laid out as huggingface_hub lays it out:
    models--ORG--NAME/refs/REVISION holding the commit, snapshots/COMMIT/ linking each file to its
    blob; the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    built = _checkpoint(tmp := repo / "built" / commit, head)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for file in sorted(built.iterdir()):
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        file.rename(blob)
        (snapshot / file.name).symlink_to(Path("../..") / "blobs" / blob.name)
    tmp.rmdir()
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot


def _checkpoint(root: Path, head: torch.Tensor) -> Path:
    """A one-file safetensors checkpoint holding ``head`` as ``lm_head.weight``."""
    root.mkdir(parents=True)
    save_file({"model.norm.weight": torch.ones(head.shape[1]).bfloat16(), "lm_head.weight": head},
              str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    return root


def _model_checkpoint(root: Path, perturb: float = 0.0) -> Path:
    """The checkpoint of the embedded TinyModel (seed, perturbation): its head as lm_head.weight."""
    head = TinyModel(fx.VOCAB, seed=SEED, perturb=perturb).head
    return _checkpoint(root, torch.from_numpy(head).to(torch.bfloat16).contiguous())


def _vllm(name: str | None, model: str, perturb: float = 0.0) -> str:
    """A vLLM candidate whose launcher runs the embedded server (it takes vLLM's flags), so that
    the run captures real hidden states of the TinyModel whose head the checkpoint holds."""
    table = "[candidate]" if name is None else f'[[candidates]]\nname = "{name}"'
    return (f'{table}\nkind = "vllm"\nmodel = "{model}"\npython = "{sys.executable}"\n'
            f'launcher = ["-m", "kldtui.embedded", "--model", "{{model}}"]\n'
            f'vllm_args = ["--model-seed", "{SEED}", "--vocab-size", "{fx.VOCAB}",\n'
            f'             "--perturb", "{perturb}"]\n'
            'port = 0\nstartup_timeout = 60.0\nrequest_timeout = 60.0\n')


def _profile(folder: Path, candidates: str) -> Path:
    profile = folder / "kldtui.toml"
    run_name = "" if "[[candidates]]" in candidates else 'run_name = "hidden"\n'
    profile.write_text(f'[reference]\nlocal_dir = "{folder / "suite"}"\nlogits_dir = "reference-hidden"\n\n'
                       f'[run]\nworkdir = "{folder / "work"}"\n{run_name}\n'
                       '[capture]\nmode = "hidden"\nreplay_check = 2\n\n'
                       '[compare]\nbootstrap_samples = 50\n\n' + candidates)
    return profile


def test_kldtui_run_exports_the_candidates_head_from_its_checkpoint(tmp_path: Path) -> None:
    fx.build(tmp_path / "suite", contexts=4)
    ckpt = _model_checkpoint(tmp_path / "ckpt")
    weights = TinyModel(fx.VOCAB, seed=SEED).head
    profile = _profile(tmp_path, _vllm(None, str(ckpt)))
    events: list[Event] = []
    pipeline = Pipeline(load_profile(profile), events.append)
    head_dir = tmp_path / "work" / "candidate" / fid.LM_HEAD_DIR
    assert not head_dir.exists()

    pipeline.run_all()

    # exported (said first, with its size), then the replay check used it and compare ran
    notes = [e.text for e in events if isinstance(e, Notice)]
    size = 2 * fx.VOCAB * weights.shape[1]
    said = next(n for n in notes if "the candidate's LM head is exported from" in n)
    assert said.startswith(f"{head_dir}: the candidate's LM head is exported from {ckpt} (lm_head.weight, "
                           f"BF16 [{fx.VOCAB}, {weights.shape[1]}]): {size / 1024:.1f} KiB on disk, "), said
    stages = [(type(e).__name__, e.stage) for e in events if isinstance(e, StageStarted | StageFinished)]
    assert stages.index(("StageFinished", "export-head")) < stages.index(("StageStarted", "capture"))
    assert not any("no LM head yet" in n for n in notes)
    check = json.loads((tmp_path / "work" / "candidate" / "hidden-replay-qualification.json").read_text())
    assert check["status"] == "qualified" and check["kl_live_to_replay"]["max"] == 0.0
    report = json.loads((tmp_path / "work" / "comparison.json").read_text())
    assert report["candidate"]["lm_head_file_sha256"] == fid.load_lm_head(head_dir).file_sha256

    # the same bytes as `kldtui export-head` writes, and nothing left beside it
    by_hand = tmp_path / "by-hand"
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(by_hand)]) == 0
    for name in ("weight.safetensors", "manifest.json"):
        assert hashlib.sha256((head_dir / name).read_bytes()).hexdigest() == \
            hashlib.sha256((by_hand / name).read_bytes()).hexdigest(), name
    assert sorted(p.name for p in head_dir.parent.iterdir() if p.name.startswith(".")) == []

    # a head already there is used as it is: the next run exports nothing
    events.clear()
    Pipeline(load_profile(profile), events.append).run_all()
    assert not any(isinstance(e, StageStarted) and e.stage == "export-head" for e in events)


def _refused(profile: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["run", "--batch", "--profile", str(profile)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("case", ["gguf", "quantized", "hub id"])
def test_a_candidate_whose_head_cannot_be_exported_is_refused_before_its_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        case: str) -> None:
    fx.build(tmp_path / "suite", contexts=4)
    if case == "gguf":
        model = str(tmp_path / "q4.gguf")
        write_gguf(Path(model), vocab=fx.VOCAB)
        why = f"model = '{model}' (a .gguf file, not the safetensors checkpoint kldtui export-head reads); "
    elif case == "quantized":
        model = str(tmp_path / "int8")
        Path(model).mkdir()
        save_file({"lm_head.weight": torch.zeros(fx.VOCAB, 8, dtype=torch.int8),
                   "lm_head.weight_scale": torch.ones(fx.VOCAB)}, str(Path(model) / "model.safetensors"))
        why = f"lm_head.weight is I8 [{fx.VOCAB}, 8] with lm_head.weight_scale); "
    else:  # not in the Hugging Face cache the server downloads into: the command that fetches it there
        model = "org/q4-not-here"
        cache = tmp_path / "hf-cache"
        why = (f"model = 'org/q4-not-here' is not in the Hugging Face cache {cache}; before the run, "
               f"download it there: hf download org/q4-not-here --cache-dir {cache} (the run then exports "
               "its head from the cached checkpoint)")
    profile = _profile(tmp_path, _vllm(None, model))
    line = _refused(profile, capsys)
    folder = tmp_path / "work" / "candidate" / fid.LM_HEAD_DIR
    assert line.startswith(f"kldtui: error: {folder}: hidden mode replays the candidate's hidden states with "
                           f"its own LM head, which is not there, and "), line
    assert why in line, line
    if case != "hub id":
        assert f"kldtui export-head --checkpoint CHECKPOINT --output {folder}" in line, line
    assert not (tmp_path / "work" / "capture").exists() and not folder.exists()
    if case == "gguf":  # started as .venv/bin/kldtui (not on PATH): the command names that program
        kldtui = started_from_a_venv(tmp_path, monkeypatch)
        line = _refused(profile, capsys)
        assert f"{kldtui} export-head --checkpoint CHECKPOINT --output {folder}" in line, line


def test_a_hub_model_id_is_exported_from_its_snapshot_in_the_hugging_face_cache(tmp_path: Path) -> None:
    """vLLM serves ``org/q4`` from the Hugging Face cache (HF_HUB_CACHE): the run exports the head
    from the cached snapshot, the same file as ``kldtui export-head`` writes from it."""
    fx.build(tmp_path / "suite", contexts=4)
    head = torch.from_numpy(TinyModel(fx.VOCAB, seed=SEED).head).to(torch.bfloat16).contiguous()
    snapshot = _cache_snapshot(tmp_path / "hf-cache", "org/q4", head)
    events: list[Event] = []
    Pipeline(load_profile(_profile(tmp_path, _vllm(None, "org/q4"))), events.append).run_all()

    head_dir = tmp_path / "work" / "candidate" / fid.LM_HEAD_DIR
    said = next(e.text for e in events if isinstance(e, Notice) and "LM head is exported from" in e.text)
    assert said.startswith(f"{head_dir}: the candidate's LM head is exported from {snapshot} "), said
    by_hand = tmp_path / "by-hand"
    assert main(["export-head", "--checkpoint", str(snapshot), "--output", str(by_hand)]) == 0
    assert fid.load_lm_head(head_dir).file_sha256 == fid.load_lm_head(by_hand).file_sha256
    check = json.loads((tmp_path / "work" / "candidate" / "hidden-replay-qualification.json").read_text())
    assert check["status"] == "qualified" and check["kl_live_to_replay"]["max"] == 0.0


def test_a_hub_model_is_looked_up_at_the_servers_revision_in_the_cache_its_environment_names(
        tmp_path: Path) -> None:
    """``--revision`` in vllm_args picks the snapshot refs/REVISION names; HF_HUB_CACHE in
    ``[candidate] env`` (the server's environment) is the cache vLLM downloads into, not this shell's."""
    from kldtui.stages.candidate_head import candidate_head

    fx.build(tmp_path / "suite", contexts=4)
    theirs = tmp_path / "server-cache"
    main_head, v2_head = (torch.full((fx.VOCAB, 8), v, dtype=torch.bfloat16) for v in (1.0, 2.0))
    _cache_snapshot(theirs, "org/q4", main_head, commit="1" * 40)
    v2 = _cache_snapshot(theirs, "org/q4", v2_head, revision="v2", commit="2" * 40)
    table = _vllm(None, "org/q4").replace('vllm_args = [', 'vllm_args = ["--revision", "v2", ') \
        + f'env = {{ HF_HUB_CACHE = "{theirs}" }}\n'
    profile = load_profile(_profile(tmp_path, table))
    plan = candidate_head(profile.capture.mode, profile.candidate, profile.workspace())
    assert plan is not None and plan.problem is None and plan.checkpoint == v2, plan


def test_a_hub_model_only_partly_in_the_cache_says_to_finish_its_download(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot whose index names a shard that is not there (a download stopped halfway, or only
    the config fetched): refused, with the command that finishes the download."""
    fx.build(tmp_path / "suite", contexts=4)
    cache = tmp_path / "hf-cache"
    snapshot = cache / "models--org--q4" / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    (cache / "models--org--q4" / "refs").mkdir()
    (cache / "models--org--q4" / "refs" / "main").write_text("c" * 40)
    shard = "model-00002-of-00002.safetensors"
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors", "lm_head.weight": shard}}))
    line = _refused(_profile(tmp_path, _vllm(None, "org/q4")), capsys)
    assert (f"model = 'org/q4' is only partly in the Hugging Face cache ({snapshot / shard}: not there, "
            "though model.safetensors.index.json names it for lm_head.weight); before the run, finish its "
            f"download: hf download org/q4 --cache-dir {cache} (the run then exports its head from the "
            "cached checkpoint)") in line, line


def test_a_hidden_mode_campaign_exports_each_candidates_own_head(tmp_path: Path) -> None:
    """Each candidate is replayed with its own head, exported from its own checkpoint into
    candidates/NAME/lm-head: the rounded model's head differs from the other's."""
    fx.build(tmp_path / "suite", contexts=4)
    profile = _profile(tmp_path, _vllm("bf16", str(_model_checkpoint(tmp_path / "bf16")))
                       + "\n" + _vllm("q4", str(_model_checkpoint(tmp_path / "q4", 0.2)), 0.2))
    Campaign(load_profile(profile), lambda event: None).run_all()
    hashes = {}
    for name in ("bf16", "q4"):
        folder = tmp_path / "work" / "candidates" / name
        hashes[name] = fid.load_lm_head(folder / fid.LM_HEAD_DIR).file_sha256
        check = json.loads((folder / "hidden-replay-qualification.json").read_text())
        assert check["status"] == "qualified" and check["lm_head_file_sha256"] == hashes[name]
        report = json.loads((tmp_path / "work" / f"comparison-{name}.json").read_text())
        assert report["candidate"]["lm_head_file_sha256"] == hashes[name]
    assert hashes["bf16"] != hashes["q4"]


def test_the_leaders_repeat_capture_reuses_its_exported_head(tmp_path: Path) -> None:
    """The leader's repeat capture (repeat/NAME) serves the same checkpoint: its head is the leader's
    file, hardlinked (the same inode, no second 2 GiB export) after its hash was checked against its
    manifest, and the replay check and the noise model are measured with it."""
    import os

    fx.build(tmp_path / "suite", contexts=4)
    profile = _profile(tmp_path, _vllm("bf16", str(_model_checkpoint(tmp_path / "bf16")))
                       + "\n" + _vllm("q4", str(_model_checkpoint(tmp_path / "q4", 0.2)), 0.2)
                       + "\n[campaign]\nrepeat_leader = true\n")
    events: list[Event] = []
    campaign = Campaign(load_profile(profile), events.append)
    campaign.run_all()
    assert campaign.repeat is not None and campaign.repeat.state == "compared", campaign.repeat
    leader = campaign.repeat.name.split(".")[0]
    first = tmp_path / "work" / "candidates" / leader / fid.LM_HEAD_DIR
    again = tmp_path / "work" / "repeat" / leader / fid.LM_HEAD_DIR
    assert fid.load_lm_head(again).file_sha256 == fid.load_lm_head(first).file_sha256
    for name in ("weight.safetensors", "manifest.json"):
        assert hashlib.sha256((again / name).read_bytes()).hexdigest() == \
            hashlib.sha256((first / name).read_bytes()).hexdigest(), name
    assert (again / "weight.safetensors").stat().st_ino == (first / "weight.safetensors").stat().st_ino
    assert not (again / "manifest.json").samefile(first / "manifest.json")  # copied: its own
    assert not os.path.islink(again / "weight.safetensors")
    exports = [e for e in events if isinstance(e, StageStarted) and e.stage == "export-head"]
    assert len(exports) == 2, exports  # one a candidate; none for the repeat
    said = [e.text for e in events if isinstance(e, Notice) and e.text.startswith(f"{again}: ")]
    sha = fid.load_lm_head(first).file_sha256
    assert said == [f"{again}: the candidate's LM head is the same model's, exported in {first} (file_sha256 "
                    f"{sha[:12]}... checked), hardlinked: no new space on disk; not exported again"], said
    check = json.loads((again.parent / "hidden-replay-qualification.json").read_text())
    assert check["status"] == "qualified" and check["lm_head_file_sha256"] == sha


def test_a_repeat_does_not_reuse_a_head_that_is_not_what_its_manifest_hashes(tmp_path: Path) -> None:
    """A leader's head whose weight file is a symbolic link, or whose bytes are not the file_sha256
    its manifest states, is never linked: the repeat's head is exported from the checkpoint."""
    from kldtui.stages.candidate_head import export_candidate_head

    fx.build(tmp_path / "suite", contexts=4)
    ckpt = _model_checkpoint(tmp_path / "bf16")
    table = _vllm("bf16", str(ckpt)) + "\n[campaign]\nrepeat_leader = true\n"
    profile = load_profile(_profile(tmp_path, table))
    base = profile.member_workspace("bf16")
    repeat = base.repeat_of("bf16")
    first = tmp_path / "work" / "candidates" / "bf16" / fid.LM_HEAD_DIR
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(first)]) == 0
    good = fid.load_lm_head(first).file_sha256
    weight = first / "weight.safetensors"
    elsewhere = first / "real.bin"
    weight.rename(elsewhere)
    weight.symlink_to(elsewhere.name)  # a link (inside its folder, which the loader allows): not followed
    events: list[Event] = []
    member = profile.member(profile.candidates[0])
    assert export_candidate_head(member.capture.mode, member.candidate, repeat, events.append) is not None
    again = tmp_path / "work" / "repeat" / "bf16" / fid.LM_HEAD_DIR
    warned = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert warned == [f"{first}: not reused for its repeat (weight.safetensors is not a regular file); the "
                      "head is exported from the checkpoint instead"], warned
    assert fid.load_lm_head(again).file_sha256 == good
    assert (again / "weight.safetensors").stat().st_ino != elsewhere.stat().st_ino

    # the right kind of file with other bytes than its manifest hashes: not reused either
    import shutil

    shutil.rmtree(again)
    weight.unlink()
    data = bytearray(elsewhere.read_bytes())
    data[-1] ^= 1
    weight.write_bytes(bytes(data))
    events.clear()
    assert export_candidate_head(member.capture.mode, member.candidate, repeat, events.append) is not None
    warned = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(warned) == 1 and "does not hash to the file_sha256 its manifest states" in warned[0], warned
    assert fid.load_lm_head(again).file_sha256 == good


def _short_of_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    from collections import namedtuple

    real, usage = shutil.disk_usage, namedtuple("usage", "total used free")
    monkeypatch.setattr("kldtui.workflow.preflight.shutil.disk_usage",
                        lambda path: usage(real(path).total, real(path).used, 1))


def test_a_runs_disk_plan_counts_the_head_it_will_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head the run exports (vocab x hidden BF16 values; Kimi K3's 2.2 GiB) is in the disk the
    run says it needs, in words; once it is there it is not counted again."""
    from kldtui.workflow.preflight import _disk_problem

    fx.build(tmp_path / "suite", contexts=4)
    hidden = TinyModel(fx.VOCAB, seed=SEED).head.shape[1]
    profile = load_profile(_profile(tmp_path, _vllm(None, str(_model_checkpoint(tmp_path / "ckpt")))))
    _short_of_disk(monkeypatch)
    said = _disk_problem(profile, profile.workspace()) or ""
    head = 2 * fx.VOCAB * hidden
    assert (f" + the candidate's LM head {human_bytes(head)} (exported from its checkpoint) in "
            f"{tmp_path / 'work'}, ") in said, said
    fid.write_lm_head(tmp_path / "work" / "candidate" / fid.LM_HEAD_DIR, np.zeros((fx.VOCAB, 8), np.float32),
                      checkpoint_tensor_key="lm_head.weight")
    said = _disk_problem(profile, profile.workspace()) or ""
    assert "LM head" not in said and " 4 finalized contexts " in said, said


def test_a_campaigns_disk_plan_counts_each_candidates_head_and_the_repeats_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each candidate's exported head is in its part of the campaign's line and in the total; the
    leader's repeat reuses the leader's, counted as a copy ("0 if hardlinked"): a file system may
    refuse the link. Before, the repeat added none, and a copy was in no plan."""
    import re

    fx.build(tmp_path / "suite", contexts=4)
    hidden = TinyModel(fx.VOCAB, seed=SEED).head.shape[1]
    profile = _profile(tmp_path, _vllm("bf16", str(_model_checkpoint(tmp_path / "bf16")))
                       + "\n" + _vllm("q4", str(_model_checkpoint(tmp_path / "q4", 0.2)), 0.2)
                       + "\n[campaign]\nrepeat_leader = true\n")
    _short_of_disk(monkeypatch)
    with pytest.raises(BadInput) as info:
        Campaign(load_profile(profile), lambda event: None).run_all()
    said = str(info.value)
    head = f" + the candidate's LM head {human_bytes(2 * fx.VOCAB * hidden)} (exported from its checkpoint)"
    parts = re.search(r"at peak \((.*), capture chunks ", said)
    assert parts is not None, said
    bf16, q4, repeat = parts.group(1).split(", ")
    assert bf16.startswith("bf16 4 contexts ") and bf16.endswith(head), said
    assert q4.startswith("q4 4 contexts ") and q4.endswith(head), said
    copied = (f" + the candidate's LM head {human_bytes(2 * fx.VOCAB * hidden)} (a copy of the same model's; "
              "0 if hardlinked)")
    assert repeat.startswith("the leader's repeat 4 contexts ") and repeat.endswith(copied), said


def test_a_repeats_disk_plan_holds_the_copy_when_the_hardlink_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeat's plan counts the leader's head as a copy, and says "0 if hardlinked": on a file
    system that refuses the link (os.link raising), the copy the run writes is within the plan.
    Before, a head on the same file system was planned as 0 bytes, then copied."""
    import errno
    import os

    from kldtui.stages.candidate_head import candidate_head, export_candidate_head
    from kldtui.workflow.preflight import _disk_problem

    fx.build(tmp_path / "suite", contexts=4)
    ckpt = _model_checkpoint(tmp_path / "bf16")
    table = _vllm("bf16", str(ckpt)) + "\n[campaign]\nrepeat_leader = true\n"
    profile = load_profile(_profile(tmp_path, table))
    member = profile.member(profile.candidates[0])
    repeat = profile.member_workspace("bf16").repeat_of("bf16")
    first = tmp_path / "work" / "candidates" / "bf16" / fid.LM_HEAD_DIR
    assert main(["export-head", "--checkpoint", str(ckpt), "--output", str(first)]) == 0
    plan = candidate_head(member.capture.mode, member.candidate, repeat)
    assert plan is not None
    planned = plan.size_bytes
    _short_of_disk(monkeypatch)
    said = _disk_problem(member, repeat) or ""
    assert (f" + the candidate's LM head {human_bytes(planned)} (a copy of the same model's; "
            f"0 if hardlinked) in {tmp_path / 'work'}, ") in said, said

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refused)
    events: list[Event] = []
    assert export_candidate_head(member.capture.mode, member.candidate, repeat, events.append) is not None
    again = repeat.candidate / fid.LM_HEAD_DIR
    weight = again / "weight.safetensors"
    assert weight.stat().st_ino != (first / "weight.safetensors").stat().st_ino  # copied, not linked
    assert any("copied: " in e.text for e in events if isinstance(e, Notice)), events
    assert 0 < weight.stat().st_size <= planned, (weight.stat().st_size, planned)


def test_a_campaign_refuses_a_later_candidate_without_a_head_before_the_first_server(tmp_path: Path) -> None:
    """The second candidate's missing head is said before the first candidate is served (each
    candidate's own head: candidates/NAME/lm-head)."""
    fx.build(tmp_path / "suite", contexts=4)
    ckpt = _checkpoint(tmp_path / "ckpt", torch.zeros(fx.VOCAB, 8, dtype=torch.bfloat16))
    profile = _profile(tmp_path, _vllm("bf16", str(ckpt)) + "\n" + _vllm("q4", "org/q4-not-here"))
    events: list[Event] = []
    with pytest.raises(BadInput) as info:
        Campaign(load_profile(profile), events.append).run_all()
    folder = tmp_path / "work" / "candidates" / "q4" / fid.LM_HEAD_DIR
    assert str(info.value).startswith(f"{folder}: hidden mode replays the candidate's hidden states with its "
                                      "own LM head, which is not there, and "), info.value
    assert not any(type(e).__name__ == "ServerStarted" for e in events)
    assert not (tmp_path / "work" / "candidates" / "bf16" / fid.LM_HEAD_DIR).exists()


def test_a_head_already_in_the_candidate_folder_is_not_refused(tmp_path: Path) -> None:
    from kldtui.workflow.preflight import preflight

    fx.build(tmp_path / "suite", contexts=4)
    profile = load_profile(_profile(tmp_path, _vllm(None, "org/q4-not-here")))
    folder = tmp_path / "work" / "candidate" / fid.LM_HEAD_DIR
    assert any(p.startswith(f"{folder}: ") for p in preflight(profile, profile.workspace(), disk=False))
    fid.write_lm_head(folder, np.zeros((fx.VOCAB, 8), np.float32), checkpoint_tensor_key="lm_head.weight")
    assert preflight(profile, profile.workspace(), disk=False) == []


def test_the_cache_a_hub_model_is_looked_up_in_is_the_one_vllm_downloads_into(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--download-dir`` first (either spelling), else HF_HUB_CACHE, else its older name
    HUGGINGFACE_HUB_CACHE, else ``$HF_HOME/hub``, each as the server's environment has it; a local
    path is no Hub model."""
    from kldtui.servers.registry import kind_of

    fx.build(tmp_path / "suite", contexts=4)

    def hub(table: str) -> object:
        profile = load_profile(_profile(tmp_path, table))
        return kind_of(profile.candidate).hub_model(profile.candidate)

    plain = _vllm(None, "org/q4")
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "older"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub(plain) == HubModel("org/q4", None, tmp_path / "hf-cache")
    monkeypatch.delenv("HF_HUB_CACHE")
    assert hub(plain) == HubModel("org/q4", None, tmp_path / "older")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE")
    assert hub(plain) == HubModel("org/q4", None, tmp_path / "home" / "hub")
    for flags in ('"--download-dir", "/models"', '"--download-dir=/models"'):
        table = plain.replace("vllm_args = [", f"vllm_args = [{flags}, \"--revision=abc\", ")
        assert hub(table) == HubModel("org/q4", "abc", Path("/models")), flags
    assert hub(_vllm(None, str(_model_checkpoint(tmp_path / "ckpt")))) is None
