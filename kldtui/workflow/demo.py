"""``kldtui demo``: the whole pipeline on a tiny built-in suite and model, no GPU, no network.

:func:`prepare_demo` writes (once) a small suite of token windows to ``DIR/suite`` and the
profile ``DIR/kldtui.toml`` (the text of ``examples/demo.toml``); ``kldtui demo`` runs the
ordinary :class:`~kldtui.workflow.pipeline.Pipeline` on it (headless, or in the dashboard): the
reference is captured from the embedded server with the unperturbed model and finalized into
``DIR/suite/ref``; it is a campaign (:mod:`kldtui.workflow.campaign`) of two candidates, the same
model with finer and coarser quantization-like rounding (``perturb``), each compared with the
reference (``DIR/comparison-NAME.json``); the closer one is captured a second time for the
measured noise model (``DIR/noise-model.json``), and the leaderboard (``DIR/leaderboard.json``)
ends on a verdict (the coarser candidate is farther) and a tie (the repeat capture).
Every step is resumable: run it again after an interruption (even ``kill -9``) and finished
windows are not captured again.
"""

from __future__ import annotations

import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.workflow.profile import Profile, load_profile
from kldtui.workspace import Workspace

DEMO_DOMAINS = ("prose",) * 4 + ("code",) * 4 + ("instruction",) * 4  # 12 windows: enough for verdicts
DEMO_CONTEXT = 512
DEMO_VOCAB = 2048
DEMO_TOKEN_SEED = 20240601
DEMO_MODEL_SEED = 7
# The demo's candidates: name -> rounding step (perturb). Both closer and farther than each other
# by far more than the runtime noise, so the leaderboard names a winner; the repeat capture of the
# winner is the tie.
DEMO_CANDIDATES = {"fine": 0.05, "coarse": 0.1}
DEMO_RUNTIME_NOISE = 0.05  # run-to-run logit noise, so a repeat capture differs like a real runtime's


def _candidate_tables(suffix: str = "") -> str:
    def line(text: str, comment: str = "") -> str:
        return f"{text:<30} # {comment}" if comment else text

    out = []
    for name, perturb in DEMO_CANDIDATES.items():
        why = "rounding step / weight std: the closer candidate" if name == "fine" else \
            "0.1 gives a mean KL of about 0.03"
        out.append("\n".join([
            "[[candidates]]", line(f'name = "{name}{suffix}"', "its folder candidates/NAME, its report"),
            'kind = "embedded"', 'served_model_name = "demo"', f"model_seed = {DEMO_MODEL_SEED}",
            f"vocab_size = {DEMO_VOCAB}", line(f"perturb = {perturb}", why),
            line(f"runtime_noise = {DEMO_RUNTIME_NOISE}", "run-to-run noise of the logits, as on a GPU"),
            line("port = 0", "a free port"), "startup_timeout = 120.0", "request_timeout = 120.0", ""]))
    return "\n".join(out)


PROFILE_TEXT = f"""\
# kldtui demo profile: the embedded CPU server (a tiny deterministic model) plays the reference
# (unperturbed) and two candidates (weights rounded like a quantizer would, finer and coarser).
# `kldtui demo --workdir DIR` writes this file as DIR/kldtui.toml next to DIR/suite; then
# `cd DIR && kldtui` opens the dashboard on it, `kldtui run --batch` runs it headless.
# A campaign: each [[candidates]] table is served, captured and compared after the one before,
# then the best is captured again ([campaign] repeat_leader) to measure the noise model.

[reference]
local_dir = "suite"            # suite-manifest.json + tokens/ (+ ref/ once captured)
capture = "embedded"           # capture missing reference logits with the embedded server

{_candidate_tables()}
[campaign]
repeat_leader = true           # capture the best candidate twice: the measured noise model

[run]
workdir = "."

[compare]
bootstrap_samples = 2000
bootstrap_seed = 1
"""

# Score mode (issue 16): the embedded server scores each chunk against the reference and saves
# per-row figures only; candidates of their own names, so a folder can hold both demos.
SCORE_PROFILE_TEXT = PROFILE_TEXT.replace(_candidate_tables(), _candidate_tables("-score")) + """
[capture]
mode = "score"                 # the server scores against suite/ref: no candidate logits on disk
"""


def demo_windows() -> list[tuple[str, list[int]]]:
    """The demo suite's windows: text sampled from the demo's reference model itself, so
    next-token probabilities and perplexity look like those of a real model on real text."""
    from kldtui.embedded.model import TinyModel

    model = TinyModel(DEMO_VOCAB, seed=DEMO_MODEL_SEED)
    return [(domain, model.sample(DEMO_CONTEXT, seed=DEMO_TOKEN_SEED + i))
            for i, domain in enumerate(DEMO_DOMAINS)]


def build_demo_suite(root: Path) -> None:
    """Write the demo suite to ``root`` unless it is already there (and the same)."""
    from kldtui.formats.suite import load_suite, suite_manifest_path, suite_token_hash, token_ids_hash
    from kldtui.formats.suite_writer import write_suite

    windows = demo_windows()
    expected = suite_token_hash([token_ids_hash(ids) for _, ids in windows])
    if suite_manifest_path(root).exists():
        suite = load_suite(root)
        if suite.suite_token_hash_sha256 != expected:
            raise BadInput(f"{root}: holds another suite than the demo's; use an empty --workdir")
        return
    write_suite(root, windows, dataset="kldtui/demo", dataset_revision="1")


def prepare_demo(workdir: str | os.PathLike[str], *, score: bool = False) -> Profile:
    """Create the demo suite and profile in ``workdir`` (idempotent); return the profile.
    ``score``: the score-mode profile (``kldtui-score.toml``, ``[capture] mode = "score"``)."""
    from kldtui.folder_lock import ensure_folder

    root = ensure_folder(Path(workdir).expanduser().resolve(), "--workdir")
    suite_dir, profile_path = Workspace.demo_layout(root, score)
    build_demo_suite(suite_dir)
    text = SCORE_PROFILE_TEXT if score else PROFILE_TEXT
    if not profile_path.exists() or profile_path.read_text() != text:
        from kldtui.formats.atomic import atomic_open

        with atomic_open(profile_path, "w") as handle:
            handle.write(text)
    return load_profile(profile_path)
