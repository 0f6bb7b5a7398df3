"""Redaction: IP addresses, host names, user names, secrets (bearer and API tokens, Slack, GitHub,
GitLab and Hugging Face tokens, AWS keys, JWTs, private key blocks, passwords in URLs and
`key=value` forms, Authorization headers of any scheme, cookies) and e-mail addresses replaced by
stable pseudonyms before text leaves the machine. The secrets known by their shape are data
(profiles/redact/secrets.toml, each with its format's published example); the keyed forms, which
keep their key readable, are here.

One `Redactor` serves one output: the same value always gets the same pseudonym in it
(`ip-1`, `host-2`, `user-1`, `secret-3`, `email-1`), numbered in order of first sight so that
nothing of the value (not even a hash someone could brute-force over the IPv4 space) survives.
`counts()` says how many distinct values of each kind were replaced, which the outputs state.
Host names are the ones the evidence names (journald's `_HOSTNAME`, scrape instances, the
manifest) plus anything shaped like a fully qualified domain name. Words given to `keep` (the title
the user wrote) are left as they are wherever they appear whole: the user's own words, not evidence.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError

SECRETS_FILE = Path(__file__).resolve().parents[1] / "profiles" / "redact" / "secrets.toml"


def secret_shapes(path: Path = SECRETS_FILE) -> tuple[dict[str, str], ...]:
    """The secrets known by their shape (profiles/redact/secrets.toml), in the order they are tried:
    each its `name`, `pattern`, `sample` and `origin`; a pattern that does not compile is an error
    naming it."""
    entries = tuple(tomllib.loads(path.read_text()).get("secret", ()))
    for entry in entries:
        try:
            re.compile(entry["pattern"])
        except (re.error, KeyError) as error:
            raise ForensicsError(f"{path}: secret {entry.get('name')!r}: {error}") from None
    return entries


# Order matters: secrets and e-mail addresses first, so that their parts are not taken for
# host names or user names afterwards.
SECRET_PATTERNS = tuple(re.compile(entry["pattern"], re.S) for entry in secret_shapes())
# the credentials of any URL (`https://user:pw@10.0.0.5/`, `redis://:pw@cache:6379`): scheme and host stay
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#@\"'<>]*:[^\s/?#@\"'<>]*)(?=@)")
# an Authorization header of any scheme (Basic, Digest, Token, …) and cookies: the scheme and name stay
AUTHORIZATION = re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z][a-z0-9-]*\s+)?)"
                           r"([^\s\"',;]{4,})")
COOKIE = re.compile(r"(?i)\b((?:set-)?cookie[\"']?\s*[:=]\s*[\"']?)([^\"'\r\n]+)")
# key=value forms: only the value is replaced, the key stays readable
SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|refresh[_-]?token|token|secret|client[_-]?secret|"
    r"(?:aws[_-]?)?secret[_-]?access[_-]?key|private[_-]?key|password|passwd|x-api-key)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&]{6,})")
# the same words followed by a space, not `=` or `:` ("secret wJalrXUtnFEMI/K7MDENG/…", "token ab12…"):
# the value is taken only when it looks like a credential (16 characters or more, letters and digits)
SECRET_AFTER_WORD = re.compile(
    r"(?i)\b((?:aws[_ -]?)?(?:secret(?:[_ -]?access)?(?:[_ -]?key)?|api[_ -]?key|access[_ -]?key|key|token|password)"
    r"\s+)((?=[^\s\"',;&]*[0-9])(?=[^\s\"',;&]*[A-Za-z])[A-Za-z0-9/+=_.~-]{16,})")
PSEUDONYM = re.compile(r"(?:secret|ip|host|user|email)-\d+")
EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
# all eight groups, or a `::` somewhere: clock times (21:42:00) and MAC addresses are neither
IPV6 = re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}(?![\w:])"
                  r"|(?<![\w:])[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*::"
                  r"(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*)?(?![\w:])"
                  r"|(?<![\w:])::[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4})*(?![\w:])")
FQDN = re.compile(r"\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
                  r"(?:com|net|org|io|ai|dev|cloud|internal|local|lan|corp|cluster|svc|example)\b", re.I)
USER_PATTERNS = (
    re.compile(r"^\s*([a-z_][a-z0-9_.-]*) : (?:TTY|PWD|USER|COMMAND)="),  # sudo's audit line
    re.compile(r"\b(?:user|username|login|USER|LOGNAME|SUDO_USER)[=:]\s*([a-z_][a-z0-9_.-]*)", re.I),
    re.compile(r"(?:/home/|/Users/)([a-z_][a-z0-9_.-]*)"),
    re.compile(r"\bfor user ([a-z_][a-z0-9_.-]*)"),
)
# accounts whose names identify nobody
SYSTEM_USERS = {"root", "nobody", "systemd", "daemon", "www-data", "sglang"}
KIND_WORDS = {"ip": "IP addresses", "host": "host names", "user": "user names", "secret": "secrets (tokens, API keys, passwords, cookies, private keys)",
              "email": "e-mail addresses"}


class Redactor:
    """Stable pseudonyms for one output."""

    def __init__(self, hosts: Iterable[str] = (), users: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        self._names: dict[tuple[str, str], str] = {}
        # words left as they are wherever they appear whole: the user's own (the title they wrote in
        # incident.toml, "prefill-0 wedge"), which they chose to share, though they name a host
        kept = sorted({k for k in keep if k and k.strip()}, key=len, reverse=True)
        self._keep = re.compile("(" + "|".join(re.escape(k) for k in kept) + ")") if kept else None
        self._next: Counter[str] = Counter()
        self.replaced: Counter[str] = Counter()  # occurrences replaced, per kind
        known = sorted({h for h in hosts if h and h not in ("localhost",)}, key=len, reverse=True)
        # "_" may follow a host name (metrics/gpu-node-00_30000): only letters, digits and "-" extend it
        self._hosts = (re.compile("|".join(rf"(?<![A-Za-z0-9-]){re.escape(h)}(?![A-Za-z0-9-])" for h in known), re.I)
                       if known else None)
        names = sorted({u for u in users if u and u not in SYSTEM_USERS}, key=len, reverse=True)
        self._users = re.compile("|".join(rf"\b{re.escape(u)}\b" for u in names)) if names else None

    def pseudonym(self, kind: str, value: str) -> str:
        """The pseudonym of `value` (the same one every time in this output)."""
        key = (kind, value.lower() if kind in ("host", "email") else value)
        if key not in self._names:
            self._next[kind] += 1
            self._names[key] = f"{kind}-{self._next[kind]}"
        self.replaced[kind] += 1
        return self._names[key]

    def __call__(self, text: str | None) -> str | None:
        """`text` with every secret and identity replaced (the words to keep left as they are)."""
        if not text:
            return text
        if self._keep is not None and self._keep.search(text):
            # split keeps the kept words at the odd places: only the text between them is redacted
            return "".join(part if n % 2 else (self._redact(part) or "")
                           for n, part in enumerate(self._keep.split(text)))
        return self._redact(text)

    def _redact(self, text: str) -> str:
        if not text:
            return text
        for pattern in SECRET_PATTERNS:
            text = pattern.sub(lambda m: self.pseudonym("secret", m.group(0)), text)
        for keyed in (URL_CREDENTIALS, AUTHORIZATION, COOKIE, SECRET_ASSIGNMENT, SECRET_AFTER_WORD):
            text = keyed.sub(self._keyed_secret, text)
        text = EMAIL.sub(lambda m: self.pseudonym("email", m.group(0)), text)
        text = IPV4.sub(lambda m: self.pseudonym("ip", m.group(0)), text)
        text = IPV6.sub(lambda m: self.pseudonym("ip", m.group(0)), text)
        if self._hosts is not None:
            text = self._hosts.sub(lambda m: self.pseudonym("host", m.group(0)), text)
        text = FQDN.sub(lambda m: self.pseudonym("host", m.group(0)), text)
        for pattern in USER_PATTERNS:
            text = pattern.sub(lambda m: self._user(m), text)
        if self._users is not None:
            text = self._users.sub(lambda m: self.pseudonym("user", m.group(0)), text)
        return text

    def _keyed_secret(self, match: re.Match[str]) -> str:
        """`key: value` with the value replaced, unless an earlier pattern replaced it already."""
        value = match.group(2)
        if PSEUDONYM.fullmatch(value.strip()):
            return match.group(0)
        return match.group(1) + self.pseudonym("secret", value)

    def _user(self, match: re.Match[str]) -> str:
        name = match.group(1)
        if name in SYSTEM_USERS or re.fullmatch(r"user-\d+", name):
            return match.group(0)
        start, end = match.span(1)
        whole = match.group(0)
        offset = match.start(0)
        return whole[:start - offset] + self.pseudonym("user", name) + whole[end - offset:]

    def structure(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string redacted and its shape kept:
        redacting serialised JSON as text could cut a quoted value and break the document."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self.structure(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.structure(item) for item in value]
        return value

    def counts(self) -> dict[str, int]:
        """Distinct values replaced, per kind."""
        return dict(Counter(kind for kind, _ in self._names))

    def statement(self) -> str:
        """What was redacted, in one sentence for the output itself."""
        counts = self.counts()
        if not counts:
            return ("Redaction was on: no IP addresses, host names, user names, secrets (tokens, API keys, "
                    "passwords, cookies, private keys) or e-mail addresses were found.")
        parts = [f"{n} {KIND_WORDS[kind]}" for kind, n in sorted(counts.items())]
        return (f"Redacted (each replaced by a stable pseudonym such as {next(iter(self._names.values()))}): "
                + ", ".join(parts) + f"; {sum(self.replaced.values())} occurrences in all.")

