"""`docker compose logs` (and `up`) put the container's name, padded with spaces, and "| " before
every line (`sglang-1  | [2025-10-29 11:25:58 TP3] Watchdog timeout …`). Readers take it off only
when nearly every written line has it (COMPOSE_SHARE): a log of its own may write "INFO | …", which
is a level, not a container."""

from __future__ import annotations

import re

COMPOSE = r"^([A-Za-z0-9][\w.-]*) +\| ?"
COMPOSE_SHARE = 0.9
LEVEL_WORDS = ["TRACE", "DEBUG", "INFO", "SUCCESS", "NOTICE", "WARN", "WARNING", "ERROR", "CRITICAL", "FATAL"]
_PREFIX = re.compile(COMPOSE)


def uncomposed(lines: list[str]) -> tuple[list[str], str | None]:
    """`lines` with docker compose's prefix taken off, and the container it named (the first), when
    nearly every written line has one; else `lines` as they are and None."""
    written = [line for line in lines if line.strip()]
    named = [m[1] for line in written if (m := _PREFIX.match(line)) and m[1].upper() not in LEVEL_WORDS]
    if not written or len(named) < COMPOSE_SHARE * len(written):
        return lines, None
    return [_PREFIX.sub("", line, count=1) for line in lines], named[0]
