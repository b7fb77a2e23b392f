"""A small Hugging Face Hub look-alike on loopback, for testing downloads with the real client.

It serves one or more dataset repositories from local folders the way the Hub does for the
endpoints ``huggingface_hub`` uses to download files:

- ``HEAD``/``GET /datasets/{repo_id}/resolve/{revision}/{path}``: a small ("regular") file is
  answered directly, with ``ETag`` (git blob SHA-1), ``X-Repo-Commit`` and ``Content-Length``;
  a large ("LFS") file is answered with a ``302`` to a second origin (the "CDN", another port)
  carrying ``X-Linked-Etag`` (the SHA-256), ``X-Linked-Size`` and ``X-Repo-Commit``, exactly as
  the Hub does. A missing file is ``404`` with ``X-Error-Code: EntryNotFound``, an unknown
  revision ``RevisionNotFound``, an unknown repository ``RepoNotFound``.
- ``GET /api/datasets/{repo_id}/revision/{revision}``: repository info with ``sha`` and
  ``siblings``.
- ``GET /api/datasets/{repo_id}/tree/{revision}[/{folder}]``: the files under a folder, always
  recursively, in one page (what ``snapshot_download`` lists: a full snapshot, ``hf download``),
  each with its size, git blob ``oid`` and, for an LFS file, ``lfs`` {``oid`` (SHA-256), ``size``,
  ``pointerSize``}.
- the CDN origin: ``HEAD``/``GET /blobs/{sha256}`` with ``Range: bytes=N-`` / ``N-M`` support.

Uploads (the endpoints ``huggingface_hub`` uses without ``hf_xet``, i.e. with
``HF_HUB_DISABLE_XET``): ``POST /api/repos/create`` (``409`` when it exists), ``POST
/api/validate-yaml``, ``POST /api/datasets/{repo_id}/preupload/{revision}`` (``.safetensors`` are
"lfs", the rest "regular"; the ``oid`` of a file already committed lets the client skip it),
the LFS batch ``POST /datasets/{repo_id}.git/info/lfs/objects/batch`` (objects the server has get
no actions), the basic-transfer ``PUT /upload/{sha256}`` on the CDN origin (the body's SHA-256 is
checked) and ``POST /api/datasets/{repo_id}/commit/{revision}`` (NDJSON; files are written into
the repository folder, the commit id changes). Xet storage and multipart LFS are not served.

Files are read from disk on every request, so a test can corrupt or delete one while the
server runs. Every request lands in :attr:`HubServer.log`. :meth:`HubServer.drop_after`
makes the next ``GET`` of a file close the connection after a number of body bytes;
:meth:`HubServer.hold_uploads_after` makes LFS uploads wait, unanswered, after a number of them
(a test kills its client then, in mid-upload), :meth:`HubServer.hold_files_after` file downloads
after a number of files (a test kills its client in mid-download). A repository served anew
(:meth:`HubServer.add_dataset` with ``keep_older``) still serves its earlier commit by its id, as the
Hub serves a commit ``main`` has moved past, until :meth:`HubServer.forget_commit` (a history
rewritten).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors",)


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    origin: str  # "hub" or "cdn"
    method: str
    path: str  # repository file path for hub/cdn file requests, else the URL path
    url: str
    range: str | None
    status: int
    body_bytes: int
    authorization: str | None


@dataclass
class _Repo:
    repo_id: str
    root: Path
    commit: str


def _lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file the Hub keeps in git for an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """Start with ``with HubServer() as hub: hub.add_dataset(repo_id, folder)``."""

    def __init__(self) -> None:
        self._repos: dict[str, _Repo] = {}
        self._older: dict[str, dict[str, _Repo]] = {}  # repo_id -> commit -> what it served then
        self._blobs: dict[str, tuple[Path, str]] = {}  # sha256 -> (repository folder, path)
        self._lock = threading.Lock()
        self._drops: dict[str, int] = {}
        self._uploads: dict[str, bytes] = {}  # sha256 -> bytes PUT to the CDN, not yet committed
        self._hold_at: int | None = None  # uploads stored before further PUTs wait (hold_uploads_after)
        self._files_sent = 0  # file bodies sent (GETs of repository files, from the Hub or the CDN)
        self._files_hold_at: int | None = None  # files sent before further GETs wait (hold_files_after)
        self._held = threading.Event()
        self._released = threading.Event()
        self._made: list[Path] = []  # folders of repositories created through the API
        self.commits: list[dict[str, object]] = []  # every commit: repo_id, header, paths
        self.log: list[Request] = []
        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self._cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self._hub.daemon_threads = True
        self._cdn.daemon_threads = True
        self._threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
                         for s in (self._hub, self._cdn)]

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> HubServer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        for s in (self._hub, self._cdn):
            s.shutdown()
            s.server_close()
        for made in self._made:
            shutil.rmtree(made, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- content ---------------------------------------------------------------------------------
    def add_dataset(self, repo_id: str, root: str | Path, commit: str | None = None, *,
                    keep_older: bool = False) -> str:
        """Serve ``root`` as dataset ``repo_id`` (at ``main``); returns the commit id it is served under.
        ``keep_older``: what the repository served before stays served by its commit id."""
        root = Path(root)
        if commit is None:
            digest = hashlib.sha1(repo_id.encode())
            for f in sorted(p for p in root.rglob("*") if p.is_file()):
                digest.update(str(f.relative_to(root)).encode())
                digest.update(f.read_bytes())
            commit = digest.hexdigest()
        with self._lock:
            older = self._repos.get(repo_id)
            if keep_older and older is not None:
                self._older.setdefault(repo_id, {})[older.commit] = older
            self._repos[repo_id] = _Repo(repo_id, root, commit)
        return commit

    def forget_commit(self, repo_id: str, commit: str) -> None:
        """An earlier commit kept by :meth:`add_dataset` is no longer served (``RevisionNotFound``)."""
        with self._lock:
            self._older.get(repo_id, {}).pop(commit, None)

    def drop_after(self, path: str, nbytes: int) -> None:
        """The next GET of ``path`` (a repository file path) stops after ``nbytes`` body bytes."""
        with self._lock:
            self._drops[path] = nbytes

    def hold_uploads_after(self, count: int) -> None:
        """Once ``count`` more LFS uploads are stored, every further PUT waits, unanswered and not
        stored, until :meth:`release` (then fails): a client can be killed in mid-upload."""
        with self._lock:
            self._hold_at = len(self._uploads) + count
            self._released.clear()
            self._held.clear()

    def hold_files_after(self, count: int) -> None:
        """Once ``count`` more file bodies are sent (a GET of a repository file, from the Hub or the
        CDN), every further such GET waits, unanswered, until :meth:`release` (then fails): a client
        can be killed after a number of files."""
        with self._lock:
            self._files_hold_at = self._files_sent + count
            self._released.clear()
            self._held.clear()

    def wait_held(self, timeout: float) -> bool:
        """Whether a PUT or a GET is waiting (see :meth:`hold_uploads_after`, :meth:`hold_files_after`)
        within ``timeout`` seconds."""
        return self._held.wait(timeout)

    def release(self) -> None:
        with self._lock:
            self._hold_at = None
            self._files_hold_at = None
        self._released.set()

    @property
    def uploads_stored(self) -> int:
        """LFS objects the CDN holds (uploaded, committed or not)."""
        with self._lock:
            return len(self._uploads)

    def requests(self, *, method: str | None = None, path: str | None = None,
                 origin: str | None = None) -> list[Request]:
        with self._lock:
            items = list(self.log)
        return [r for r in items if (method is None or r.method == method)
                and (path is None or r.path == path) and (origin is None or r.origin == origin)]

    def fetched_files(self) -> set[str]:
        """Repository paths whose bytes were sent by a GET (hub or CDN)."""
        return {r.path for r in self.requests(method="GET") if r.body_bytes > 0 and r.status in (200, 206)}

    # -- internals -------------------------------------------------------------------------------
    def _record(self, req: Request) -> None:
        with self._lock:
            self.log.append(req)

    def _take_drop(self, path: str) -> int | None:
        with self._lock:
            return self._drops.pop(path, None)

    def _handler(self, origin: str) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                self._dispatch(head=True)

            def do_GET(self) -> None:  # noqa: N802
                self._dispatch(head=False)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server._post(self, urlsplit(self.path).path, body)

            def do_PUT(self) -> None:  # noqa: N802
                # the hold in force when the request arrived decides it: a request whose body was read
                # before release() but checked after it (a slow thread under load) is held all the same,
                # so no more than the held number is ever stored
                with server._lock:
                    limit = server._hold_at
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                m = re.fullmatch(r"/upload/([0-9a-f]{64})", urlsplit(self.path).path)
                if origin != "cdn" or not m:
                    return self._reply(404, {}, b"not found", False, self.path)
                if hashlib.sha256(body).hexdigest() != m.group(1):
                    return self._reply(400, {}, b"sha256 mismatch", False, self.path)
                with server._lock:
                    hold = limit is not None and len(server._uploads) >= limit
                    if not hold:
                        server._uploads[m.group(1)] = body
                if hold:
                    server._held.set()
                    server._released.wait(60)
                    return self._reply(503, {}, b"held", False, self.path)
                self._reply(200, {"ETag": f'"{m.group(1)}"'}, b"", False, self.path)

            # The request path here is the repository file path when known.
            def _dispatch(self, head: bool) -> None:
                url = urlsplit(self.path)
                if origin == "cdn":
                    self._cdn(url.path, head)
                else:
                    self._hub(url.path, head)

            def _reply(self, status: int, headers: dict[str, str], body: bytes, head: bool,
                       path: str) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                sent = 0
                if not head:
                    self.wfile.write(body)
                    sent = len(body)
                self._log(path, status, sent)

            def _log(self, path: str, status: int, sent: int) -> None:
                server._record(Request(origin, self.command, path, self.path, self.headers.get("Range"),
                                       status, sent, self.headers.get("Authorization")))

            def _error(self, status: int, code: str, head: bool, path: str,
                       commit: str | None = None) -> None:
                headers = {"X-Error-Code": code, "X-Error-Message": code,
                           "Content-Type": "application/json"}
                if commit:
                    headers["X-Repo-Commit"] = commit
                self._reply(status, headers, json.dumps({"error": code}).encode(), head, path)

            def _hub(self, path: str, head: bool) -> None:
                m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/revision/([^/]+)", path)
                if m:
                    return self._api_revision(unquote(m.group(1)), unquote(m.group(2)), head, path)
                m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/tree/([^/]+)(?:/(.+))?", path)
                if m:
                    return self._api_tree(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3) or ""),
                                          head, path)
                m = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if not m:
                    return self._error(404, "NotFound", head, path)
                repo_id, rev, file_path = unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3))
                repo = self._repo_at(repo_id, rev, head, file_path)
                if repo is None:
                    return None
                target = (repo.root / file_path).resolve()
                if not target.is_relative_to(repo.root.resolve()) or not target.is_file():
                    return self._error(404, "EntryNotFound", head, file_path, repo.commit)
                data = target.read_bytes()
                if file_path.endswith(LFS_SUFFIXES):
                    sha = hashlib.sha256(data).hexdigest()
                    with server._lock:
                        server._blobs[sha] = (repo.root, file_path)
                    pointer = _lfs_pointer(sha, len(data)).decode()
                    headers = {
                        "Location": f"{server.cdn}/blobs/{sha}",
                        "X-Repo-Commit": repo.commit,
                        "ETag": f'"{_git_blob_sha1(pointer.encode())}"',
                        "X-Linked-Etag": f'"{sha}"',
                        "X-Linked-Size": str(len(data)),
                    }
                    return self._reply(302, headers, b"", head, file_path)
                headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{_git_blob_sha1(data)}"',
                           "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
                self._send_file(data, headers, head, file_path)

            def _repo_at(self, repo_id: str, rev: str, head: bool, path: str) -> _Repo | None:
                """The repository served at ``rev``, or None once the Hub's 404 is sent."""
                repo = server._repos.get(repo_id)
                if repo is None:
                    self._error(404, "RepoNotFound", head, path)
                elif rev not in ("main", repo.commit):
                    older = server._older.get(repo_id, {}).get(rev)
                    if older is None:
                        self._error(404, "RevisionNotFound", head, path)
                    return older
                return repo

            def _api_tree(self, repo_id: str, rev: str, folder: str, head: bool, path: str) -> None:
                repo = self._repo_at(repo_id, rev, head, path)
                if repo is None:
                    return
                base = (repo.root / folder).resolve()
                if not base.is_relative_to(repo.root.resolve()) or not base.is_dir():
                    return self._error(404, "EntryNotFound", head, path, repo.commit)
                entries: list[dict[str, object]] = []
                for f in sorted(p for p in base.rglob("*") if p.is_file()):
                    data = f.read_bytes()
                    rel = f.relative_to(repo.root).as_posix()
                    entry: dict[str, object] = {"type": "file", "path": rel, "size": len(data),
                                                "oid": _git_blob_sha1(data)}
                    if rel.endswith(LFS_SUFFIXES):
                        sha = hashlib.sha256(data).hexdigest()
                        pointer = _lfs_pointer(sha, len(data))
                        entry.update(oid=_git_blob_sha1(pointer),
                                     lfs={"oid": sha, "size": len(data), "pointerSize": len(pointer)})
                    entries.append(entry)
                self._reply(200, {"Content-Type": "application/json", "X-Repo-Commit": repo.commit},
                            json.dumps(entries).encode(), head, path)

            def _api_revision(self, repo_id: str, rev: str, head: bool, path: str) -> None:
                repo = self._repo_at(repo_id, rev, head, path)
                if repo is None:
                    return
                siblings = [{"rfilename": str(p.relative_to(repo.root)), "size": p.stat().st_size}
                            for p in sorted(repo.root.rglob("*")) if p.is_file()]
                doc = {"id": repo_id, "sha": repo.commit, "private": False, "siblings": siblings}
                self._reply(200, {"Content-Type": "application/json", "X-Repo-Commit": repo.commit},
                            json.dumps(doc).encode(), head, path)

            def _cdn(self, path: str, head: bool) -> None:
                m = re.fullmatch(r"/blobs/([0-9a-f]{64})", path)
                entry = server._blobs.get(m.group(1)) if m else None
                if entry is None:
                    return self._reply(404, {}, b"not found", head, path)
                target = entry[0] / entry[1]
                if not target.is_file():
                    return self._reply(404, {}, b"not found", head, entry[1])
                data = target.read_bytes()
                headers = {"ETag": f'"{m.group(1)}"', "Accept-Ranges": "bytes",  # type: ignore[union-attr]
                           "Content-Type": "application/octet-stream"}
                self._send_file(data, headers, head, entry[1])

            def _send_file(self, data: bytes, headers: dict[str, str], head: bool, path: str) -> None:
                if not head:
                    with server._lock:
                        limit = server._files_hold_at
                        hold = limit is not None and server._files_sent >= limit
                        server._files_sent += 0 if hold else 1
                    if hold:
                        server._held.set()
                        server._released.wait(60)
                        return self._reply(503, {}, b"held", False, path)
                status, start, end = 200, 0, len(data)
                rng = self.headers.get("Range")
                if rng:
                    m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
                    if not m or int(m.group(1)) >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return self._log(path, 416, 0)
                    start = int(m.group(1))
                    end = min(len(data), int(m.group(2)) + 1) if m.group(2) else len(data)
                    status = 206
                    headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"}
                body = data[start:end]
                drop = None if head else server._take_drop(path)
                if drop is None or drop >= len(body):
                    return self._reply(status, headers, body, head, path)
                # Promise the whole body, send part of it, then cut the connection.
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:drop])
                self.wfile.flush()
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._log(path, status, drop)

        return Handler


    # -- uploads ---------------------------------------------------------------------------------
    def repo_folder(self, repo_id: str) -> Path:
        return self._repos[repo_id].root

    def _post(self, h: BaseHTTPRequestHandler, path: str, body: bytes) -> None:
        reply = h._reply  # type: ignore[attr-defined]

        def send(status: int, doc: object, headers: dict[str, str] | None = None) -> None:
            reply(status, {"Content-Type": "application/json", **(headers or {})},
                  json.dumps(doc).encode(), False, path)

        if path == "/api/repos/create":
            doc = json.loads(body)
            repo_id = f"{doc['organization']}/{doc['name']}" if doc.get("organization") else doc["name"]
            url = f"{self.endpoint}/datasets/{repo_id}"
            with self._lock:  # (reply outside the lock: logging the request takes it too)
                exists = repo_id in self._repos
                if not exists:
                    root = Path(tempfile.mkdtemp(prefix="hub-repo-"))
                    self._made.append(root)
                    self._repos[repo_id] = _Repo(repo_id, root, hashlib.sha1(repo_id.encode()).hexdigest())
            if exists:
                return send(409, {"error": "You already created this dataset repo", "url": url},
                            {"X-Error-Message": "You already created this dataset repo"})
            return send(200, {"url": url, "name": repo_id})
        if path == "/api/validate-yaml":
            return send(200, {"errors": [], "warnings": []})
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(preupload|commit)/([^/]+)", path)
        m_lfs = re.fullmatch(r"/datasets/([^/]+/[^/]+)\.git/info/lfs/objects/batch", path)
        repo_id = unquote((m or m_lfs).group(1)) if (m or m_lfs) else ""  # type: ignore[union-attr]
        repo = self._repos.get(repo_id)
        if repo is None:
            return send(404, {"error": "RepoNotFound"}, {"X-Error-Code": "RepoNotFound"})
        if m_lfs:
            objects = []
            for obj in json.loads(body)["objects"]:
                have = obj["oid"] in self._uploads or any(
                    p.is_file() and p.name.endswith(LFS_SUFFIXES)
                    and hashlib.sha256(p.read_bytes()).hexdigest() == obj["oid"]
                    for p in repo.root.rglob("*"))
                entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if not have:
                    entry["actions"] = {"upload": {"href": f"{self.cdn}/upload/{obj['oid']}"}}
                objects.append(entry)
            return send(200, {"transfer": "basic", "objects": objects})
        assert m is not None
        if unquote(m.group(3)) not in ("main", repo.commit):
            return send(404, {"error": "RevisionNotFound"}, {"X-Error-Code": "RevisionNotFound"})
        if m.group(2) == "preupload":
            files = []
            for f in json.loads(body)["files"]:
                lfs = f["path"].endswith(LFS_SUFFIXES)
                target = repo.root / f["path"]
                oid = None
                if target.is_file():
                    data = target.read_bytes()
                    oid = hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data)
                files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                              "shouldIgnore": False, "oid": oid})
            return send(200, {"files": files, "commitOid": repo.commit})
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next(x["value"] for x in lines if x["key"] == "header")
        writes: dict[str, bytes] = {}
        for item in lines:
            value = item["value"]
            if item["key"] == "file":
                writes[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                data = self._uploads.get(value["oid"])
                if data is None:
                    return send(400, {"error": f"LFS object {value['oid']} was not uploaded"})
                writes[value["path"]] = data
        root = repo.root.resolve()
        for rel, data in writes.items():
            target = (root / rel).resolve()
            if not target.is_relative_to(root):
                return send(400, {"error": f"bad path {rel}"})
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        digest = hashlib.sha1(repo.commit.encode())
        for rel in sorted(writes):
            digest.update(rel.encode() + writes[rel])
        with self._lock:
            repo.commit = digest.hexdigest()
            self.commits.append({"repo_id": repo_id, "header": header, "paths": sorted(writes)})
        send(200, {"commitUrl": f"{self.endpoint}/datasets/{repo_id}/commit/{repo.commit}",
                   "commitOid": repo.commit, "pullRequestUrl": None})


def dead_endpoint() -> str:
    """An http URL on loopback where nothing listens (the port was bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def make_dataset(root: str | Path, *, windows: int = 4, context_length: int = 33, vocab: int = 96,
                 seed: int = 0) -> Path:
    """Write a small dataset root with the published layout: suite + tokens + ref/ logits."""
    import numpy as np

    from kldtui.formats.logits_writer import write_logits_array, write_logits_manifest
    from kldtui.formats.suite_writer import write_suite

    root = Path(root)
    rng = np.random.default_rng(seed)
    domains = ["prose", "code", "instruction"]
    specs = [(domains[min(i * 3 // max(windows, 1), 2)], rng.integers(0, vocab, context_length).tolist())
             for i in range(windows)]
    suite = write_suite(root, specs)
    written = [write_logits_array(root / "ref", w, rng.normal(size=(context_length - 1, vocab))
                                  .astype(np.float32), context_length) for w in suite.windows]
    write_logits_manifest(root / "ref", suite, written, kind="reference",
                          runtime={"model": "synthetic"}, window_range=(0, windows))
    (root / "capture-mixed32-reference.json").write_text("[]\n")
    return root
