"""Redaction: every kind replaced, stable pseudonyms, counts stated, clock times and code left alone."""

import pytest

from forensics.render.redact import Redactor

CASES = [
    ("client 10.11.12.13 connected", "client ip-1 connected", "ip"),
    ("peer [2001:db8::8a2e:370:7334]:443", "peer [ip-1]:443", "ip"),
    ("full fe80:0000:0000:0000:0204:61ff:fe9d:f156 up", "full ip-1 up", "ip"),
    ("Authorization: Bearer eyJhbGciOi.abc123def456", "Authorization: secret-1", "secret"),
    ("key sk-proj-abcdefghijklmnop1234", "key secret-1", "secret"),
    ("HF hf_abcdefghijklmnopqrstuvwx", "HF secret-1", "secret"),
    ('{"api_key": "s3cr3tvalue"}', '{"api_key": "secret-1"}', "secret"),
    ("password=hunter2hunter2", "password=secret-1", "secret"),
    # one case per secret shape the README lists
    ("push ghp_abcdefghijklmnopqrstuvwxyz0123456789", "push secret-1", "secret"),
    ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "pat secret-1", "secret"),
    ("ci glpat-abcdefghij0123456789", "ci secret-1", "secret"),
    ("slack xoxb-123456789012-abcdefghijkl", "slack secret-1", "secret"),
    ("aws AKIAIOSFODNN7EXAMPLE used", "aws secret-1 used", "secret"),
    ("aws_secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret secret-1", "secret"),
    ("secret wJalrXUtnFEMIKMDENGbPxRfiCYEXAMPLEKEYabcd1", "secret secret-1", "secret"),
    ("token 3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c", "token secret-1", "secret"),
    ("key Zk9qR2x1c3RlcjEyMzQ1Njc4", "key secret-1", "secret"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "jwt secret-1", "secret"),
    ("dsn postgres://app:hunter2@db/app", "dsn postgres://secret-1@db/app", "secret"),
    ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic secret-1", "secret"),
    ("Cookie: session=abc123def456; theme=dark", "Cookie: secret-1", "secret"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "secret-1", "secret"),
    ("token=abcdef123456", "token=secret-1", "secret"),
    ("secret: s3cr3tvalue", "secret: secret-1", "secret"),
    ("mail from alice.smith@example.com", "mail from email-1", "email"),
    ("on gpu-node-00 restarted", "on host-1 restarted", "host"),
    ("metrics/gpu-node-00_30000/scrapes.prom", "metrics/host-1_30000/scrapes.prom", "host"),
    ("resolved db-7.prod.example.internal", "resolved host-1", "host"),
    ("      sre : TTY=pts/0 ; PWD=/home/sre ; USER=root", "      user-1 : TTY=pts/0 ; PWD=/home/user-1 ; USER=root", "user"),
    ("login=bob accepted", "login=user-1 accepted", "user"),
]

LEFT_ALONE = [
    "decode froze at 21:34:47 and resumed 21:42:00.123",
    "mac aa:bb:cc:dd:ee:ff",
    "std::vector<int> and torch 2.13.0",
    "USER=root ; COMMAND=/usr/bin/systemctl restart sglang-dsv4-decode",
    "forensics/lab/engine.py:82",
    "the key point is reached",  # a word after "key" is not a credential
    "token usage: 0.44",
]


@pytest.mark.parametrize(("text", "expected", "kind"), CASES)
def test_each_kind_is_replaced(text: str, expected: str, kind: str) -> None:
    redactor = Redactor(hosts=["gpu-node-00"])
    assert redactor(text) == expected
    assert redactor.counts() == {kind: 1}


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_times_versions_and_code_are_left_alone(text: str) -> None:
    redactor = Redactor(hosts=["gpu-node-00"])
    assert redactor(text) == text
    assert redactor.counts() == {}


def test_pseudonyms_are_stable_and_distinct() -> None:
    redactor = Redactor(hosts=["gpu-node-00", "gpu-node-01"])
    first = redactor("gpu-node-00 talked to 10.0.0.1 and gpu-node-01 to 10.0.0.2")
    second = redactor("again 10.0.0.2, 10.0.0.1, GPU-NODE-00")
    assert first == "host-1 talked to ip-1 and host-2 to ip-2"
    assert second == "again ip-2, ip-1, host-1"
    assert redactor.counts() == {"host": 2, "ip": 2}
    assert redactor.replaced == {"host": 3, "ip": 4}
    statement = redactor.statement()
    assert "2 host names" in statement and "2 IP addresses" in statement and "7 occurrences" in statement


def test_a_fresh_redactor_says_nothing_was_found() -> None:
    redactor = Redactor()
    assert redactor("nothing to hide") == "nothing to hide"
    assert "no IP addresses" in redactor.statement()
