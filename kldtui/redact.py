"""Secrets never reach the terminal, a log, a manifest or a report.

A profile may hand the server secrets: ``vllm_args = ["--api-key", "sk-..."]``,
``env = {HF_TOKEN = "hf_..."}``. Everything kldtui prints or records about the server goes
through here first:

- the value of a secret flag (``--api-key``, ``--hf-token``, ``--token``, ``--password``, and any
  flag one of whose dash-separated words is ``key``, ``token``, ``secret``, ``password`` or
  ``passwd``, except ``...-env``/``-file``/``-path``/``-dir`` flags, which name where a secret is,
  not the secret) becomes :data:`REDACTED`, in both ``--flag V`` and ``--flag=V`` forms;
- the value of an environment variable whose name contains ``TOKEN``, ``KEY``, ``SECRET``,
  ``PASSWORD`` or ``PASSWD`` (any case) becomes :data:`REDACTED`;
- any text (the server's own log lines, which may echo its arguments) has those values replaced.

What is kept is that a value was present: the flag or variable name and the marker, never the
value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

REDACTED = "<redacted>"
SECRET_WORDS = ("key", "token", "secret", "password", "passwd")
_NOT_SECRET_LAST_WORD = ("env", "file", "path", "dir")
_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD")
_MIN_SECRET_LEN = 4  # shorter values are not searched for in text (they would match everywhere)


def is_secret_flag(flag: str) -> bool:
    """``--api-key`` yes, ``--max-num-batched-tokens`` and ``--api-key-env`` no."""
    if not flag.startswith("-"):
        return False
    words = flag.lstrip("-").split("=", 1)[0].lower().replace("_", "-").split("-")
    if not words or words[-1] in _NOT_SECRET_LAST_WORD:
        return False
    return any(w in SECRET_WORDS for w in words)


def is_secret_env(name: str) -> bool:
    upper = name.upper()
    return any(w in upper for w in _ENV_WORDS)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret flags replaced by :data:`REDACTED`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and "=" in arg and is_secret_flag(arg):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            continue
        out.append(arg)
        hide_next = is_secret_flag(arg) and "=" not in arg
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking variables replaced by :data:`REDACTED`."""
    return {k: (REDACTED if is_secret_env(k) else v) for k, v in env.items()}


def secret_values(argv: Sequence[str] = (), env: Mapping[str, str] | None = None,
                  extra: Iterable[str | None] = ()) -> list[str]:
    """The secret values in ``argv`` and ``env`` (and ``extra``), longest first, for :func:`scrub`."""
    found: set[str] = set()
    for plain, hidden in zip(argv, redact_argv(argv), strict=True):
        if plain != hidden:
            found.add(plain.split("=", 1)[1] if hidden.endswith("=" + REDACTED) else plain)
    for k, v in (env or {}).items():
        if is_secret_env(k):
            found.add(v)
    found.update(v for v in extra if v)
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret value replaced by :data:`REDACTED`."""
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text
