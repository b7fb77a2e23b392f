"""Names of a hidden-state suite's selections without NumPy (the CLI and the profile read them at
start-up), and the one parser of a context filter's values (``kldtui compare/download/verify
--context-filter/--stratum``, the profile's ``[run] context_filter``/``strata``); the format itself is
:mod:`kldtui.formats.fidelity`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from kldtui.errors import BadInput

PARTITION_NAMES = ("analysis", "qualification")
# the published comparator's context filters
CONTEXT_FILTERS = ("all", "analysis", "qualification", "sentinel", "non-sentinel")


def parse_context_filter(value: object, origin: str) -> str:
    """``value`` as a context filter's name; BadInput in one line naming ``origin`` (the flag or
    the profile key that gave it) and the names it may take."""
    if isinstance(value, str) and value in CONTEXT_FILTERS:
        return value
    close = difflib.get_close_matches(str(value), CONTEXT_FILTERS, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise BadInput(f"{origin} {str(value)[:40]!r} is not a context filter; {hint}set one of "
                   f"{', '.join(CONTEXT_FILTERS)}")


def parse_strata(values: Iterable[object], origin: str) -> tuple[str, ...]:
    """Allocation strata's names (a hidden-state suite's domains), each once; BadInput in one line
    naming ``origin`` otherwise. Whether the suite has them is said when it is read
    (:meth:`kldtui.formats.fidelity.ContextFilter.apply`)."""
    out: list[str] = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise BadInput(f"{origin}: {str(value)[:40]!r} is not a stratum name; give the names of the "
                           "suite's allocation strata (its domains)")
        if value in out:
            raise BadInput(f"{origin}: stratum {value!r} is given twice; give each once")
        out.append(value)
    return tuple(out)


__all__ = ["CONTEXT_FILTERS", "PARTITION_NAMES", "parse_context_filter", "parse_strata"]
