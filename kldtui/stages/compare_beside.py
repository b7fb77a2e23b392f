"""The compare backend chosen beside this run's servers: the one sequence the pipeline and the
reference's repeat capture share (docs/DEVELOPING.md, "Compare backends").

:func:`serving_of` is a launched server of this run, while it runs, as the chooser sees it: the GPUs
its kind's sign reads from its command line and environment. :func:`choose_beside` chooses the
backend for a ``[compare]`` request beside it and beside the model servers the registered kinds find
on this host (:func:`kldtui.servers.registry.process_signs`), and says the choice as a
:class:`~kldtui.events.BackendChosen` event. The compare stage names no server kind (the noise
floor, in ``decide``, runs it); this module, beside the serve stage, does.
"""

from __future__ import annotations

from kldtui.events import EventSink
from kldtui.servers.registry import process_signs, server_kind
from kldtui.stages.compare.backends import DEFAULT_VOCAB, BackendChoice, BackendRequest, Serving, gpus_of
from kldtui.stages.serve import ServerSession


def serving_of(session: ServerSession | None, what: str) -> Serving | None:
    """The server ``session`` launched, while it runs, named ``what`` ("the candidate server"), with
    the GPUs its kind's sign reads from its command line and environment (every GPU when they are
    not known); None when the session launched none (an attached server) or its server has exited."""
    process = session.process if session is not None else None
    if session is None or process is None or process.alive() is not None:
        return None
    sign = server_kind(session.plan.kind).process_sign
    return Serving(gpus_of(sign, process.argv, session.plan.env), what)


def choose_beside(option: str, threads: int | None, serving: Serving | None, *, vocab: int | None,
                  emit: EventSink, said: str | None = None) -> BackendChoice:
    """The backend for ``option`` and ``threads`` (the profile's ``[compare]`` backend and threads)
    while ``serving`` runs (None: no server of this run on this host), for a vocabulary of ``vocab``
    (None: not known yet), leaving the GPUs of the model servers the registered kinds find on this
    host alone; said on ``emit`` unless its line is ``said`` (the line said last: a caller that
    chooses again before each window says only a change)."""
    choice = BackendRequest(option, threads, server_signs=process_signs()).choose(vocab or DEFAULT_VOCAB,
                                                                                  serving)
    event = choice.event()
    if event.line != said:
        emit(event)
    return choice


__all__ = ["choose_beside", "serving_of"]
