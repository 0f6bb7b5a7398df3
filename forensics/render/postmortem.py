"""`postmortem.md`: a first draft of the post-mortem, under the Google SRE book's headings.

What the evidence says is filled in (key times, the freeze, the stack verdict, the blind spot,
the restart, the other symptom tracks and why they are kept apart); what only people know (user
impact, the underlying cause, owners, lessons) is left as a visible `TODO` placeholder, never
invented. Evidence never acts as Markdown: values taken whole from it (file names) are code spans, and
sentences that quote it have every character Markdown would act on escaped, so a
`![x](http://…)` a client logged stays text, not a remote image, when the draft is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from datetime import UTC, datetime

from forensics.analyze import Analysis, in_display_zone, is_anomaly, no_incident_heading
from forensics.detect import DISPLAY_ZONE, Finding, clock, failures, span
from forensics.detect.stack_verdict import HANG_VERDICTS
from forensics.detect.stacks import latest
from forensics.render.text import SHOWN, Redact, title_redact

HEADINGS = ("Summary", "Impact", "Root Causes", "Trigger", "Resolution", "Detection", "Action Items",
            "Lessons Learned", "Timeline")
TRIGGER_LOOKBACK_S = 120  # findings this long before the start may be the trigger
TODO = "> **TODO (only people know):**"
HANG_WORDS = {"TP_DESYNC": "desynchronised", "UNIFORM_WAIT": "waiting together in one collective",
              "STRAGGLER_OR_MISSING": "waiting for a missing or slow rank"}

# Suggested action items per finding kind: what the evidence argues for; people decide.
SUGGESTIONS = {
    "silent_hang": ("Alert on progress, not only health: no tokens for 1m while requests are pending.", "detect",
                    "P0"),
    "stack_verdict": ("Capture py-spy dumps of every rank automatically when progress stops, before restarting.",
                      "detect", "P1"),
    "frozen": ("Make the health check exercise the scheduler (a tiny generation), so a frozen engine fails it.",
               "detect", "P1"),
    "request_timeout": ("Bound client-visible damage: fail requests fast when the engine makes no progress.",
                        "mitigate", "P2"),
    "kv_transfer_failure": ("Test the hypothesis that the KV-transfer failures just before the freeze put the ranks "
                            "out of step (the evidence shows them in time order, not as a cause).", "prevent", "P1"),
}


# What Markdown would act on in evidence text: links and images (`[`, `]`; `![x](http://…)` is a
# remote image, a tracking pixel), raw HTML (`<`, `>`, `&`), emphasis and strikethrough (`*`, `~`;
# `_` where it can open or close emphasis, below) and escapes (`\\`); and what would start a line
# of its own (newlines; the other line breaks, controls and bidirectional overrides are made
# visible, as in every output).
_ONE_LINE = {**SHOWN, ord("\n"): " ", ord("\r"): " "}
MARKDOWN_ESCAPES = str.maketrans({**_ONE_LINE, "\\": "\\\\", "[": "\\[", "]": "\\]", "*": "\\*", "~": "\\~",
                                  "<": "&lt;", ">": "&gt;", "&": "&amp;", "`": "'", "|": "/"})
CODE_ESCAPES = str.maketrans({**_ONE_LINE, "`": "'", "|": "/"})
# `_` opens or closes emphasis next to a space or punctuation (`__init__` is **init**), never
# between letters or digits (`generation_tokens_total` stays as it is)
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# What makes a line a heading, a list item, a quote, a rule or a code block when the quoted text
# comes first on it (a list item `- {text}` whose text is `# x` holds a heading; `~~~` at the
# start of the summary opens a code block that swallows the rest of the draft)
_LINE_START = re.compile(r"[#+\-=]|[0-9]{1,9}(?=[.)])")


def _redacted(text: object, redact: Redact | None) -> str:
    value = "" if text is None else str(text)
    return (redact(value) or "") if redact is not None else value


def _md(text: object, redact: Redact | None) -> str:
    """Text that carries evidence, made inert for Markdown: redacted, on one line, then every
    character Markdown would turn into a link, an image, HTML or emphasis escaped; backticks become
    quotes (so no code span can be closed from inside) and `|` a slash (so no table cell can be
    split). It may start a line (a list item's text, the summary), so it never starts with a
    blank or with what would open a block there."""
    value = _EMPHASIS_UNDERSCORE.sub(r"\\_", _redacted(text, redact).translate(MARKDOWN_ESCAPES).lstrip())
    start = _LINE_START.match(value)
    if start is None:
        return value
    return "\\" + value if not value[0].isdigit() else start.group() + "\\" + value[start.end():]


def _code(text: object, redact: Redact | None) -> str:
    """A value straight from the evidence (a title, a file name, an annotation) as a code span:
    shown as typed, never interpreted."""
    value = _redacted(text, redact).translate(CODE_ESCAPES)
    return f"`{value}`" if value.strip() else "''"


def _of(analysis: Analysis, *kinds: str, track: str | None = None) -> list[Finding]:
    return sorted((f for f in analysis.findings if f.kind in kinds and (track is None or f.track == track)),
                  key=lambda f: (f.at is None, f.at))


def _at(at: datetime | None) -> str:
    return clock(at) if at else "?"


def _stamp(at: datetime | None) -> str:
    """Date and time in the display zone (the day can differ from UTC's)."""
    return f"{at.astimezone(DISPLAY_ZONE.get()):%Y-%m-%d %H:%M:%S}" if at else "?"


def incident_day(analysis: Analysis) -> str:
    """The incident's day in the display zone set by the caller, and in UTC when that is another
    day ("2026-06-19 (Asia/Shanghai), 2026-06-18 UTC"); empty when the evidence dates nothing."""
    t = analysis.key_times
    at = t.started or (analysis.timeline.incident.window or (None,))[0]
    if at is None and analysis.timeline.manifest.get("first_ts"):  # no window given: the evidence's first time
        at = datetime.fromisoformat(str(analysis.timeline.manifest["first_ts"]))
        at = at if at.tzinfo else at.replace(tzinfo=UTC)
    if at is None:
        return ""
    local, utc = at.astimezone(DISPLAY_ZONE.get()), at.astimezone(UTC)
    return f"{local:%Y-%m-%d} ({analysis.display_zone})" + (f", {utc:%Y-%m-%d} UTC" if local.date() != utc.date()
                                                            else "")


def _timeline_rows(analysis: Analysis) -> list[Finding]:
    """One row per event the report lists: the dated ones in time order, then those the evidence
    gives no time (a pasted tool output), in the order they were found."""
    reported = analysis.reported()
    return (sorted((f for f in reported if f.at), key=lambda f: f.at)  # type: ignore[arg-type, return-value]
            + [f for f in reported if not f.at])


def _hang_words(v: Any) -> str:
    """A hang verdict in words; a device synchronize is a wait on the GPU, never a collective."""
    if v.verdict == "UNIFORM_WAIT" and not v.collective:
        return "waiting together at one place (not a collective: the device or below)"
    return HANG_WORDS.get(v.verdict, "stuck")


def _by_verdict(verdicts: list[Any]) -> list[list[Any]]:
    """Hung groups with the same verdict and the same words for it, together (one verdict, said once)."""
    same: dict[tuple[str, str], list[Any]] = {}
    for v in verdicts:
        same.setdefault((v.verdict, _hang_words(v)), []).append(v)
    return list(same.values())


def _hung_sentence(same: list[Any], quote: Callable[[object], str]) -> str:
    """One sentence for groups that hung the same way: which, how, when (the first capture)."""
    # a dump dated only by its file's copy time says nothing of when the hang was seen
    first = min((v.at for v in same if v.at and any(r.ts_confidence != "low" for r in v.ranks)), default=None)
    groups = (f"the {quote(same[0].group)} TP group" if len(same) == 1
              else f"{len(same)} TP groups ({', '.join(quote(v.group) for v in same)})")
    one_round = all(v.round == 0 and not v.progress for v in same)
    when = f"at {_at(first)}" if first else "(the dumps carry no time of their own, only their files' copy times)"
    return (f"py-spy showed {groups} {_hang_words(same[0])} ({same[0].verdict}) {when}"
            + (" in one round of dumps" if one_round else "") + ".")


def verdict_sentence(analysis: Analysis, quote: Callable[[object], str]) -> str:
    """What happened, in one sentence from the evidence (the post-mortem's summary and the report's
    first screen): which engines froze and when, the stack verdict, the blind spot, the restart.
    `quote` makes evidence text safe for where the sentence goes (Markdown or HTML). Times in the
    display zone the caller has set."""
    t = analysis.key_times
    freezes, hangs = _of(analysis, "frozen"), _of(analysis, "silent_hang")
    desync = [v for v in latest(analysis.verdicts) if v.verdict == "TP_DESYNC"]
    ttr = t.seconds("resolved")
    if freezes:
        consequences = {component: cause for component, cause, _ in analysis.consequences()}
        parts = [f"{quote(f.component or 'a scheduler')} froze at {_at(f.at)}"
                 + (f" (most likely a consequence of {quote(consequences[f.component])}'s freeze)"
                    if f.component in consequences else "") for f in freezes]
        return (f"{'; '.join(parts)}."
                + (f" py-spy showed the {quote(desync[0].group)} TP group desynchronised ({desync[0].verdict})."
                   if desync else "")
                + (" Health checks kept answering 200 while frozen." if hangs else "")
                + (f" A restart at {_at(t.mitigated)} brought service back at {_at(t.resolved)}"
                   f" ({span(ttr)} after the start)." if t.mitigated and t.resolved and ttr is not None else ""))
    if not analysis.incident_found:
        heading = no_incident_heading(analysis)
        return heading[0].upper() + heading[1:]
    modes = failures.headline([f for f in analysis.findings if not analysis.superseded(f)])
    if hung := [v for v in latest(analysis.verdicts) if v.verdict in HANG_VERDICTS]:
        others = list(dict.fromkeys(f.kind.replace("_", " ") for f in modes if f.kind != "stuck_process"))
        return (" ".join(_hung_sentence(same, quote) for same in _by_verdict(hung))
                + " The evidence holds no progress lines to say when it stopped."
                + (f" Also in the evidence: {', '.join(others)}." if others else ""))
    if modes:
        others = list(dict.fromkeys(f.kind.replace("_", " ") for f in modes[1:] if f.kind != modes[0].kind))
        return quote(modes[0].text) + (f" Also in the evidence: {', '.join(others)}." if others else "")
    anomalies = [f for f in analysis.findings if is_anomaly(f) and not analysis.superseded(f)]
    first = min((f for f in anomalies if f.at), key=lambda f: f.at, default=None)  # type: ignore[arg-type, return-value]
    return ("No engine froze in the evidence." + (f" The first anomaly: {quote(first.text)}" if first else ""))


BRIEF_WIDTH = 100


def brief(analysis: Analysis) -> str:
    """The headline block (`forensics analyze --brief`, the README's): what happened in one
    sentence, TTD / TTM / TTR, and each other symptom track with how it relates, wrapped at
    BRIEF_WIDTH. Built from the findings, so the README cannot say more than a run shows."""
    import textwrap

    with in_display_zone(analysis):
        t = analysis.key_times
        sentence = verdict_sentence(analysis, str)
        if not analysis.incident_found:
            sentence += " " + "; ".join(analysis.checked()) + "."
        lines = textwrap.wrap(sentence, BRIEF_WIDTH)
        measures = "   ".join(f"{label} {span(s)}" for label, name in (("TTD", "detected"), ("TTM", "mitigated"),
                                                                        ("TTR", "resolved"))
                               if (s := t.seconds(name)) is not None)
        if measures:
            lines.append(measures)
        main = analysis.main_track
        for track in analysis.tracks:
            if track.name == main:
                continue
            when = f" ({_at(track.first)}–{_at(track.last)})" if track.first else ""
            related = next((link for link in analysis.links if track.name in link), "")
            kept = ": kept apart, a common cause only a hypothesis" if "separate problems" in related else ""
            lines += textwrap.wrap(f"also: {track.name}{when}{kept}", BRIEF_WIDTH)
    return "\n".join(lines)


def _root_cause_prompt(analysis: Analysis, modes: list[Finding]) -> str:
    """What people must add under Root Causes, asked so that it agrees with what the evidence showed."""
    last = {v.verdict for v in latest(analysis.verdicts)}
    if "TP_DESYNC" in last or any(f.facts.get("verdict") == "TP_DESYNC" for f in modes if f.kind == "collective_verdict"):
        asked = "why the ranks took different paths (the underlying bug)"
    elif "UNIFORM_WAIT" in last:
        asked = ("what every rank waited on together (the device, the transport, a peer outside the dumps): the "
                 "ranks agree with each other, so the cause is below them")
    elif modes:
        asked = f"why the {modes[0].kind.replace('_', ' ')} happened (what the evidence cannot say)"
    else:
        asked = "the underlying cause"
    return asked + ", and whether the separate symptom tracks share a cause (only a hypothesis so far)."


def draft(analysis: Analysis, redact: Redact | None = None) -> str:
    """The post-mortem draft as Markdown, times in the analysis' display zone."""
    with in_display_zone(analysis):
        return _draft(analysis, redact)


SKIPPED_NAMED = 50  # files not read the draft names one by one


def _draft(analysis: Analysis, redact: Redact | None) -> str:
    zone = analysis.display_zone
    day = f", incident of {incident_day(analysis)}" if incident_day(analysis) else ""
    own = title_redact(analysis.timeline.incident.title_written, redact)  # the user's own words stay theirs
    out: list[str] = [f"# Post-mortem: {_md(analysis.timeline.incident.title, own)}", "",
                      f"*Draft written by forensics from {_code(analysis.bundle.name, redact)}{day}; times in "
                      f"{zone}. Every statement below comes from the evidence; replace each TODO.*", ""]
    for section in (_summary, _impact, _root_causes, _trigger, _resolution, _detection, _action_items, _lessons,
                    _timeline_table, _not_read):
        out += section(analysis, redact)
    return "\n".join(out)


def _summary(analysis: Analysis, redact: Redact | None) -> list[str]:
    """The answer in a sentence, what was checked when nothing was found, and separate symptoms."""
    main = analysis.main_track
    out: list[str] = ["## Summary", "", verdict_sentence(analysis, lambda text: _md(text, redact))]
    if not analysis.incident_found:
        out += [f"- {_md(line, redact)}" for line in analysis.checked()]
    others = [tr for tr in analysis.tracks if tr.name not in (main, "data quality", "errors")]
    for track in others:
        out.append(f"A separate symptom, the {track.name}, was seen {_at(track.first)}–{_at(track.last)}.")
    out += ["", TODO + " a one-paragraph summary for readers outside the team.", ""]

    return out


def _impact(analysis: Analysis, redact: Redact | None) -> list[str]:
    """What the evidence counts of failed requests or lost work, from the start until service came back."""
    t = analysis.key_times
    out: list[str] = ["## Impact", ""]
    numbers = analysis.impact()
    if numbers:
        out.append(f"From the start ({_at(t.started)}) until service came back ({_at(t.resolved)}):")
        out += [f"- {_md(item.sentence(), redact)}" for item in numbers]
    else:
        out.append("The evidence holds no count of failed requests or lost work.")
    out += ["", TODO + " users and customers affected, SLO budget spent, revenue or contractual impact.", ""]

    return out


def _root_causes(analysis: Analysis, redact: Redact | None) -> list[str]:
    """Failure modes, stack verdicts (one snapshot alone is not yet a cause), consequences and links."""
    verdicts = latest(analysis.verdicts)
    desync = [v for v in verdicts if v.verdict == "TP_DESYNC"]
    out: list[str] = ["## Root Causes", ""]
    modes = failures.headline(analysis.reported())
    for f in modes:
        out.append(f"- {_md(f.text, redact)}")
    corroborated = bool(_of(analysis, "frozen") or modes)
    for v in desync or verdicts:
        if v.round == 0 and not v.progress and not corroborated:
            # one snapshot, nothing else showing trouble: what it shows, not yet a cause
            out.append(f"- Not yet a root cause (one round of dumps, nothing else in the evidence shows trouble): "
                       f"{_md(v.explanation, redact)}")
        else:
            out.append(f"- {_md(v.explanation, redact)}")
    if not verdicts and not modes:
        out.append("- No py-spy stacks in the bundle: the engines' state when frozen is not in the evidence.")
    for component, cause, evidence in analysis.consequences():
        out.append(f"- {_md(component, redact)} is a consequence, not a second root cause (a hypothesis the evidence "
                   f"supports): {_md('; '.join(evidence), redact)}. To confirm: {_md(component, redact)}'s hand-over "
                   f"queue to {_md(cause, redact)} (KV transfers waiting) at its last batch.")
    for text in analysis.links:
        out.append(f"- {_md(text, redact)}")
    out += ["", TODO + " " + _root_cause_prompt(analysis, modes), ""]

    return out


def _trigger(analysis: Analysis, redact: Redact | None) -> list[str]:
    """What the main track showed in the minutes before the start."""
    t = analysis.key_times
    main = analysis.main_track
    out: list[str] = ["## Trigger", ""]
    before = [f for f in analysis.findings if f.at and t.started and f.track == main
              and 0 < (t.started - f.at).total_seconds() <= TRIGGER_LOOKBACK_S]
    if before:
        out.append(f"In the {span(TRIGGER_LOOKBACK_S)} before the start ({_at(t.started)}):")
        out += [f"- {_at(f.at)} {_md(f.text, redact)}" for f in sorted(before, key=lambda f: f.at or t.started)]
    else:
        out.append("Nothing notable in the evidence in the two minutes before the start.")
    out += ["", TODO + " confirm the trigger (a client's mass cancellation? a deploy? load?).", ""]

    return out


def _resolution(analysis: Analysis, redact: Redact | None) -> list[str]:
    """Mitigations, restarts and when service came back."""
    t = analysis.key_times
    out: list[str] = ["## Resolution", ""]
    for f in _of(analysis, "mitigation", "restart"):
        out.append(f"- {_at(f.at)} {_md(f.text, redact)}")
    resolved = _md(t.how.get("resolved", "not in the evidence"), redact)
    out.append(f"- Resolved at {_at(t.resolved)}: {resolved}" if t.resolved else f"- Resolved: {resolved}")
    out += [""]

    return out


def _detection(analysis: Analysis, redact: Redact | None) -> list[str]:
    """When and how it was detected, the blind spots, and the alert that would have paged."""
    t = analysis.key_times
    hangs = _of(analysis, "silent_hang")
    out: list[str] = ["## Detection", ""]
    detected = _md(t.how.get("detected", "not in the evidence"), redact)
    out.append((f"Detected at {_at(t.detected)} ({detected}), " if t.detected else f"Detected: {detected}; ")
               + (f"{span(s)} after the start." if (s := t.seconds("detected")) is not None
                  else "time to detect unknown."))
    for f in hangs:
        out.append(f"- Blind spot: {_md(f.text, redact)}")
    rule = analysis.alert()
    if rule is not None and rule.fires_at is not None:
        earlier = (f", {span((t.detected - rule.fires_at).total_seconds())} before it was detected"
                   if t.detected and t.detected > rule.fires_at else
                   f", {span((rule.fires_at - t.detected).total_seconds())} after it was detected (scrapes every "
                   f"{rule.scrape_s} s need a window of {span(rule.window.total_seconds())})"
                   if t.detected else "")
        out.append(f"- An alert on progress rather than health (`alerts.yml`: no tokens for "
                   f"{span(rule.window.total_seconds())} while requests were pending, for 1m) would have paged at "
                   f"{_at(rule.fires_at)} for {_md(rule.instance, redact)}{earlier}; `promtool test rules "
                   "alerts.test.yml` replays this incident's samples to show it firing then and silent again once the "
                   "engines worked.")
    out += ["", TODO + " which alert fired (if any) and who was paged.", ""]

    return out


def _action_items(analysis: Analysis, redact: Redact | None) -> list[str]:
    """The suggestions the findings call for, as a table people complete."""
    out: list[str] = ["## Action Items", "", "| action item | type | priority | owner | bug |", "|---|---|---|---|---|"]
    kinds = {f.kind for f in analysis.findings}
    for kind, (text, kind_of_item, priority) in SUGGESTIONS.items():
        if kind in kinds:
            if kind == "silent_hang" and analysis.alert() is not None:
                text += " `alerts.yml` holds the rule, for this deployment's metric names."
            out.append(f"| {text} | {kind_of_item} | {priority} | TODO | TODO |")
    out += ["| TODO | mitigate / prevent / detect / process | TODO | TODO | TODO |", ""]

    return out


def _lessons(analysis: Analysis, redact: Redact | None) -> list[str]:
    """What went well, what went wrong, where we got lucky: what the evidence says of each."""
    t = analysis.key_times
    hangs = _of(analysis, "silent_hang")
    out: list[str] = ["## Lessons Learned", "", "### What went well", ""]
    if t.resolved and t.mitigated:
        back = span((t.resolved - t.mitigated).total_seconds())
        out.append(f"- The restart worked: healthy {back} after it was issued.")
    out += ["", TODO + " what else went well.", "", "### What went wrong", ""]
    for f in hangs:
        green = span(((f.until or f.at) - f.at).total_seconds()) if f.at else "?"
        out.append(f"- Health checks stayed green for {green} "
                   f"while {_md(f.component, redact)} was frozen.")
    out += ["", TODO + " what else went wrong.", "", "### Where we got lucky", ""]
    dumped = [v.at for v in latest(analysis.verdicts) if v.at]
    if dumped and t.mitigated and max(dumped) < t.mitigated:
        out.append(f"- The stacks were dumped at {_at(max(dumped))}, "
                   f"{span((t.mitigated.replace(microsecond=0) - max(dumped).replace(microsecond=0)).total_seconds())} "
                   f"before the restart at {_at(t.mitigated)} "
                   "destroyed them: without them the desync would be a guess.")
    out += ["", TODO + " near misses.", ""]
    return out


def _timeline_table(analysis: Analysis, redact: Redact | None) -> list[str]:
    """Every reported finding in time order, in the display zone (and UTC beside it when that differs)."""
    zone = analysis.display_zone
    utc = zone != "UTC"
    out: list[str] = ["## Timeline", "",
                      f"| date and time ({zone}) |" + (" UTC |" if utc else "") + " track | kind | what happened |",
                      "|---|" + ("---|" if utc else "") + "---|---|---|"]
    for f in _timeline_rows(analysis):
        times = [_stamp(f.at), f"{f.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"] if f.at else ["time unknown"] * 2
        when = " | ".join(times[:2 if utc else 1])
        out.append(f"| {when} | {_md(f.track, redact)} | {f.kind} | {_md(f.text, redact)} |")
    out.append("")
    return out


def _not_read(analysis: Analysis, redact: Redact | None) -> list[str]:
    """The bundle's files that were not read, each with why: evidence nobody looked at is a fact too."""
    skipped = analysis.timeline.manifest.get("skipped") or []
    if not skipped:
        return []
    out = ["## Evidence not read", "", f"{len(skipped):,} file{'s' if len(skipped) > 1 else ''} of the bundle "
           "could not be read; each with why:", ""]
    out += [f"- {_code(s['path'], redact)}: {_md(s['reason'], redact)}" for s in skipped[:SKIPPED_NAMED]]
    if len(skipped) > SKIPPED_NAMED:
        out.append(f"- … and {len(skipped) - SKIPPED_NAMED:,} more (summary.json names them)")
    return out + [""]
