"""The one HTTP client of `watch`, `collect` and `pull`: an answer or one line saying why not, within
a deadline for the whole request and a cap on the body.

A wedged host's endpoints misbehave in every way a socket can: they promise 1,000 bytes and send 5,
answer with a status line that is not HTTP, send a 100 KB header, send a body that never ends, or
trickle one byte a second. `fetch` bounds each: the deadline covers connecting, the headers and
the body together (a socket timeout alone bounds each read, not the whole); the body is read in
pieces and given up past `max_bytes`; every `http.client`, `socket` and `ssl` error becomes a
`Failure` whose `why` is one line. Redirects are followed at most `max_redirects` times, and only
to http or https.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field

DEADLINE_S = 10.0
MAX_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 3
PIECE = 64 * 1024
_FAILURES = (http.client.HTTPException, OSError, ssl.SSLError, ValueError, UnicodeError)


@dataclass(frozen=True)
class Answer:
    """A whole answer: status, headers (lower-case names) and body."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Failure:
    """No whole answer, and why, in one line."""

    url: str
    why: str
    status: int | None = None
    body: bytes = field(default=b"", repr=False)  # what an error status came with


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


def fetch(url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None,
          deadline_s: float = DEADLINE_S, max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS
          ) -> Answer | Failure:
    """`url`'s answer, or a Failure saying why: never an exception, never past the deadline or the cap."""
    end = time.monotonic() + deadline_s
    for _ in range(max_redirects + 1):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            return Failure(url, f"not an http(s) URL: {url[:200]!r}")
        got = _once(parsed, method, body, headers or {}, end, max_bytes)
        if isinstance(got, Failure) or got.status not in (301, 302, 303, 307, 308):
            return got
        target = got.headers.get("location", "")
        url = urllib.parse.urljoin(url, target)
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            return Failure(url, f"redirected to {target[:200]!r}: only http and https are followed", got.status)
    return Failure(url, f"more than {max_redirects} redirects")


def _once(parsed: urllib.parse.SplitResult, method: str, body: bytes | None, headers: dict[str, str], end: float,
          max_bytes: int) -> Answer | Failure:
    url = urllib.parse.urlunsplit(parsed)
    left = end - time.monotonic()
    if left <= 0:
        return Failure(url, "no time left before the deadline")
    kind = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    connection = kind(parsed.hostname, parsed.port, timeout=left)  # type: ignore[arg-type]
    try:
        path = urllib.parse.urlunsplit(("", "", parsed.path or "/", parsed.query, ""))
        connection.request(method, path, body=body, headers={"User-Agent": "forensics", **headers})
        response = connection.getresponse()
        pieces, size = [], 0
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return Failure(url, f"no whole answer within the deadline ({size:,} bytes of the body by then)",
                               response.status)
            if connection.sock is not None:
                connection.sock.settimeout(left)
            piece = response.read1(PIECE) if hasattr(response, "read1") else response.read(PIECE)
            if not piece:
                if response.length:  # the server promised more than it sent
                    return Failure(url, f"body cut short: {size:,} bytes, {response.length:,} more were promised",
                                   response.status)
                break
            size += len(piece)
            if size > max_bytes:
                return Failure(url, f"body over {max_bytes:,} bytes: given up", response.status)
            pieces.append(piece)
        answer = Answer(url, response.status, {k.lower(): v for k, v in response.getheaders()}, b"".join(pieces))
    except socket.timeout:
        return Failure(url, "no whole answer within the deadline")
    except _FAILURES as error:
        return Failure(url, _one_line(error))
    finally:
        connection.close()
    if answer.status >= 400:
        return Failure(url, f"HTTP {answer.status}", answer.status, answer.body[:4096])
    return answer
