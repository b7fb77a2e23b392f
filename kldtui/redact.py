"""Secrets never reach the terminal, a log, a manifest, a report or a published card.

A profile may hand the server secrets: ``vllm_args = ["--api-key", "sk-..."]``,
``env = {HF_TOKEN = "hf_..."}``; a manifest written by another tool may hold them in its
``runtime``. Everything kldtui prints, records or publishes about a server goes through here:

- **by name**: the value of a secret flag (``--api-key``, ``--hf-token``, ``--token``,
  ``--password``, and any flag one of whose dash-separated words is ``key``, ``token``, ``secret``,
  ``password``, ``passwd``, ``pass``, ``pat``, ``auth``, ``credential(s)`` or ``cookie``, except
  ``...-env``/``-file``/``-path``/``-dir`` flags, which name where a secret is, not the secret), and
  the value of an environment variable or JSON field whose name says the same (``HF_TOKEN``,
  ``GITHUB_PAT``, ``HF_AUTH``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASS``; ``PWD``, ``PATH`` and
  ``AUTHOR`` are not secrets), become :data:`REDACTED`;
- **by value**, whatever the name: tokens of known shapes (Hugging Face ``hf_...``, GitHub
  ``ghp_...``/``github_pat_...``, OpenAI-style ``sk-...``, AWS access key ids, Slack ``xox.-...``,
  JSON web tokens), the credential after ``Bearer``/``Basic``, and the password of a URL
  (``postgres://user:PASSWORD@host``, kept: scheme, user and host) become :data:`REDACTED`;
- any text (the server's own log lines, which may echo its arguments) has the known secret values
  and the value shapes replaced.

What is kept is that a value was present: the flag or variable name and the marker, never the
value. Redaction is applied where things are recorded (the server's runtime, the manifests'
writers) and again at publish to everything read from disk (:func:`redact_json`).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
# words of a flag whose value is a secret (a flag takes the next argument: kept narrow, so that a
# switch such as --enable-auth never hides the argument after it)
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "passphrase", "pat", "credential",
                "credentials")
# words of an environment variable or JSON field name whose value is a secret
_NAME_WORDS = (*SECRET_WORDS, "pass", "pwd", "auth", "authorization", "cookie", "apikey")
_NOT_SECRET_LAST_WORD = ("env", "file", "path", "dir")
# a name word that ends with one of these is secret too (APIKEY, HFTOKEN, DBPASSWORD)
_WORD_ENDINGS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD")
_NOT_SECRET_NAMES = {"PWD", "OLDPWD"}
_MIN_SECRET_LEN = 4  # shorter values are not searched for in text (they would match everywhere)
# characters a chunked search carries from one chunk into the next: more than any secret's shape needs
# to be told (a token's prefix and 20 to 40 characters, a private key's BEGIN line, a URL's user and
# password), so a secret a chunk's end splits is still found whole in the next chunk's text
SCAN_OVERLAP = 64 * 1024

# value shapes: (pattern, replacement, literals); each replacement keeps what is not secret; every
# match holds one of its literals, so text holding none is not searched with the pattern (a substring
# test is many times quicker than a search for a pattern that starts with \b: publish reads files of
# gigabytes for them)
_GH = tuple(f"gh{c}_" for c in "pousr")
_XOX = tuple(f"xox{c}-" for c in "abprs")
_VALUE_PATTERNS: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    # a URL's password (scheme://user:PASSWORD@host) or a lone credential (scheme://TOKEN@host)
    (re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://(?:[^\s:/@]*:))[^\s/@]+(?=@)"),
     r"\g<head>" + REDACTED, ("://",)),
    (re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?=[^\s:/@]*\d)[^\s:/@]{8,}(?=@)"),
     r"\g<head>" + REDACTED, ("://",)),
    # Authorization header values (Basic: base64 text, with a digit or padding)
    (re.compile(r"(?P<head>\b[Bb]earer\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\g<head>" + REDACTED,
     ("Bearer", "bearer")),
    (re.compile(r"(?P<head>\b[Bb]asic\s+)(?=[A-Za-z0-9+/]*[0-9=])[A-Za-z0-9+/]{8,}={0,2}"),
     r"\g<head>" + REDACTED, ("Basic", "basic")),
    # known token shapes
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), REDACTED, ("hf_",)),
    (re.compile(r"\bapi_org_[A-Za-z0-9]{20,}"), REDACTED, ("api_org_",)),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED, _GH),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"), REDACTED, ("github_pat_",)),
    (re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{20,}"), REDACTED, ("sk-",)),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED, ("AKIA", "ASIA")),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), REDACTED, _XOX),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), REDACTED, ("eyJ",)),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
     REDACTED, ("PRIVATE KEY-----",)),
)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^A-Za-z0-9]+", name) if w]


def is_secret_flag(flag: str) -> bool:
    """``--api-key`` yes, ``--max-num-batched-tokens`` and ``--api-key-env`` no."""
    if not flag.startswith("-"):
        return False
    words = flag.lstrip("-").split("=", 1)[0].lower().replace("_", "-").split("-")
    if not words or words[-1] in _NOT_SECRET_LAST_WORD:
        return False
    return any(w in SECRET_WORDS for w in words)


def is_secret_env(name: str) -> bool:
    """Whether an environment variable (or a JSON field) of this name holds a secret: a name word
    such as ``TOKEN``, ``KEY``, ``PAT``, ``AUTH``, ``PASS`` (``GITHUB_PAT``, ``HF_AUTH``,
    ``DB_PASS``), or ``TOKEN``/``KEY``/``SECRET``/``PASSWORD`` anywhere in it (``APIKEY``)."""
    if name.upper() in _NOT_SECRET_NAMES:
        return False
    words = [w.lower() for w in _words(name)]
    if len(words) > 1 and words[-1] in _NOT_SECRET_LAST_WORD:
        return False  # HF_TOKEN_PATH, API_KEY_FILE: where a secret is
    return any(w in _NAME_WORDS or w.upper().endswith(_WORD_ENDINGS) for w in words)


def redact_text(text: str) -> str:
    """``text`` with every value of a secret's shape (see the module doc) replaced."""
    for pattern, replacement, literals in _VALUE_PATTERNS:
        if any(literal in text for literal in literals):
            text = pattern.sub(replacement, text)
    return text


def looks_secret(value: str) -> bool:
    """Whether ``value`` holds something of a secret's shape."""
    return redact_text(value) != value


def chunks_look_secret(chunks: Iterable[bytes]) -> bool:
    """Whether the bytes of ``chunks`` (a file read in parts) hold something of a secret's shape, as
    :func:`looks_secret` of the whole text says, holding one chunk and :data:`SCAN_OVERLAP`
    characters at a time. Bytes that are not UTF-8 read as U+FFFD: the text around them is searched."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    for chunk in chunks:
        text = tail + decoder.decode(chunk)
        if looks_secret(text):
            return True
        tail = text[-SCAN_OVERLAP:]
    rest = decoder.decode(b"", final=True)  # a character the last chunk cut short
    return bool(rest) and looks_secret(tail + rest)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret flags replaced by :data:`REDACTED`, and every argument
    of a secret's shape redacted too. An argument after a secret flag that is itself a ``--flag``
    is not its value (``--return-tokens-as-token-ids --port 8000``: a switch named like one)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and "=" in arg and is_secret_flag(arg):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        elif is_secret_flag(arg) and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out += [arg, REDACTED]
            i += 1
        else:
            out.append(_redact_word(arg))
        i += 1
    return out


def _redact_word(value: str) -> str:
    """A value of a secret's shape: the whole value when it is one token, else the part."""
    cleaned = redact_text(value)
    if cleaned != value and " " not in value.strip() and cleaned.strip() == REDACTED:
        return REDACTED
    return cleaned


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking variables replaced by :data:`REDACTED` (by name),
    and values of a secret's shape redacted whatever the name."""
    return {k: (REDACTED if is_secret_env(k) else _redact_word(str(v))) for k, v in env.items()}


def _looks_like_argv(items: Sequence[Any]) -> bool:
    return any(isinstance(a, str) and a.startswith("-") for a in items) and all(
        isinstance(a, str) for a in items)


def redact_json(value: Any, *, name: str | None = None, by_name: bool = True) -> Any:
    """A copy of a JSON value (a manifest's ``runtime``) with secrets redacted: a field whose name
    is a secret's (:func:`is_secret_env`) holds :data:`REDACTED`, a list that looks like a command
    line is redacted as argv, every string by value. ``by_name=False`` redacts by value only (a
    whole document, whose fields such as ``token_ids_json_sha256`` or ``key`` are not secrets)."""
    if (by_name and name is not None and is_secret_env(name) and value is not None
            and not isinstance(value, bool | dict | list)):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact_json(v, name=str(k), by_name=by_name) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if by_name and _looks_like_argv(value):
            return redact_argv([str(a) for a in value])
        return [redact_json(v, by_name=by_name) for v in value]
    if isinstance(value, str):
        return _redact_word(value)
    return value


def redact_document(doc: Any) -> Any:
    """A JSON document read from disk (a manifest, capture records), as it may be published: its
    ``runtime`` redacted by name and value (:func:`redact_json`), everything else by value."""
    clean = redact_json(doc, by_name=False)
    if isinstance(doc, dict) and isinstance(clean, dict) and "runtime" in doc:
        clean["runtime"] = redact_json(doc["runtime"])
    return clean


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
        elif looks_secret(v):
            found.add(v)
    found.update(v for v in extra if v)
    return sorted((v for v in found if len(v) >= _MIN_SECRET_LEN), key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every known secret value and every value of a secret's shape replaced."""
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return redact_text(text)
