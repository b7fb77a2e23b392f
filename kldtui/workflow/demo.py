"""``kldtui demo``: the whole pipeline on a tiny built-in suite and model, no GPU, no network.

:func:`prepare_demo` writes (once) a small suite of token windows to ``DIR/suite`` and the
profile ``DIR/kldtui.toml`` (the text of ``examples/demo.toml``); ``kldtui demo`` runs the
ordinary :class:`~kldtui.workflow.pipeline.Pipeline` on it (headless, or in the dashboard): the
reference is captured from the embedded server with the unperturbed model and finalized into
``DIR/suite/ref``; it is a campaign (:mod:`kldtui.workflow.campaign`) of two candidates, the same
model with finer and coarser quantization-like rounding (``perturb``), each compared with the
reference (``DIR/comparison-NAME.json``); the closer one is captured a second time for the
measured noise model (``DIR/noise-model-HASH.json``, HASH: the suite's), and the leaderboard
(``DIR/leaderboard.json``) ends on a verdict (the coarser candidate is farther) and a tie (the
repeat capture).
Every step is resumable: run it again after an interruption (even ``kill -9``) and finished
windows are not captured again.

``hidden`` (``kldtui demo --hidden``): the hidden-state workflow (docs/FORMATS.md, "Hidden-state
suites"; docs/REPLAY.md). :func:`build_demo_hidden_suite` writes ``DIR/suite-hidden``, a suite of
contexts in source clusters (two contexts of each source document) that publishes the reference
model's final hidden states (``reference-hidden/``) and its LM head (``lm-head/``) instead of
logits; the profile ``DIR/kldtui-hidden.toml`` captures the candidates in hidden mode, each
replayed with its own head (the built-in model writes it: ``candidates/NAME/lm-head``), and the
leaderboard's ties count source clusters. The closer candidate is captured again for the noise
model, as above: in hidden mode the embedded server's runtime noise moves the hidden states it saves.

The three demos share ``DIR``; each profile keeps its own leaderboard and noise model there
(kldtui.workspace: ``leaderboard-kldtui-score.json``, ``noise-model-kldtui-hidden-HASH.json``, ...)
and its candidates names of their own (``fine-score``, ``fine-hidden``), so one run again neither
overwrites nor measures again another's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kldtui.errors import BadInput
from kldtui.workflow.profile import PROFILE_LIMIT, Profile, load_profile
from kldtui.workspace import DEMO_HIDDEN_SUITE, Workspace

if TYPE_CHECKING:
    from kldtui.formats.fidelity import NewContext

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


def _candidate_tables(suffix: str = "", *, noise_of: str = "the logits") -> str:
    """The candidates' tables; ``noise_of``: what their runtime noise moves (in hidden mode the
    embedded server puts it on the hidden states), for the profile's comment."""
    def line(text: str, comment: str = "") -> str:
        return f"{text:<30} # {comment}" if comment else text

    noise = line(f"runtime_noise = {DEMO_RUNTIME_NOISE}", f"run-to-run noise of {noise_of}, as on a GPU")
    out = []
    for name, perturb in DEMO_CANDIDATES.items():
        why = "rounding step / weight std: the closer candidate" if name == "fine" else \
            "0.1 gives a mean KL of about 0.03"
        out.append("\n".join([
            "[[candidates]]", line(f'name = "{name}{suffix}"', "its folder candidates/NAME, its report"),
            'kind = "embedded"', 'served_model_name = "demo"', f"model_seed = {DEMO_MODEL_SEED}",
            f"vocab_size = {DEMO_VOCAB}", line(f"perturb = {perturb}", why),
            noise,
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


# The hidden-state demo (``kldtui demo --hidden``): a suite of contexts, two from each source document
# as a published suite takes them (the halves of one of the demo's windows), one source cluster per
# document: 24 contexts in 12 clusters (the verdicts count the clusters, and need 8).
DEMO_CONTEXTS_PER_SOURCE = 2
HIDDEN_PROFILE_TEXT = f"""\
# kldtui demo --hidden profile: the hidden-state workflow on the embedded CPU server. The suite
# (suite-hidden/: contexts, two from each source document, in source clusters) publishes the
# reference model's final hidden states (reference-hidden/) and its LM head (lm-head/) instead of
# logits. Each candidate is captured in hidden mode and its hidden states are replayed with its own
# LM head (the built-in model writes it into candidates/NAME/lm-head, as kldtui export-head would
# from a checkpoint); the leaderboard's ties count source clusters.
# `kldtui demo --hidden --workdir DIR` writes this file as DIR/kldtui-hidden.toml next to
# DIR/suite-hidden; then, in DIR, `kldtui --profile kldtui-hidden.toml` opens the dashboard on it,
# `kldtui run --batch --profile kldtui-hidden.toml` runs it headless.
# The best candidate is captured again ([campaign] repeat_leader): its hidden states differ from
# run to run (runtime_noise), as a GPU's do, and the two captures measure the noise model.

[reference]
local_dir = "{DEMO_HIDDEN_SUITE}"     # suite-manifest.json + tokens/ + reference-hidden/ + lm-head/
logits_dir = "reference-hidden"  # the reference: its hidden states, replayed with lm-head/

{_candidate_tables("-hidden", noise_of="the hidden states")}
[campaign]
repeat_leader = true           # capture the best candidate twice: the measured noise model

[capture]
mode = "hidden"                # the server saves final hidden states; compare replays them
replay_check = 2               # contexts whose live logits are captured too: each head's replay is checked

[run]
workdir = "."

[compare]
bootstrap_samples = 2000
bootstrap_seed = 1
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


def demo_contexts() -> list[NewContext]:
    """The hidden-state demo's contexts: each of the demo's windows (:func:`demo_windows`) is a source
    document, cut into :data:`DEMO_CONTEXTS_PER_SOURCE` consecutive contexts of its own source
    cluster, in the window's stratum."""
    from kldtui.formats.fidelity import NewContext

    per = DEMO_CONTEXTS_PER_SOURCE
    length = DEMO_CONTEXT // per
    return [NewContext(tokens[part * length:(part + 1) * length], domain, fields={
                "dataset": "kldtui/demo", "dataset_revision": "1", "source_id": f"document-{doc}",
                "source_cluster_id": f"source-{doc}"})
            for doc, (domain, tokens) in enumerate(demo_windows()) for part in range(per)]


def build_demo_hidden_suite(root: Path) -> None:
    """Write the hidden-state demo suite to ``root`` with kldtui's writers: its contexts, the reference
    model's LM head (``lm-head/``) and final hidden states (``reference-hidden/``), then the top-level
    manifest and ``checksums.txt`` (last: a suite that has them is complete). What an interrupted
    build left is finished; a complete suite (the same) is left as it is."""
    import shutil

    from kldtui.capture_modes.hidden_suite import replay_output
    from kldtui.embedded.model import TinyModel
    from kldtui.formats import fidelity as fid
    from kldtui.formats.suite import load_suite, suite_manifest_path, suite_token_hash, token_ids_hash

    contexts = demo_contexts()
    expected = suite_token_hash([token_ids_hash(c.tokens) for c in contexts])
    if suite_manifest_path(root).exists():
        suite = load_suite(root)
        if suite.suite_token_hash_sha256 != expected:
            raise BadInput(f"{root}: holds another suite than the hidden-state demo's; use an empty "
                           "--workdir")
    else:
        suite = fid.write_context_suite(root, contexts, kind="kldtui demo hidden-state suite")
    if (root / fid.CHECKSUMS).is_file():
        return
    model = TinyModel(DEMO_VOCAB, seed=DEMO_MODEL_SEED)
    if not (root / fid.LM_HEAD_DIR).exists():
        model.write_head(root / fid.LM_HEAD_DIR)
    hidden = root / fid.HIDDEN_DIR
    if not (hidden / fid.TENSOR_MANIFEST).is_file():
        shutil.rmtree(hidden, ignore_errors=True)  # an interrupted build's files: written again
        records = []
        for window in suite.windows:
            states = model.hidden(suite.load_tokens(window))[:window.scored_positions]
            written = fid.write_context_tensor(hidden, "hidden", window, states)
            records.append(fid.tensor_record(window, written))
        # the model computes in float32: its head gives float32 logits (as the embedded server's
        # hidden mode records them)
        fid.write_tensor_manifest(hidden, "hidden", suite, records, width=model.hidden_size,
                                  run_name="reference-hidden",
                                  extra={"kldtui_kind": "reference", "replay_output": replay_output("F32")})
    fid.write_top_manifest(root, artifact_kind="kldtui demo hidden-state suite", status="replay not checked")
    fid.write_checksums(root)


def _holds(path: Path, text: str) -> bool:
    """Whether the file at ``path`` holds ``text``; False when it is missing, unreadable or no regular
    file (a FIFO there is replaced, not waited on)."""
    from kldtui.formats.safe_io import read_text

    try:
        return read_text(path, limit=PROFILE_LIMIT) == text
    except (OSError, UnicodeDecodeError):
        return False


def prepare_demo(workdir: str | os.PathLike[str], *, score: bool = False, hidden: bool = False) -> Profile:
    """Create the demo suite and profile in ``workdir`` (idempotent); return the profile.
    ``score``: the score-mode profile (``kldtui-score.toml``, ``[capture] mode = "score"``);
    ``hidden``: the hidden-state demo's suite and profile (``suite-hidden``, ``kldtui-hidden.toml``)."""
    from kldtui.folder_lock import ensure_folder

    if score and hidden:
        raise BadInput("the demo runs in one mode at a time: pass --score or --hidden, not both")
    root = ensure_folder(Path(workdir).expanduser().resolve(), "--workdir")
    suite_dir, profile_path = Workspace.demo_layout(root, score, hidden)
    if hidden:
        build_demo_hidden_suite(suite_dir)
    else:
        build_demo_suite(suite_dir)
    text = HIDDEN_PROFILE_TEXT if hidden else SCORE_PROFILE_TEXT if score else PROFILE_TEXT
    if not _holds(profile_path, text):
        from kldtui.formats.atomic import atomic_open

        with atomic_open(profile_path, "w") as handle:
            handle.write(text)
    return load_profile(profile_path)
