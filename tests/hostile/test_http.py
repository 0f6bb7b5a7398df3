"""HTTP you can trust at 3 a.m.: a server on loopback that misbehaves the way wedged endpoints do —
a body shorter than promised, a status line that is not HTTP, a 100 KB header, a body that never
ends, a body trickled one byte a second, a redirect to `file:` — against the one client of `watch`,
`collect` and `pull`, and against `watch` and `collect` themselves."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forensics.capture.collect import collect
from forensics.capture.plan import Plan
from forensics.capture.http import Answer, Failure, fetch
from forensics.capture.watch import Watch, watch

METRICS = b"sglang:generation_tokens_total 5\nsglang:num_running_reqs 1\n"


def _serve(connection: socket.socket, path: str) -> None:
    send = connection.sendall
    if path == "/short":
        send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nhello")
    elif path == "/badstatus":
        send(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    elif path == "/bigheader":
        send(b"HTTP/1.1 200 OK\r\nX-Junk: " + b"a" * 100_000 + b"\r\nContent-Length: 2\r\n\r\nok")
    elif path == "/endless":
        send(b"HTTP/1.1 200 OK\r\n\r\n")
        try:
            while True:
                send(b"x" * 65536)
        except OSError:
            pass
    elif path == "/trickle":
        send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        try:
            for _ in range(100):
                send(b"x")
                time.sleep(1)
        except OSError:
            pass
    elif path == "/tofile":
        send(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n")
    else:
        send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(METRICS) + METRICS)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def handle(connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                piece = connection.recv(4096)
                if not piece:
                    return
                request += piece
            _serve(connection, request.split(b" ")[1].decode())

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # the listener closed at the end of the module
                return
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    listener.close()


@pytest.mark.parametrize(("path", "said"), [
    ("/short", "body cut short: 5 bytes, 995 more were promised"),
    ("/badstatus", "BadStatusLine"),
    ("/bigheader", "LineTooLong"),
    ("/endless", "body over 1,000,000 bytes: given up"),
    ("/trickle", "no whole answer within the deadline"),
    ("/tofile", "only http and https are followed"),
])
def test_every_misbehaviour_is_one_line_within_the_deadline(server: str, path: str, said: str) -> None:
    started = time.monotonic()
    answer = fetch(f"http://{server}{path}", deadline_s=2.0, max_bytes=1_000_000)
    assert time.monotonic() - started < 2.0 + 1.0  # the deadline holds for the whole request
    assert isinstance(answer, Failure) and said in answer.why, answer
    assert "\n" not in answer.why


def test_a_good_endpoint_answers(server: str) -> None:
    answer = fetch(f"http://{server}/metrics")
    assert isinstance(answer, Answer) and answer.body == METRICS


def test_collect_writes_down_what_it_could_not_scrape_and_stays_within_its_steps(server: str, tmp_path: Path) -> None:
    plan = Plan(tmp_path / "bundle", endpoints=[f"{server}/trickle", f"{server}/endless", f"{server}/metrics"],
                scrapes=1, titles=["^no-such-process$"], rounds=1, journal=tmp_path)
    started = time.monotonic()
    done = collect(plan)
    assert time.monotonic() - started < 60  # each scrape within its 10 s, whatever the endpoint does
    why = {item["what"]: item["why"] for item in done.missing}
    assert "no whole answer within the deadline" in why[f"metrics http://{server}/trickle"]
    assert "given up" in why[f"metrics http://{server}/endless"] or "deadline" in why[f"metrics http://{server}/endless"]
    assert any(p.endswith("scrapes.prom") for p in done.written)


def test_watch_keeps_polling_through_failures_and_says_so(server: str, tmp_path: Path) -> None:
    log = io.StringIO()
    plan = Plan(tmp_path / "bundles", scrapes=1, rounds=1)
    runner = threading.Thread(target=watch, args=(Watch([f"{server}/short", f"{server}/badstatus",
                                                         f"{server}/metrics"], plan, after_s=3600, poll_s=0.2,
                                                        log=log),), daemon=True)
    runner.start()
    time.sleep(3)
    assert runner.is_alive()  # no traceback ended it
    said = log.getvalue()
    assert f"{server}/short: body cut short" in said and "BadStatusLine" in said and "still polling" in said
    assert said.count("body cut short") == 1  # said once while it keeps failing the same way
