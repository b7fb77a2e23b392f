"""Can the Hugging Face Hub be reached from here: asked once, before work that needs it.

``prepare`` (a Hub tokenizer, Hub datasets), ``publish`` (the upload) and ``doctor`` ask
:func:`hub_unreachable` first, so an offline host gets one line at once instead of a client
retrying for a minute and then an internal error. ``HF_ENDPOINT`` (a mirror, the tests' local Hub)
and ``HF_HUB_OFFLINE`` are honoured as the Hub client honours them.
"""

from __future__ import annotations

from kldtui import settings

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 5.0


def hub_endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` when set, else huggingface.co."""
    return settings.HF_ENDPOINT.get() or DEFAULT_ENDPOINT


def hub_offline_set() -> bool:
    return settings.HF_HUB_OFFLINE.get()


def hub_unreachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the Hub answers (any HTTP status: it is there), else why not, in a few words
    (``HF_HUB_OFFLINE is set``, ``Name or service not known``, ``timed out after 5 s``)."""
    if hub_offline_set():
        return "HF_HUB_OFFLINE is set"
    import httpx

    endpoint = hub_endpoint()
    try:
        # trust_env: proxies and certificates as the Hub client would use them
        httpx.head(f"{endpoint}/", timeout=timeout, follow_redirects=False)
    except httpx.TimeoutException:
        return f"no answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        return connection_reason(exc)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def connection_reason(exc: BaseException) -> str:
    """The shortest true account of a failed connection (``Name or service not known``)."""
    text = " ".join(str(exc).split())
    if "] " in text and text.startswith("[Errno"):
        text = text.split("] ", 1)[1]
    return text[:160] or type(exc).__name__


def is_connection_error(exc: BaseException) -> bool:
    """A failure to reach a server at all (not an HTTP error status): httpx/httpcore/requests
    connection errors and timeouts, and the Hub client's offline errors."""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith(("httpx", "httpcore", "requests", "urllib3")) and \
            ("Connect" in name or "Timeout" in name or "Network" in name):
        return True
    if module.startswith("huggingface_hub") and name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"):
        return True
    return isinstance(exc, ConnectionError)


def unreachable_line(what: str, reason: str, hint: str) -> str:
    """One line for a command that needs the Hub: what needed it, why it cannot be reached, what to do."""
    return f"{what}: the Hub ({hub_endpoint()}) cannot be reached ({reason}); {hint}"
