"""Is a server ready? ``GET /health`` answers 200 and ``GET /v1/models`` lists the served name:
the OpenAI-compatible handshake every kind of server answers (vLLM, the embedded server, an
attached one). The launcher polls it while its server loads; an attached server must pass it at once.
"""

from __future__ import annotations

from typing import Any

from kldtui.errors import StageFailed
from kldtui.events import EventSink, ServerReady, StageName, null_sink

STAGE: StageName = "server"


def probe_models(client: Any) -> list[str] | None:
    """The served model ids once ``/health`` is 200 and ``/v1/models`` answers; else None."""
    import httpx

    try:
        health = client.get("/health")
        if health.status_code != 200:
            return None
        models = client.get("/v1/models")
        if models.status_code in (401, 403):
            raise StageFailed(f"{client.base_url}: the server refused the API key (HTTP "
                              f"{models.status_code} on /v1/models); set the environment variable "
                              "named by [candidate] api_key_env to the server's key")
        if models.status_code != 200:
            return None
        data = models.json().get("data", [])
        return [str(m.get("id")) for m in data if isinstance(m, dict)]
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def check_attached(base_url: str, served_model_name: str, *, api_key: str | None = None,
                   emit: EventSink = null_sink, timeout: float = 10.0) -> str:
    """Attach mode: the server at ``base_url`` must be ready and serve the name; return the URL."""
    import httpx

    url = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=url, timeout=timeout, headers=headers, trust_env=False) as client:
        served = probe_models(client)
    if served is None:
        raise StageFailed(f"{url}: no ready server (GET /health and /v1/models did not both "
                          "answer 200); start it first or fix [candidate] url")
    if served_model_name not in served:
        raise StageFailed(f"{url} serves {', '.join(served) or 'no model'}, not "
                          f"{served_model_name!r}; fix served_model_name in the profile")
    emit(ServerReady(STAGE, url=url, served_model_name=served_model_name, pid=None))
    return url
