"""A small campaign: a suite of the embedded model's own text and a ``[[candidates]]`` profile of
embedded servers at different perturbations (closer and farther from the reference)."""

from __future__ import annotations

import sys
from pathlib import Path

CAMPAIGN_WINDOWS = 8  # enough for verdicts (kldtui.decide.verdict.MIN_VERDICT_WINDOWS)
CAMPAIGN_CONTEXT = 192
VOCAB = 512
MODEL_SEED = 5
# name -> perturbation: the order a leaderboard must find (lower perturbation is closer)
CANDIDATES = {"q8": 0.04, "q4": 0.12, "q3": 0.2}


def build_suite(root: Path) -> None:
    from kldtui.embedded.model import TinyModel
    from kldtui.formats.suite_writer import write_suite

    model = TinyModel(VOCAB, seed=MODEL_SEED)
    domains = ("prose", "code")
    windows = [(domains[i % 2], model.sample(CAMPAIGN_CONTEXT, seed=100 + i))
               for i in range(CAMPAIGN_WINDOWS)]
    write_suite(root, windows, dataset="kldtui/campaign-test", dataset_revision="1")


def candidate_table(name: str, perturb: float, **extra: object) -> str:
    lines = ["[[candidates]]", f'name = "{name}"', 'kind = "embedded"', 'served_model_name = "tiny"',
             f"model_seed = {MODEL_SEED}", f"vocab_size = {VOCAB}", f"perturb = {perturb}", "port = 0",
             "max_num_batched_tokens = 64"]
    lines += [f"{k} = {str(v).lower()}" if isinstance(v, bool) else f"{k} = {v!r}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def write_profile(folder: Path, candidates: dict[str, float] | None = None, *, repeat_leader: bool = False,
                  noise: float = 0.0, extra: dict[str, dict[str, object]] | None = None) -> Path:
    """The campaign's suite (once) and profile in ``folder``; returns the profile's path."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "suite").exists():
        build_suite(folder / "suite")
    text = '[reference]\nlocal_dir = "suite"\ncapture = "embedded"\n\n'
    for name, perturb in (candidates or CANDIDATES).items():
        keys = {**({"runtime_noise": noise} if noise else {}), **(extra or {}).get(name, {})}
        text += candidate_table(name, perturb, **keys) + "\n"
    if repeat_leader:
        text += "[campaign]\nrepeat_leader = true\n\n"
    text += '[run]\nworkdir = "."\n\n[compare]\nbootstrap_samples = 500\n'
    path = folder / "kldtui.toml"
    path.write_text(text)
    return path


def run_cmd(profile: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile), *extra]
