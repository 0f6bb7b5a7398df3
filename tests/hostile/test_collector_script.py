"""The collector's script runs as root on the wedged host (`forensics collect --script … | ssh root@host
sh`): no value given to the collector — a flag, a TOML key — may run anything there. Each value is
checked by type and shape, every problem named with its path, and what passes is quoted by one
function. The script is run for real with `sh`, with stand-ins for the commands it calls, and a
marker file must never appear."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.cli import main
from forensics.capture.plan import CollectError, Plan, plan_from_toml
from forensics.capture.sh_script import script, sh_quote

STAND_INS = ("journalctl", "curl", "py-spy", "pgrep", "sleep", "timeout", "nvidia-smi")


def _stand_ins(folder: Path) -> Path:
    """Commands the script calls, each writing its arguments to `calls.log` and doing nothing else
    (`timeout` runs what it is given, as the real one does)."""
    folder.mkdir(exist_ok=True)
    for name in STAND_INS:
        body = 'shift; exec "$@"' if name == "timeout" else f'printf "{name} %s\\n" "$*" >> "{folder}/calls.log"'
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def _run_script(text: str, tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    (tmp_path / "collect.sh").write_text(text)
    bin_dir = _stand_ins(tmp_path / "bin")
    return subprocess.run(["sh", str(tmp_path / "collect.sh")], cwd=tmp_path, capture_output=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)})


# What the probe sent, and what the collector must say instead of running it (each message names the
# field, the value and the shape it should have).
REFUSED_FLAGS = [
    (["--pids", "x$(touch PWNED)=1"], "pids.'x$(touch PWNED)': a group is letters, digits, '_', '.' or '-'"),
    (["--pids", "decode=1;touch PWNED"], "--pids 'decode=1;touch PWNED': write GROUP=PID,PID"),
    (["--unit", "a.service; touch PWNED"], "units[0]: 'a.service; touch PWNED' is not a systemd unit name"),
    (["--unit=--no-pager"], "units[0]: '--no-pager' is not a systemd unit name"),
    (["--metrics", "decode=localhost:3$(touch PWNED)"], "port '3$(touch PWNED)' is not a number from 1 to 65535"),
    (["--metrics", "file:///etc/shadow"], "scheme 'file': only http and https are scraped"),
    (["--since", "-1h' ; touch PWNED; '"], "since: expected a journalctl time"),
    (["--scrapes", "0"], "scrapes: expected a whole number from 1 to 100, found 0"),
    (["--round-interval", "inf"], "round_interval_s: expected a number of seconds from 0 to 600, found inf"),
]


@pytest.mark.parametrize(("flags", "message"), REFUSED_FLAGS, ids=[" ".join(f) for f, _ in REFUSED_FLAGS])
def test_a_hostile_flag_is_refused_with_its_reason(flags: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", str(tmp_path / "out"), "--script", *flags]) != 0
    said = capsys.readouterr()
    assert message in said.err and said.out == ""  # no script printed at all
    assert not (tmp_path / "PWNED").exists()


TOML_PROBES = [
    ('scrapes = "1 ]; touch PWNED; [ 1"\n', "scrapes: expected a whole number from 1 to 100, found '1 ]; touch PWNED; [ 1'"),
    ('rounds = "2"\n', "rounds: expected a whole number from 1 to 50, found '2'"),
    ('pids = {d = ["1\\"; touch PWNED; \\""]}\n', "pids.d[0]: expected a process id (1 to 4194304), found '1\"; touch PWNED; \"'"),
    ('units = "abc"\n', "units: expected a list (each a systemd unit name), found str 'abc'"),
    ("scrape_interval_s = 1e400\n", "scrape_interval_s: expected a number of seconds from 0 to 600, found inf"),
    ("rounds = true\n", "rounds: expected a whole number from 1 to 50, found True"),
    ("native = 1\n", "native: expected true or false, found 1"),
    ("bogus = 1\n", "bogus: unknown key (known: endpoints, host, journal, native, pids, round_interval_s, rounds, "
                    "scrape_interval_s, scrapes, since, titles, units, until)"),
]


@pytest.mark.parametrize(("toml", "message"), TOML_PROBES, ids=[t.split("=")[0].strip() for t, _ in TOML_PROBES])
def test_a_hostile_toml_value_is_refused_with_its_path(toml: str, message: str, tmp_path: Path) -> None:
    config = tmp_path / "collect.toml"
    config.write_text(toml)
    with pytest.raises(CollectError) as raised:
        plan_from_toml(config, tmp_path / "out")
    assert message in str(raised.value)


def test_every_problem_of_a_toml_is_named_at_once(tmp_path: Path) -> None:
    config = tmp_path / "collect.toml"
    probes = {toml.split("=")[0]: (toml, message) for toml, message in reversed(TOML_PROBES)}  # one per key
    config.write_text("".join(toml for toml, _ in probes.values()))
    with pytest.raises(CollectError) as raised:
        plan_from_toml(config, tmp_path / "out")
    assert f"{config}: {len(probes)} problems: " in str(raised.value)
    for _, message in probes.values():
        assert message in str(raised.value)


def _every_value(payload: str, tmp_path: Path) -> Plan:
    """A plan carrying `payload` in every place that takes free text and passes the checks."""
    return Plan(tmp_path / "out", units=["sglang-decode.service"], since="-1h", until=None,
                journal=tmp_path / f"journal-{payload}", endpoints=["decode=localhost:30002"],
                titles=[payload], pids={"decode": [1]}, scrapes=1, rounds=1)


PAYLOADS = ["$(touch PWNED)", "`touch PWNED`", "'; touch PWNED; '", '"; touch PWNED; "', "x\\'; touch PWNED #",
            "$( touch PWNED )|a", "a'$(touch PWNED)'b"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_what_passes_the_checks_is_inert_when_the_script_runs(payload: str, tmp_path: Path) -> None:
    done = _run_script(script(_every_value(payload, tmp_path)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "PWNED").exists()
    calls = (tmp_path / "bin" / "calls.log").read_text()
    assert f"pgrep -f -- {payload}" in calls  # the title reached pgrep as one word, as written
    # the journal's path reached journalctl's --file as one word, the pattern characters journalctl
    # would expand quoted with a backslash each (glob(7)): the file as written, no other
    assert "--file=" + "".join("\\" + c if c in "\\*?[]{}" else c for c in str(tmp_path / f"journal-{payload}")) \
        in calls


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck (Debian's package) not installed")
def test_the_generated_script_passes_shellcheck(tmp_path: Path) -> None:
    plan = Plan(tmp_path / "out", units=["sglang-decode.service", "sglang-prefill"], until="2026-06-18 21:45",
                journal=tmp_path, endpoints=["decode=localhost:30002", "https://metrics.example:8443/m"],
                titles=["^sglang::"], pids={"decode": [10, 11]}, native=True)
    (tmp_path / "collect.sh").write_text(script(plan))
    done = subprocess.run(["shellcheck", "--shell=sh", "--severity=warning", str(tmp_path / "collect.sh")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert subprocess.run(["sh", "-n", str(tmp_path / "collect.sh")]).returncode == 0


INJECTIONS = st.sampled_from(["$(touch PWNED)", "`touch PWNED`", "';touch PWNED;'", '";touch PWNED;"',
                              "\n touch PWNED\n", "]; touch PWNED; [", "\\", "'", '"', "$", "=", ",", " "])
HOSTILE_TEXT = st.lists(st.one_of(st.text(max_size=8), INJECTIONS), max_size=4).map("".join)
FIELDS = ("units", "titles", "endpoints", "since", "until", "journal", "group", "pid", "scrapes", "rounds",
          "scrape_interval_s", "round_interval_s")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), text=HOSTILE_TEXT)
def test_random_strings_in_any_option_either_are_refused_or_run_nothing(field: str, text: str,
                                                                        tmp_path: Path) -> None:
    if "\0" in text:
        return  # not a value a flag or a TOML string can carry
    plan = Plan(tmp_path / "out", units=["u.service"], endpoints=["9"], titles=["^x$"], scrapes=1, rounds=1)
    values: dict[str, object] = {"units": [text], "titles": [text], "endpoints": [text], "since": text,
                                 "until": text, "journal": text, "scrapes": text, "rounds": text,
                                 "scrape_interval_s": text, "round_interval_s": text}
    if field == "group":
        plan.pids = {text: [1]}
    elif field == "pid":
        plan.pids = {"g": [text]}  # type: ignore[list-item]
    else:
        setattr(plan, field, values[field])
    marker = tmp_path / "PWNED"
    marker.unlink(missing_ok=True)
    try:
        text_of_script = script(plan)
    except CollectError:
        return  # refused, with its reason
    done = _run_script(text_of_script, tmp_path)
    assert not marker.exists(), (field, text, done.stderr)


def test_sh_quote_is_the_only_way_in(tmp_path: Path) -> None:
    for value in ["plain", "it's", "$(x)", "a b\tc\nd", "", 3, 0.5]:
        echoed = subprocess.run(["sh", "-c", f"printf %s {sh_quote(value)}"], capture_output=True, text=True,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        assert echoed.stdout == (value if isinstance(value, str) else f"{value:g}")
