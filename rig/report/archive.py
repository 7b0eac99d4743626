"""Post a run's export records (rig.report.export) to an HTTP endpoint, in the two shapes
the field's archives take (issue 41 item 5):

- `opensearch`: one `POST URL/_bulk` (Content-Type application/x-ndjson), an
  `{"index": {"_index": INDEX}}` line before each record, as OpenSearch and
  Elasticsearch take it (perfSONAR 5 keeps its results in OpenSearch). The answer's
  `errors: true` is a failure naming the first refused record's reason.
- `http`: one `POST URL` per record (application/json), as perfSONAR's pScheduler HTTP
  archiver sends each result (a Logstash http input or any collector takes it).

A token file (`--token-file`) is sent as `Authorization: Bearer <token>`. Every request
has a deadline (`timeout_s`); a refused or failed post is one line naming the URL and the
status, never a traceback. Only urllib: nothing to install.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rig.errors import InputError, RigError

SHAPES = ("opensearch", "http")
BATCH = 500          # records per _bulk request


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        tok = Path(path).read_text().strip()
    except OSError as e:
        raise InputError(f"cannot read the token ({e.strerror})", key="--token-file",
                         value=path) from None
    if not tok or any(c in tok for c in "\r\n"):
        raise InputError("expected one line holding the token", key="--token-file", value=path)
    return tok


def _post(url: str, body: bytes, ctype: str, token: str | None, timeout_s: float) -> Any:
    headers = {"Content-Type": ctype, "User-Agent": "rig-archive"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:   # noqa: S310 (http(s) only)
            text = resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        raise RigError(f"archive: {url} answered {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RigError(f"archive: {url} did not take the records ({reason})") from None
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return text


def _first_error(ans: dict[str, Any]) -> str:
    """The first refused item's error of a _bulk answer ({"items": [{"index": {...}}]})."""
    for item in ans.get("items") or []:
        for result in (item or {}).values():
            if isinstance(result, dict) and result.get("error"):
                return json.dumps(result["error"])
    return "errors: true"


def post(recs: list[dict[str, Any]], url: str, *, shape: str = "opensearch",
         index: str = "rig-transfers", token_file: str | None = None,
         timeout_s: float = 30.0) -> int:
    """Post `recs`; return how many the endpoint took."""
    if shape not in SHAPES:
        raise InputError(f"not one of {', '.join(SHAPES)}", key="--shape", value=shape)
    if not url.startswith(("http://", "https://")):
        raise InputError("expected an http:// or https:// URL", key="--post", value=url)
    token = _token(token_file)
    if shape == "http":
        for r in recs:
            _post(url, json.dumps(r, sort_keys=True).encode(), "application/json", token,
                  timeout_s)
        return len(recs)
    bulk = url.rstrip("/") + "/_bulk"
    action = json.dumps({"index": {"_index": index}})
    for i in range(0, len(recs), BATCH):
        body = "".join(f"{action}\n{json.dumps(r, sort_keys=True)}\n"
                       for r in recs[i:i + BATCH]).encode()
        ans = _post(bulk, body, "application/x-ndjson", token, timeout_s)
        if isinstance(ans, dict) and ans.get("errors"):
            raise RigError(f"archive: {bulk} refused records ({_first_error(ans)[:200]})")
    return len(recs)
