"""``kldtui demo``: the whole pipeline on a tiny built-in suite and model, no GPU, no network.

:func:`prepare_demo` writes (once) a small suite of token windows to ``DIR/suite`` and the
profile ``DIR/kldtui.toml`` (the text of ``examples/demo.toml``); ``kldtui demo`` runs the
ordinary :class:`~kldtui.workflow.pipeline.Pipeline` on it (headless, or in the dashboard): the
reference is captured from the embedded server with the unperturbed model and finalized into
``DIR/suite/ref``, the candidate from the same model with quantization-like rounding
(``perturb``), then both are compared and the report is written to ``DIR/comparison.json``.
Every step is resumable: run it again after an interruption (even ``kill -9``) and finished
windows are not captured again.
"""

from __future__ import annotations

import os
from pathlib import Path

from kldtui.errors import BadInput
from kldtui.workflow.profile import Profile, load_profile
from kldtui.workspace import Workspace

DEMO_DOMAINS = ("prose", "prose", "code", "code", "instruction", "instruction")
DEMO_CONTEXT = 512
DEMO_VOCAB = 2048
DEMO_TOKEN_SEED = 20240601
DEMO_MODEL_SEED = 7

PROFILE_TEXT = f"""\
# kldtui demo profile: the embedded CPU server (a tiny deterministic model) plays both the
# reference (unperturbed) and the candidate (weights rounded like a quantizer would).
# `kldtui demo --workdir DIR` writes this file as DIR/kldtui.toml next to DIR/suite; then
# `cd DIR && kldtui` opens the dashboard on it, `kldtui run --batch` runs it headless.

[reference]
local_dir = "suite"            # suite-manifest.json + tokens/ (+ ref/ once captured)
capture = "embedded"           # capture missing reference logits with the embedded server

[candidate]
kind = "embedded"
served_model_name = "demo"
model_seed = {DEMO_MODEL_SEED}
vocab_size = {DEMO_VOCAB}
perturb = 0.1                  # rounding step / weight std; 0.1 gives a mean KL of about 0.03
port = 0                       # a free port
startup_timeout = 120.0
request_timeout = 120.0

[run]
workdir = "."
run_name = "candidate"

[compare]
bootstrap_samples = 2000
bootstrap_seed = 1
"""

# Score mode (issue 16): the embedded server scores each chunk against the reference and saves
# per-row figures only; a run of its own, so a folder can hold both demos.
SCORE_PROFILE_TEXT = PROFILE_TEXT.replace('run_name = "candidate"\n', 'run_name = "candidate-score"\n') + """
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
