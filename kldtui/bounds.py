"""The values a flag or a profile key may take where a bad one would otherwise run out of memory,
hang, crash a library or give a wrong figure silently: one rule each, one-line BadInput naming
where the value came from (``--bootstrap-samples``, ``[compare] bootstrap_samples`` of a profile).

- bootstrap resamples: 2 .. :data:`MAX_BOOTSTRAP_SAMPLES` (10,000,000,000 asked for 80 GB);
- seeds: whole numbers 0 .. 2**63 - 1 (NumPy refuses negative seeds with a traceback);
- timeouts: finite seconds above 0 (NaN never expires, 0 fails every connection at once);
- server URLs: ``http(s)://HOST[:PORT][/PATH]`` with a port 1-65535;
- the embedded server's model: seed 0 .. 2**32 - 1, vocabulary 2 .. :data:`MAX_EMBEDDED_VOCAB`,
  perturbation a finite number >= 0 (NaN and -1 gave a KL of 0).
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from kldtui.errors import BadInput

MAX_BOOTSTRAP_SAMPLES = 1_000_000
MAX_SEED = 2**63 - 1
MAX_TIMEOUT_S = 30 * 24 * 3600.0  # a month: anything longer is a typo
MAX_EMBEDDED_VOCAB = 1_048_576
MAX_EMBEDDED_SEED = 2**32 - 1


def _whole_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float:
    """``value`` as a float; NaN for anything that is not a number (a boolean included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def bootstrap_samples(value: object, where: str) -> int:
    n = _whole_number(value)
    if n is None or not 2 <= n <= MAX_BOOTSTRAP_SAMPLES:
        raise BadInput(f"{where} {value!r}: bootstrap resamples must be a whole number from 2 to "
                       f"{MAX_BOOTSTRAP_SAMPLES:,} (10,000 is plenty for a 95 % interval)")
    return n


def seed(value: object, where: str, maximum: int = MAX_SEED) -> int:
    n = _whole_number(value)
    if n is None or not 0 <= n <= maximum:
        raise BadInput(f"{where} {value!r}: a seed is a whole number from 0 to {maximum}")
    return n


def timeout(value: object, where: str) -> float:
    number = _number(value)
    if not (math.isfinite(number) and 0 < number <= MAX_TIMEOUT_S):
        raise BadInput(f"{where} {value!r}: a timeout is a number of seconds above 0 and at most "
                       f"{MAX_TIMEOUT_S:g} (not NaN, not infinite)")
    return number


def non_negative(value: object, where: str) -> float:
    number = _number(value)
    if not (math.isfinite(number) and number >= 0):
        raise BadInput(f"{where} {value!r}: expected a finite number >= 0")
    return number


def whole_in(value: object, where: str, low: int, high: int, what: str = "a whole number") -> int:
    n = _whole_number(value)
    if n is None or not low <= n <= high:
        raise BadInput(f"{where} {value!r}: expected {what} from {low:,} to {high:,}")
    return n


def server_url(value: str, where: str) -> str:
    """``value`` when it is ``http(s)://HOST[:PORT][/PATH]``; BadInput otherwise."""
    problem = None
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError for a port that is not a number or outside 0-65535
    except ValueError as exc:
        parts, port, problem = None, None, str(exc)
    if problem is None and parts is not None:
        if parts.scheme not in ("http", "https"):
            problem = "the scheme must be http:// or https://"
        elif not parts.hostname:
            problem = "there is no host"
        elif port == 0:
            problem = "port 0 is not a server's port"
        elif any(c.isspace() for c in value):
            problem = "it holds spaces"
    if problem is not None:
        raise BadInput(f"{where} {value!r}: not a server URL ({problem}); give http://HOST:PORT, e.g. "
                       "http://127.0.0.1:8000")
    return value
