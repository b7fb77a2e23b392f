"""What to do after a run: the "next:" lines, one rule for every view.

``kldtui run --batch`` prints them under the summary; the dashboard shows them in its footer (a line
wider than the footer wrapped at spaces, its later rows indented two more; rows past the footer's
height counted on its last row) and logs each once, whole. Both hand :func:`next_steps` what the
run produced, typed: a campaign's standings (the last :class:`~kldtui.events.LeaderboardUpdated`
event: the batch reporter keeps it, the dashboard's model keeps it, a reopened dashboard gets it from
``Campaign.announce_disk_state``), else the run state of a single run
(:class:`~kldtui.workflow.state.RunState`). A campaign's commands name its ranked reports and its
measured noise model; only a single run, which has no other report to name, suggests
``OTHER/comparison.json`` for the user to fill in. Every path in a command is written for a POSIX
shell by :func:`kldtui.text.shell_arg` (quoted where it holds a space or a ``$``; ``./-x.json`` for a
name that starts with ``-``; in bash's ``$'...'`` where it holds a line break or another control
character), so that each line can be copied as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kldtui.events import LeaderboardUpdated
from kldtui.formats.suite import WINDOW_UNIT

if TYPE_CHECKING:
    from kldtui.workflow.state import RunState

# what a single run's diff line names for the report to compare with (it knows of no other)
OTHER_REPORT = "OTHER/comparison.json"


def shown_path(path: str | Path) -> str:
    """``path`` relative to the current folder when it is inside it (what a user types next), else as
    it was given, not normalized (``../a/./b`` stays what the user typed). The one rule for every
    path a view shows the user: the next-step lines, the dashboard's and the viewer's."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def command_path(path: str | Path) -> str:
    """``path`` as a command's argument to copy: :func:`shown_path`, written for the shell
    (:func:`kldtui.text.shell_arg`)."""
    from kldtui.text import shell_arg

    return shell_arg(shown_path(path))


def next_steps(result: RunState | LeaderboardUpdated | None, profile: str | None = None) -> list[str]:
    """What to do after a run, one short line each: ``result`` is a campaign's standings (its reports
    together, :func:`campaign_next_steps`) or a single run's state (its report,
    :func:`report_next_steps`); ``profile``: the profile's file, named where a line says to edit it.
    Nothing when the run left no report."""
    if isinstance(result, LeaderboardUpdated):
        return campaign_next_steps(result, profile)
    if result is None or result.report_path is None:
        return []
    unit = result.report.unit if result.report is not None else WINDOW_UNIT
    return report_next_steps(result.report_path, result.window_range, result.suite_windows, profile,
                             unit=unit)


def report_next_steps(report_path: str | Path, window_range: tuple[int, int] | None = None,
                      suite_windows: int = 0, profile: str | None = None, *,
                      unit: str = WINDOW_UNIT) -> list[str]:
    """What to do after a single run wrote ``report_path`` (the commands as this kldtui was started:
    ``.venv/bin/kldtui`` where it is not on PATH); ``unit``: what the suite's windows are called (the
    report's, :attr:`~kldtui.formats.report_model.ComparisonReport.unit`: a hidden-state suite's
    context). A quick run of a few windows also says how to run the whole suite."""
    from kldtui.text import kldtui_command

    kldtui, report = kldtui_command(), command_path(report_path)
    lines = [f"report: {shown_path(report_path)}",
             f"next: {kldtui} view {report}",
             f"      {kldtui} diff {report} {OTHER_REPORT}"]
    if window_range is not None and suite_windows and window_range[1] - window_range[0] < suite_windows:
        where = f" in {shown_path(profile)}" if profile else ""
        # finished windows are reused by the whole run
        lines.append(f"      all {suite_windows} {unit}s: [run] start_window = 0, stop_window = "
                     f"{suite_windows}{where}")
    return lines


def campaign_next_steps(standings: LeaderboardUpdated, profile: str | None = None) -> list[str]:
    """What to do after a campaign: its ranked reports together, best first, with its measured noise
    model where its file is there (a leader's repeat capture is the noise model, not a report to
    rank). Nothing while no candidate is ranked."""
    from kldtui.text import kldtui_command

    paths = [command_path(row.report_path) for row in standings.rows
             if row.rank is not None and row.repeat_of is None and row.report_path]
    if not paths:
        return []
    kldtui = kldtui_command()
    noise = standings.noise_path
    with_noise = f" --noise {command_path(noise)}" if noise is not None and Path(noise).is_file() else ""
    lines = [f"leaderboard: {shown_path(standings.path)}"] if standings.path else []
    lines.append(f"next: {kldtui} leaderboard {' '.join(paths)}{with_noise}")
    if len(paths) > 1:
        lines.append(f"      {kldtui} diff {paths[0]} {paths[1]}{with_noise}")
    lines.append(f"      {kldtui} view {paths[0]}")
    table_in = shown_path(profile) if profile else "the profile"
    lines.append(f"      another candidate: add a [[candidates]] table to {table_in} and run again (the "
                 "others are not captured again)")
    return lines
