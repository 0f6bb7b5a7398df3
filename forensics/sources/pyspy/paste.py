"""py-spy text as people paste it, made into the text py-spy writes, line numbers kept.

Dumps reach a bundle from tickets, chats and write-ups as often as from `py-spy dump` itself, and
people change them on the way: the `Process N:` / `Python v…` head is left off, frames lose their
indent or a markdown block indents everything, several `Thread` lines are stacked over one shared
frame list ("4 ranks were in:"), a dump is cut with `...`, an author writes `← note` after a
frame, `--native` frames lose their library, a shell prompt or `ps` output stands in front, and
SGLang's watchdog wraps a dump in `Pyspy dump for PID n` / `Pyspy failed to dump PID n`.

The lines a serving stack's watchdog writes around the dumps it takes (SGLang's `Pyspy dump for PID
{pid} ({cmd}):`, one `Pyspy failed (…)` per failed attempt, `All pyspy dump attempts failed for PID
{pid}.`) are data: `profiles/pastes/dump_wrappers.toml`, each with real samples. The log stamp before
a dump line (`[2026-07-07 07:20:50]`) is the dump's own time: it becomes the dump's capture header
(`# capture ts=… pid=…`), a stamp with no zone read as UTC and said so in the notes. Each failed
attempt becomes py-spy's `Error:` under such a header, so the reader quarantines it with the pid it
names (the stacks detector names it).

`normalize` rewrites such text into py-spy's own layout and returns, for every line it writes,
the line of the original it came from, so that the reader's rows and quarantine rows still point
at the user's file. A block of thread lines with no `Process` line above it becomes a process of
its own (pid = the main thread's id when it is an OS thread id, else unknown) titled
`HEADERLESS_TITLE`, which the reader turns back into "no title"; each `MainThread` of such a block
starts a new process, the way authors paste one rank after another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forensics.sources.common.compose import uncomposed
from forensics.sources.common.snapshot_time import HEADER_PREFIX, parse_time
from forensics.sources.pyspy.dump_wrappers import WRAPPER_MARKS, wrapped

HEADERLESS_TITLE = "<no Process line: pasted without its head>"
NO_PID = 0  # the pid written for a head-less process whose pid the text does not give

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOTE = re.compile(r"\)?\s{2,}(?:←|<-+|#\s).*$")  # "frame (file:1)     ← an author's note"
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_ELISION = re.compile(r"^\s*(?:\.\.\.|…|\[\.\.\.\]|<snip>|\.\.\. *\(.*\))\s*$")
_PROCESS = re.compile(r"^(?:Process \d+: |Signal \d+: )")
_THREAD = re.compile(r"^Thread (?P<id>0[xX][0-9A-Fa-f]+|\d+)(?: \((?:idle|active\+gil|active|gil)\))?"
                     r"(?:: \"(?P<name>.*)\")?\s*$")
_PLACED_FRAME = re.compile(r"^\S.* \([^()]*\)$")  # function (file[:line])
# a log line between dumps (`[2025-10-29 11:25:58 TP3] Watchdog timeout (self.watchdog_timeout=300)`,
# torch's `[rank1]:[E1029 11:25:58.…]`, glog's `E1029 11:25:58`): no function's name begins so
_LOG_LINE = re.compile(r"^\s*(?:\[rank\d+\]:)?\[?(?:\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|[IWEF]\d{4} \d{2}:\d{2}:\d{2})")
_BARE_NATIVE = re.compile(r"^(?:[A-Za-z_~][\w:.<>~,*& -]*|0x[0-9A-Fa-f.]+)$")  # a symbol with no library
_LOCALS = re.compile(r"^(?:        (?:Arguments|Locals)::?|            \S[^:]*: .*)$")
_KEEP = re.compile(r"^(?:Python v|Parent Process \d|Error: |Caused by:|# capture |=+ *(?:pid)? *\d* *=+$)")
_INDENTED_HEAD = re.compile(r"(?m)^(?P<indent>[ \t]+)(?:Thread (?:0[xX][0-9A-Fa-f]+|\d+)|Process \d+: )")
# What canonical py-spy output never holds: where any of it is found, the text is normalised.
_TRIGGERS = re.compile(
    r"\x1b\[|←|" + "|".join(re.escape(mark) for mark in WRAPPER_MARKS)
    + r"|(?m:^\s*(?:```|~~~))|(?m:^\s*(?:\.\.\.|…)\s*$)"
    r"|(?m:^[ \t]+(?:Thread|Process) \d)|(?m:^    [^\s(][^()\n]*$)|(?m:^Thread [^\n]*\n(?!    |Thread |\n|$))"
    r"|\A[A-Za-z0-9][\w.-]* +\| ")  # docker compose's prefix on the first line


# Frames alone, unindented, with no Thread or Process line anywhere: a stack copied out of a dump.
FRAMES_ONLY = re.compile(r"\A\s*(?:[^\s(][^()\n]* \([^()\n]*\.py:[0-9]+\)[ \t]*\n){2,}")
_ANY_HEAD = re.compile(r"(?m)^[ \t>]*(?:Thread|Process|Signal) (?:0[xX][0-9A-Fa-f]+|\d+)")


def frames_only(text: str) -> bool:
    """Whether `text` is frames pasted alone: no thread, process or signal line at all."""
    return bool(FRAMES_ONLY.match(text)) and not _ANY_HEAD.search(text)


WHOLE_CHECK_CHARS = 1 << 20  # pasted text is small; a bigger text is a tool's output, checked at its ends
END_CHARS = 1 << 18
_LITERAL_TRIGGERS = ("\x1b[", "←", *WRAPPER_MARKS)


def needs_normalizing(text: str) -> bool:
    """Whether `text` holds anything py-spy itself never writes (cheap: regular expressions only).

    A text up to WHOLE_CHECK_CHARS is searched whole. A longer one is a tool's output (a collector's
    rounds, py-spy itself): its literal paste marks are still searched everywhere, the line-shape
    ones only in its first and last END_CHARS (each line-anchored search costs about 4 ns a byte; a
    1,000-dump file took 5 s for it). A paste mark elsewhere in such a file leaves its lines to the
    reader, which quarantines what it cannot read, with the line: nothing is lost silently."""
    if any(mark in text for mark in _LITERAL_TRIGGERS) or frames_only(text):
        return True
    if len(text) <= WHOLE_CHECK_CHARS:
        if _TRIGGERS.search(text):
            return True
    elif _TRIGGERS.search(text[:END_CHARS]) or _TRIGGERS.search(text[-END_CHARS:]):
        return True
    first_thread = text.find("\nThread ") + 1 if not text.startswith("Thread ") else 0
    if first_thread < 0 or (first_thread == 0 and not text.startswith("Thread ")):
        return False
    return not re.search(r"(?m)^(?:Process|Signal) \d+: ", text[:first_thread])


@dataclass
class Normalized:
    """The text in py-spy's layout, the original line of each of its lines, and what was changed."""

    text: str
    origin: list[int]  # origin[i] = 1-based line of the original that line i + 1 came from
    notes: list[str] = field(default_factory=list)


@dataclass
class _Block:
    """Stacked thread lines of a head-less dump and the frame list they share."""

    threads: list[tuple[int, str, str | None, str]] = field(default_factory=list)  # (line, text, name, id)
    frames: list[tuple[int, str]] = field(default_factory=list)


def _dedent(lines: list[str]) -> list[str]:
    """Lines with a common indent taken off, when every Thread/Process line carries it (a markdown
    code block indented by four spaces or a tab) and none stands at the margin."""
    text = "\n".join(lines)
    indents = {m["indent"] for m in _INDENTED_HEAD.finditer(text)}
    if len(indents) != 1 or re.search(r"(?m)^(?:Thread (?:0x|\d)|Process \d)", text):
        return lines
    indent = indents.pop()
    return [line[len(indent):] if line.startswith(indent) else line for line in lines]


def _clean(line: str) -> str:
    line = _ANSI.sub("", line).rstrip("\r").rstrip()
    if "←" in line or "<-" in line or "  # " in line:
        cut = _NOTE.search(line)
        if cut:
            line = line[:cut.start()] + (")" if cut.group(0).startswith(")") else "")
    return line


def _frame(line: str, in_thread: bool) -> str | None:
    """`line` as a py-spy frame line, or None when it is not one here."""
    if _LOG_LINE.match(line):
        return None
    if line.startswith("    ") and not line.startswith("        ") and line.strip():
        body = line.strip()
    elif in_thread and line and not line[0].isspace() and _PLACED_FRAME.match(line):
        body = line  # frames pasted without their indent
    elif in_thread and line.startswith("\t") and line.strip():
        body = line.strip()
    else:
        return None
    if _PLACED_FRAME.match(body):
        return "    " + body
    if in_thread and _BARE_NATIVE.match(body):
        return f"    {body} (?)"  # a --native frame printed without its library: py-spy's "unknown"
    return None


class _Rewriter:
    """The pass over a paste's lines: what the previous lines opened decides what the next one is."""

    def __init__(self, notes: list[str]) -> None:
        self.out: list[str] = []
        self.origin: list[int] = []
        self.notes = notes
        self.in_process = False  # inside a dump that has its own Process line
        self.last = "none"  # what the previous meaningful line was: thread, frame, locals, other
        self.block: _Block | None = None  # a head-less dump being gathered
        self.headless_open = False  # a head-less process is open: its non-main threads join it
        self.zoneless: list[int] = []  # lines whose log stamp dated a dump with no zone (read as UTC)

    def emit(self, line: str, number: int) -> None:
        self.out.append(line)
        self.origin.append(number)

    def flush(self) -> None:
        """Write the head-less block gathered so far: each thread with the frames the block shares."""
        block = self.block
        if block is None:
            return
        shared = block.frames
        for number, thread_text, name, thread_id in block.threads:
            if not self.headless_open or name == "MainThread":
                pid = int(thread_id) if thread_id.isdigit() and name in (None, "MainThread") else NO_PID
                self.emit(f"Process {pid}: {HEADERLESS_TITLE}", number)
                self.emit("Python v?", number)
                self.emit("", number)
                self.headless_open = True
            self.emit(thread_text, number)
            for frame_number, frame_text in shared:
                self.emit(frame_text, frame_number)
        if len(block.threads) > 1 and shared:
            self.notes.append(f"line {block.threads[0][0]}: {len(block.threads)} thread lines share one frame list "
                              f"(grouped by the author): each thread gets those frames")
        self.block = None

    def line(self, number: int, line: str) -> None:
        """Rewrite one line, by the first of its kinds it is."""
        if not (self._marker(number, line) or self._thread(number, line) or self._frame_or_locals(number, line)):
            self._other(number, line)

    def _marker(self, number: int, line: str) -> bool:
        """A code fence, an elision, a watchdog's dump wrapper or a Process line."""
        if _FENCE.match(line):
            self.flush()
            self.headless_open, self.last = False, "other"
            self.emit("", number)
        elif _ELISION.match(line):
            if self.last in ("thread", "frame", "locals"):
                self.notes.append(f"line {number}: frames left out by whoever pasted the dump ('{line.strip()}')")
            self.emit("", number)
        elif (wrapper := wrapped(line)) is not None:
            self.flush()
            self.in_process, self.headless_open = False, False
            self.last = "other" if wrapper.kind == "dump" else "error"
            self._wrapper(number, line[:wrapper.start], wrapper.pid)
            if wrapper.kind != "dump":
                self.emit(f"Error: {wrapper.why}", number)
        elif _PROCESS.match(line):
            self.flush()
            self.in_process, self.headless_open, self.last = True, False, "other"
            self.emit(line, number)
        else:
            return False
        return True

    def _wrapper(self, number: int, before: str, pid: str) -> None:
        """The line SGLang writes before a dump or a failure: a capture header when its log stamp
        (the text before `Pyspy`) gives a date and time, else a banner naming the pid."""
        found = parse_time(before)
        if found is None:
            self.emit(f"=== pid {pid} ===", number)
            return
        at, zoned = found
        self.emit(f"{HEADER_PREFIX}ts={at:%Y-%m-%dT%H:%M:%S.%f}{'Z' if zoned else ''} pid={pid}", number)
        if not zoned:
            self.zoneless.append(number)

    def _thread(self, number: int, line: str) -> bool:
        thread = _THREAD.match(line)
        if thread is None:
            return False
        self.last = "thread"
        if self.in_process:
            self.emit(line, number)
            return True
        if self.block is not None and self.block.frames:
            self.flush()
        if self.block is None:
            self.block = _Block()
        self.block.threads.append((number, line, thread["name"], thread["id"]))
        return True

    def _frame_or_locals(self, number: int, line: str) -> bool:
        """A frame or a --locals line: into the head-less block, or out as it is."""
        in_thread = self.last in ("thread", "frame", "locals")
        frame = _frame(line, in_thread)
        kind, text = (("frame", frame) if frame is not None and in_thread
                      else ("locals", line) if _LOCALS.match(line) and self.last in ("frame", "locals") else (None, line))
        if kind is None:
            return False
        self.last = kind
        if self.block is not None:
            self.block.frames.append((number, text))
        else:
            self.emit(text, number)
        return True

    def _other(self, number: int, line: str) -> None:
        """A blank line, a line py-spy writes outside threads, or noise between dumps."""
        if not line.strip():
            if self.block is not None and self.block.frames:
                self.flush()
            self.emit("", number)
            return
        if _KEEP.match(line):
            self.flush()
            if not line.startswith(("Python v", "Parent Process")):
                self.in_process, self.headless_open = False, False
            self.last = "error" if line.startswith(("Error: ", "Caused by:")) else "other"
            self.emit(line, number)
            return
        if self.last == "error" and line.startswith("    "):
            self.emit(line, number)  # py-spy's numbered causes under "Caused by:": the reader keeps them as text
            return
        # Prose, a shell prompt, `ps` output: noise between dumps, written so that no reader
        # takes it for a dump line (a "    PID STAT" heading is not a damaged frame).
        self.flush()
        self.headless_open, self.last = False, "other"
        if self.in_process and line.startswith("    "):
            self.emit(line, number)  # inside a dump, a line that looks like py-spy's but is not: damage
        else:
            self.in_process = False
            self.emit("> " + line.strip(), number)


def normalize(text: str) -> Normalized:
    """`text` rewritten into py-spy's own layout (see the module's docstring)."""
    raw = text.split("\n")
    if text.endswith("\n"):
        raw.pop()
    notes: list[str] = []
    raw, container = uncomposed(raw)
    if container is not None:
        notes.append(f"docker compose's prefix before each line (`{container}  | `) taken off")
    lines = _dedent([_clean(line) for line in raw])
    inserted = None
    if frames_only(text):  # one thread's frames copied alone: read as the main thread of one process
        inserted = next(n for n, line in enumerate(lines) if line.strip()) + 1  # its line, counted from 1
        lines.insert(inserted - 1, 'Thread 0: "MainThread"')
        notes.append(f"line {inserted}: frames pasted without a thread or process line: read as the main thread "
                     "of one process, whose pid and status the text does not give")
    rewriter = _Rewriter(notes)
    for number, line in enumerate(lines, start=1):
        rewriter.line(number, line)
    rewriter.flush()
    if rewriter.zoneless:
        shown = ", ".join(str(n) for n in rewriter.zoneless[:8]) + (", …" if len(rewriter.zoneless) > 8 else "")
        notes.append(f"line{'s' if len(rewriter.zoneless) > 1 else ''} {shown}: the log stamp before the dump "
                     "(SGLang's watchdog line) is its capture time; it carries no zone: read as UTC")
    origin = rewriter.origin
    if inserted is not None:  # the lines after the made-up thread line are one further down than in the text
        origin = [n - 1 if n > inserted else n for n in origin]
    out = rewriter.out
    return Normalized("\n".join(out) + ("\n" if out else ""), origin, notes)
