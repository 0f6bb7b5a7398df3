"""Profiles are data: every shipped profile loads, its samples get the phase they claim, and a
broken profile is named with the key at fault."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from forensics.detect.stack_frames import Frame, classify
from forensics.analyze import lines_found_in
from forensics.profiles import ProfileError, available, choose_profile, load_profile


@pytest.mark.parametrize("name", available())
def test_every_sample_of_every_profile_gets_its_phase(name: str) -> None:
    profile = load_profile(name)
    assert profile.stacks.samples, f"{name} has no [[stacks.sample]]"
    for sample in profile.stacks.samples:
        frames = [Frame.parse(text) for text in sample.stack]
        assert classify(frames, profile.stacks).phase == sample.phase, sample.stack


def test_a_user_rule_changes_the_phase_without_code(tmp_path: Path) -> None:
    shipped = load_profile("sglang").path.read_text()
    own = tmp_path / "mine.toml"
    rule = '[[stacks.phase]]\nphase = "transfer"\nfunction = "^wait_for_kv$"\n\n'
    own.write_text(shipped.replace("[[stacks.phase]]", rule + "[[stacks.phase]]", 1))
    frames = [Frame.parse("wait_for_kv (mine/kv.py:3)"), Frame.parse("event_loop (mine/loop.py:9)")]
    assert classify(frames, load_profile("sglang").stacks).phase == "unknown"
    assert classify(frames, load_profile(own).stacks).phase == "transfer"


def test_a_profile_file_is_read_again_when_its_text_changes_and_only_then(tmp_path: Path) -> None:
    shipped = load_profile("sglang").path.read_text()
    own = tmp_path / "mine.toml"
    own.write_text(shipped)
    first = load_profile(own)
    assert load_profile(own) is first  # asked again: the same rules, not read anew
    rule = '[[stacks.phase]]\nphase = "transfer"\nfunction = "^wait_for_kv$"\n\n'
    own.write_text(shipped.replace("[[stacks.phase]]", rule + "[[stacks.phase]]", 1))  # within the same clock tick
    frames = [Frame.parse("wait_for_kv (mine/kv.py:3)")]
    assert classify(frames, load_profile(own).stacks).phase == "transfer"
    own.write_text("[profile\n")
    with pytest.raises(ProfileError, match="Expected ']'"):
        load_profile(own)


@pytest.mark.parametrize("text, message", [
    ("[stacks]\n", "missing table [profile]"),
    ("[profile]\n", "missing table [stacks]"),
    ('[profile]\n[stacks]\n[[stacks.phase]]\nphase = "sleeping"\nfunction = "x"\n',
     "[[stacks.phase]] #1: phase 'sleeping' is not one of collective, idle, transfer"),
    ('[profile]\n[stacks]\n[[stacks.phase]]\nphase = "idle"\nfunction = "(x"\n',
     "[[stacks.phase]] #1 function: bad regular expression '(x'"),
    ('[profile]\n[stacks]\n[[stacks.phase]]\nphase = "idle"\n', "[[stacks.phase]] #1 has no 'function'"),
    ('[profile]\n[stacks]\n[[stacks.phase]]\nphase = "idle"\nfunction = "x"\nfuncton = "y"\n',
     "[[stacks.phase]] #1: unknown key(s) funct"),
    ("[profile\n", "Expected ']'"),
    ('[profile]\n[stacks]\n[logs]\nrequest_sent = "request ([0-9a-f]+) routed"\n',
     "[logs] request_sent: 'request ([0-9a-f]+) routed' has no group named rid"),
    ("[profile]\n[stacks]\n[logs.fields]\n" + "".join(f'f{n} = "label {n}"\n' for n in range(257)),
     "[logs.fields] has more than 256 labels"),
    ('[profile]\n[stacks]\n[logs.fields]\nqueue = 3\n', "[logs.fields] queue must be a label or a list of labels"),
    ('[profile]\n[stacks]\n[logs.fields]\nqueue = []\n', "[logs.fields] queue must be a label or a list of labels"),
    ('[profile]\n[stacks]\n[logs.fields]\nqueue = "#queue-req: "\n', "[logs.fields] queue: '#queue-req: ' cannot be"),
    ('[profile]\n[stacks]\n[logs.fields]\nqueue = ["#q", " #queue"]\n', "[logs.fields] queue: ' #queue' cannot be"),
])
def test_bad_profiles_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_unknown_profile_names_the_shipped_ones() -> None:
    with pytest.raises(ProfileError, match="no profile named 'vllm2'; shipped: sglang"):
        load_profile("vllm2")


@pytest.mark.parametrize("name", available())
def test_every_log_sample_of_every_profile_reads_as_claimed(name: str) -> None:
    import polars as pl

    from forensics.timeline.logs import read_lines
    profile = load_profile(name)
    assert profile.logs.samples, f"{name} has no [[logs.sample]]"
    lines = pl.DataFrame({"message": [s.line for s in profile.logs.samples]})
    read = read_lines(lines, profile)
    for sample, row in zip(profile.logs.samples, read.iter_rows(named=True), strict=True):
        assert (row["progress"] or row["event"]) == sample.kind, sample.line
        fields = dict(sample.fields)
        if "http_status" in fields:
            assert row["http_status"] == fields.pop("http_status")
        if sample.tag is not None:
            assert row["tag"] == sample.tag, sample.line
        for field, value in fields.items():
            assert row[field] == pytest.approx(value), (sample.line, field)


@pytest.mark.parametrize("stack", available())
def test_every_layer_sample_reads_as_its_kind_under_every_stack(stack: str) -> None:
    """The layers' line kinds (PyTorch distributed, kernel, systemd, …) apply whatever the stack, and
    each of their real sample lines gets its kind and the failure mode it is evidence of; a sample
    without a kind is a real line no kind may take (a corrected PCIe error)."""
    import polars as pl

    from forensics.profiles import layers
    from forensics.timeline.logs import read_lines

    profile = load_profile(stack)
    samples = [(layer, s) for layer in layers() for s in layer.samples]
    read = read_lines(pl.DataFrame({"message": [s.line for _, s in samples]}), profile)
    faults = {e.kind: e.fault for e in profile.logs.events if e.layer is not None}
    own_tracks = {e.kind: e.track for layer in layers() for e in layer.events if e.track != "main"}
    for (layer, sample), row in zip(samples, read.iter_rows(named=True), strict=True):
        assert row["event"] == sample.kind, (layer.name, sample.line)
        if sample.kind is None:  # a real line no kind may take (a call trace's frame, an SXid's data line)
            continue
        # the stack's main track, or the track the layer names (non-fatal device errors have their own)
        assert row["track"] == own_tracks.get(sample.kind, profile.logs.main_track), sample.line
        assert faults[sample.kind] is not None


def test_every_layer_kind_has_a_real_sample_and_says_its_failure_mode() -> None:
    from forensics.profiles import layers, meaning

    for layer in layers():
        assert layer.samples, layer.name
        sampled = {s.kind for s in layer.samples if s.kind}
        for event in layer.events:
            assert event.kind in sampled, event.kind
            assert event.fault is not None, event.kind
    assert meaning("xid", 79) == "GPU has fallen off the bus: the GPU no longer answers on PCIe"
    assert meaning("xid", 999999) is None


def test_findings_go_on_the_profiles_main_track(tmp_path: Path) -> None:
    """The track name is the profile's (`main_track`), in every detector: a profile naming its
    track "serving" gets its freezes, restarts and mitigation there, none on the shipped "wedge"."""
    from forensics.analyze import analyze

    shipped = load_profile("sglang").path.read_text()
    assert 'main_track = "wedge"' in shipped
    own = tmp_path / "serving.toml"
    own.write_text(shipped.replace('main_track = "wedge"', 'main_track = "serving"')
                   .replace('track = "wedge"', 'track = "serving"'))
    bundle = Path(__file__).resolve().parents[1] / "data" / "incidents" / "dsv4-pd-wedge-2026-06-18"
    analysis = analyze(bundle, tmp_path / "case", profile=load_profile(own))
    kinds = {f.kind: f.track for f in analysis.findings}
    for kind in ("frozen", "silent_hang", "restart", "mitigation", "stack_verdict"):
        assert kinds.get(kind) == "serving", (kind, kinds.get(kind))
    assert "wedge" not in {f.track for f in analysis.findings}


LINE_PATTERNS = ("progress", "health_ok", "ready", "starting", "access", "request_sent", "request_received")
# Patterns no real line backs yet, each a strict xfail that passes, and must be taken off this list,
# once a real line is added as a sample. (None today: the reference generator's own wording for the
# router's per-request and timeout lines and the markup leak was replaced by SGLang's.)
UNGROUNDED: dict[tuple[str, str], str] = {}


def _stack_patterns(name: str) -> dict[str, str]:
    """A serving profile's own line patterns (its events, progress, health, readiness, start-up,
    access and request lines), without those written never to match."""
    profile = load_profile(name)
    found = {f"event:{e.kind}": e.pattern for e in profile.logs.events if e.layer is None}
    found |= {key: getattr(profile.logs, key) for key in LINE_PATTERNS}
    return {key: pattern for key, pattern in found.items() if "$^" not in pattern}


def _pattern_cases() -> list[object]:
    return [pytest.param(name, key, marks=pytest.mark.xfail(strict=True, reason=UNGROUNDED[(name, key)])
                         if (name, key) in UNGROUNDED else ())
            for name in ("sglang", "vllm") for key in _stack_patterns(name)]


@pytest.mark.parametrize("name, key", _pattern_cases())
def test_every_pattern_of_a_serving_profile_matches_one_of_its_real_lines(name: str, key: str) -> None:
    """A pattern fitted only to lines the suite invented proves nothing about real logs: each one
    matches at least one sample copied from a real log (a sample with a `source` in the corpora, or
    an `origin`: the public bug report that quotes it) or built from the stack's own format string
    (`printed_by`: the repository, commit, file and line that print it)."""
    import re

    real = [s.line for s in load_profile(name).logs.samples if s.source or s.origin or s.printed_by]
    assert real, f"{name} has no real sample lines"
    pattern = _stack_patterns(name)[key]
    assert any(re.search(pattern, line) for line in real), f"{name} {key} {pattern!r} matches no real line"


def test_every_real_sample_is_the_line_its_source_names() -> None:
    """A sample's `source` is a corpus file and line: that line, as it is there (corpora beside the
    checkout; skipped without them)."""
    from tests.test_corpus import CORPUS

    shared = CORPUS.parent
    if not (shared / "corpus2").is_dir():
        pytest.skip(f"no corpora beside the checkout ({shared})")
    checked = 0
    for name in available():
        for sample in load_profile(name).logs.samples:
            if sample.source is None:
                continue
            where, number = sample.source.rsplit(":", 1)
            lines = (shared / where).read_bytes().split(b"\n")
            assert lines[int(number) - 1].decode(errors="replace").strip() == sample.line, sample.source
            checked += 1
    assert checked >= 13


def test_every_origin_names_a_public_report() -> None:
    """A sample from outside the corpora names where it was quoted: a public issue's address."""
    import re

    origins = [s.origin for name in available() for s in load_profile(name).logs.samples if s.origin]
    assert origins and all(re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/[0-9]+", o)
                           for o in origins), origins


def test_every_line_built_from_code_names_the_line_of_code_and_reads_like_it() -> None:
    """A sample built from a format string names it — repository, full commit, file and line — and
    is a whole line that code prints: SGLang's request log (`Receive: obj=GenerateReqInput(…)` or
    `Finish: obj=…, out={…}` after its `[date time] ` prefix, the dataclass' fields as `name=value`)."""
    import re

    built = [s for name in available() for s in load_profile(name).logs.samples if s.printed_by]
    assert built
    for sample in built:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40} \S+\.\w+:[0-9]+", sample.printed_by or ""), sample.printed_by
        assert sample.source is None and sample.origin is None, sample.line
        if "request_logger.py" in (sample.printed_by or ""):
            assert re.fullmatch(r"\[[0-9-]+ [0-9:.]+\] (Receive: obj=GenerateReqInput\(.*\brid='[0-9a-f]{32}', .*\)"
                                r"|Finish: obj=GenerateReqInput\(.*\brid='[0-9a-f]{32}', .*\), out=\{'text': .*\})",
                                sample.line), sample.line


def test_counting_evidence_lines_with_polars_chooses_as_python_does() -> None:
    lines = ["[2026-06-18 21:34:47 TP0] Decode batch. #running-req: 12", "INFO 06-18 21:34:47 [loggers.py:116] "
             "Engine 000: Avg prompt throughput: 0.0 tokens/s", "sglang::scheduler_TP0", "vllm:num_requests_running",
             "plain line", "", "VLLM::EngineCore_DP0", "python -m sglang.srt.entrypoints.http_server"]
    for sample in (lines, lines[:1], lines[1:2], lines[4:6]):
        found = lines_found_in(pl.Series(sample, dtype=pl.String))
        assert choose_profile([], [], sample, found) == choose_profile([], [], sample)
    assert lines_found_in(pl.Series(["ab", "b"]))(re.compile(r"(?<=a)b")) == 1  # a pattern Rust's engine refuses


@pytest.mark.parametrize("stack", available())
def test_a_process_last_words_never_take_the_kind_of_the_cause_in_its_record(stack: str) -> None:
    """The process layer's kinds are tried last: a record a log reader folded, holding a CUDA error
    and then faulthandler's "Fatal Python error: Aborted" (as CPython prints it), is a CUDA error; the
    faulthandler line alone is a fatal signal."""
    import polars as pl

    from forensics.profiles import layers
    from forensics.timeline.logs import read_lines

    cuda = next(s.line for layer in layers() for s in layer.samples if s.kind == "cuda_error")
    read = read_lines(pl.DataFrame({"message": [f"{cuda}\nFatal Python error: Aborted", "Fatal Python error: Aborted"]}),
                      load_profile(stack))
    assert read.get_column("event").to_list() == ["cuda_error", "fatal_signal"]


def test_every_failure_mode_a_layer_knows_leads_a_first_screen_and_has_its_marker() -> None:
    """Issue 33: each mode has its first-screen sentence and its markers on the timeline, which
    both take the kinds `failures.HEADLINE` lists; each failure mode (`fault`) has its own symbol."""
    from forensics.detect.failures import HEADLINE
    from forensics.profiles import layers
    from forensics.render.palette import FAULT_SYMBOLS

    kinds = [(e.kind, e.fault) for layer in layers() for e in layer.events if e.fault]
    assert kinds
    assert [kind for kind, _ in kinds if kind not in HEADLINE] == []
    assert {fault for _, fault in kinds} <= set(FAULT_SYMBOLS)
