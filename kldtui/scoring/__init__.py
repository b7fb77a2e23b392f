"""Score mode's server side (issue 16): the per-request scoring session a server process runs.

Below the two servers that use it (the vLLM hook, :mod:`kldtui.hook`, and the embedded server,
:mod:`kldtui.embedded`), above the file formats it reads and writes (:mod:`kldtui.formats.scores`,
:mod:`kldtui.formats.suite`): threads, locks and per-request state live here, not in formats.
"""

from kldtui.scoring.session import ScoreFailed, ScoreRows, ScoreSession, ScoreWrite

__all__ = ["ScoreFailed", "ScoreRows", "ScoreSession", "ScoreWrite"]
