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


def build_suite(root: Path, *, first_seed: int = 100, windows: int = CAMPAIGN_WINDOWS) -> None:
    """The suite of ``windows`` windows of the embedded model's text (another ``first_seed``: another
    suite of the same model and sizes)."""
    from kldtui.embedded.model import TinyModel
    from kldtui.formats.suite_writer import write_suite

    model = TinyModel(VOCAB, seed=MODEL_SEED)
    domains = ("prose", "code")
    texts = [(domains[i % 2], model.sample(CAMPAIGN_CONTEXT, seed=first_seed + i)) for i in range(windows)]
    write_suite(root, texts, dataset="kldtui/campaign-test", dataset_revision="1")


def single_profile(path: Path, suite: Path, workdir: Path, *, perturb: float = 0.1, **run: object) -> Path:
    """A single-candidate profile ([candidate]) at ``path``: an embedded candidate of the campaign's
    model against ``suite`` (its reference captured from the embedded model), in ``workdir``, with
    the ``[run]`` keys ``run``."""
    server = candidate_table("unused", perturb).replace("[[candidates]]", "[candidate]")
    server = server.replace('name = "unused"\n', "")
    keys = "".join(f"{k} = {v!r}\n" for k, v in run.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[reference]\nlocal_dir = "{suite}"\ncapture = "embedded"\n\n{server}\n'
                    f'[run]\nworkdir = "{workdir}"\n{keys}\n[compare]\nbootstrap_samples = 500\n')
    return path


def campaign_profile(path: Path, suite: Path, workdir: Path, candidates: dict[str, float], *,
                     capture: bool = True, **run: object) -> Path:
    """A campaign profile at ``path``: embedded ``candidates`` (name -> perturbation) against ``suite``
    (its reference captured from the embedded model with ``capture``, else already in ``suite/ref``),
    in ``workdir``, with the ``[run]`` keys ``run``."""
    reference = f'local_dir = "{suite}"\n' + ('capture = "embedded"\n' if capture else "")
    return _campaign(path, reference, workdir, candidates, run)


def downloading_profile(path: Path, repo_id: str, workdir: Path, candidates: dict[str, float], *,
                        revision: str | None = None, local_dir: Path | None = None, **run: object) -> Path:
    """A campaign profile at ``path`` whose suite is downloaded from the Hub (``[reference] repo_id``,
    ``revision``; into ``WORKDIR/reference`` unless ``local_dir``), with embedded ``candidates`` in
    ``workdir`` and the ``[run]`` keys ``run``."""
    reference = f'repo_id = "{repo_id}"\n'
    reference += f'revision = "{revision}"\n' if revision is not None else ""
    reference += f'local_dir = "{local_dir}"\n' if local_dir is not None else ""
    return _campaign(path, reference, workdir, candidates, run)


def _campaign(path: Path, reference: str, workdir: Path, candidates: dict[str, float],
              run: dict[str, object]) -> Path:
    tables = "".join(candidate_table(name, perturb) + "\n" for name, perturb in candidates.items())
    keys = "".join(f"{k} = {v!r}\n" for k, v in run.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[reference]\n{reference}\n{tables}[run]\nworkdir = "{workdir}"\n{keys}\n'
                    '[compare]\nbootstrap_samples = 500\n')
    return path


def candidate_table(name: str, perturb: float, **extra: object) -> str:
    lines = ["[[candidates]]", f'name = "{name}"', 'kind = "embedded"', 'served_model_name = "tiny"',
             f"model_seed = {MODEL_SEED}", f"vocab_size = {VOCAB}", f"perturb = {perturb}", "port = 0",
             "max_num_batched_tokens = 64"]
    lines += [f"{k} = {str(v).lower()}" if isinstance(v, bool) else f"{k} = {v!r}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def write_profile(folder: Path, candidates: dict[str, float] | None = None, *, repeat_leader: bool = False,
                  noise: float = 0.0, extra: dict[str, dict[str, object]] | None = None,
                  file_name: str = "kldtui.toml") -> Path:
    """The campaign's suite (once) and profile ``file_name`` in ``folder``; returns the profile's path."""
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
    path = folder / file_name
    path.write_text(text)
    return path


def run_cmd(profile: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kldtui", "run", "--batch", "--profile", str(profile), *extra]


def scripted_campaign_factory(tmp_path: Path, holder: dict[str, object], *,  # type: ignore[no-untyped-def]
                              repeat: bool = False, fail: bool = False):
    """A dashboard pipeline factory whose run is a scripted campaign of two candidates: each a
    ScriptedPipeline run, with the campaign's events around them. ``repeat``: the candidates write
    reports of their own (``comparison-q8.json``, ``comparison-q4.json``), and the leader, q8, is
    captured again (``repeat/comparison-q8.json``, other figures) before the final leaderboard;
    the run returns q8's run state, as :meth:`kldtui.workflow.campaign.Campaign.run_all` does.
    ``fail`` (with ``repeat``): a third candidate, q3, fails, and the run ends failed after the
    final leaderboard, as a campaign with a broken candidate does (``leader_state`` gives q8's)."""
    from kldtui.events import CandidateStarted, LeaderboardUpdated, Standing
    from tests.fixtures_tui import ScriptedPipeline

    class ScriptedCampaign(ScriptedPipeline):
        def leader_state(self):  # type: ignore[no-untyped-def]
            return leader_state(tmp_path / "comparison-q8.json")

        def run_all(self):  # type: ignore[no-untyped-def]
            total = 3 if repeat else 2
            first = self.report_path
            waiting = (Standing("q8", "waiting"), Standing("q4", "waiting"))
            self.emit(CandidateStarted("campaign", name="q8", number=1, total=total))
            self.emit(LeaderboardUpdated("campaign", rows=(Standing("q8", "running"), waiting[1]),
                                         ranked=False))
            super().run_all()
            best = Standing("q8", "compared", rank=1, mean=0.0123, ci_low=0.011, ci_high=0.0135, mark="best",
                            verdict="best", size_bytes=3 * 2**30, bits_per_weight=8.5,
                            report_path=str(first) if repeat else None)
            self.emit(LeaderboardUpdated("campaign", rows=(best, waiting[1]), windows=8, noise_model="none"))
            holder["after_first"] = True
            self.emit(CandidateStarted("campaign", name="q4", number=2, total=total))
            if repeat:
                self.report_path = tmp_path / "comparison-q4.json"
                self.report_level, self.report_seed = 0.05, 7
            state = super().run_all()
            worse = Standing("q4", "compared", rank=2, mean=0.05, ci_low=0.045, ci_high=0.055, mark="",
                             verdict="q4 is worse than q8 by 0.0377 KL", outcome="a_closer",
                             report_path=str(self.report_path) if repeat else None)
            rows: tuple[Standing, ...] = (best, worse)
            if repeat:
                self.emit(LeaderboardUpdated("campaign", rows=rows, windows=8, noise_model="none"))
                self.emit(CandidateStarted("campaign", name="q8.repeat", number=3, total=3, repeat=True))
                (tmp_path / "repeat").mkdir(exist_ok=True)
                self.report_path, self.report_level, self.report_seed = (
                    tmp_path / "repeat" / "comparison-q8.json", 0.02, 11)
                super().run_all()
                rows += (Standing("q8.repeat", "compared", mean=0.0251, mark="tied", outcome="within_noise",
                                  report_path=str(self.report_path),
                                  note="a second capture of q8 (the noise model); not ranked"),)
                state = leader_state(first)  # type: ignore[arg-type]
            if fail:
                rows += (Standing("q3", "failed", note="its server died"),)
            self.emit(LeaderboardUpdated("campaign", rows=rows, windows=8, noise_model="none",
                                         notes=("ties: paired t-test against the best (95 %)",),
                                         path=str(tmp_path / "leaderboard.json"), final=True))
            if fail:
                from kldtui.errors import StageFailed

                raise StageFailed("1 of 3 candidates failed (q3; q3: its server died); the others are ranked")
            return state

    def factory(emit, cancel):  # type: ignore[no-untyped-def]
        holder["p"] = ScriptedCampaign(emit, cancel, report_path=tmp_path / "comparison-q8.json")
        return holder["p"]

    return factory


def leader_state(report_path: Path):  # type: ignore[no-untyped-def]
    """The run state of a finished candidate whose report is ``report_path`` (every window compared)."""
    from kldtui.formats.report import headline, load_report
    from kldtui.workflow.state import DiskWindow, RunState

    report = load_report(report_path)
    table = report.window_table()
    windows = {int(i): DiskWindow(int(i), d, "compared", float(k))
               for i, d, k in zip(table.window_index, table.domain, table.kl_mean, strict=True)}
    return RunState(suite_windows=len(windows), reference_ready=True, windows=windows,
                    report_path=report_path, headline=headline(report), window_range=report.window_range,
                    report=report)


def noise_model_of(work: Path) -> Path:
    """The campaign's measured noise model in the work folder ``work``: the one file of its suite,
    ``noise-model-HASH.json`` (kldtui.workspace)."""
    found = sorted(work.glob("noise-model-*.json"))
    assert len(found) == 1, found
    return found[0]
