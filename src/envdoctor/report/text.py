"""The human report, drawn with rich: a verdict, a checklist by area, then one block per finding.

Concise by default, like flutter doctor and ruff's concise format: the
verdict line, one line per area (packages, channels, limits, scripts,
storage, GPU, loader: ✓, what is wrong, or "not checked" and why), then one
block per rule with its fix, identical findings grouped ("SPW001 in 3
files"). `verbose` adds each finding's evidence, drawn as indented
`key: value` lines. Wrapped lines keep their indent, so the report reads at
80 columns. Every string from outside goes through `report.safe` and into
rich `Text` objects, so neither control characters nor rich markup in a file
or package name reach the terminal.

The verdict and the checklist are the report's own (`Report.verdict`,
decided once by `envdoctor.verdict`): this module words them, it does not
decide them, so text, Markdown, GitHub, SARIF and JSON agree.
"""
from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

from envdoctor.model import NO_VERDICT, Finding, Report, Severity, Verdict
from envdoctor.report.safe import MAX_ITEMS, clean_report, clean_tree, printable, printable_block

if TYPE_CHECKING:  # rich is imported where a report is drawn, not with this module
    from rich.console import Console, RenderableType
    from rich.text import Text

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_MARK = {"error": "✗", "warning": "!", "info": "i"}
#: How the checklist names each area of the verdict (`envdoctor.verdict.AREAS`) on screen.
AREA_LABELS = {"system": "limits", "spawn": "scripts", "gpu": "GPU"}
#: Findings of one rule shown in full before "… and N more".
GROUP_LIMIT = 10
#: Rules shown in full before the rest are counted (a report with a million findings stays readable).
BLOCK_LIMIT = 40
SVG_WIDTH = 100


def severity_counts(findings: Iterable[Finding]) -> dict[str, int]:
    """Findings per severity, like Report.summary but by identity (a million findings in well under a second)."""
    error = warning = info = 0
    for finding in findings:
        level = finding.severity
        if level is Severity.ERROR:
            error += 1
        elif level is Severity.WARNING:
            warning += 1
        else:
            info += 1
    return {"error": error, "warning": warning, "info": info}


def summary_line(report: Report, counts: dict[str, int] | None = None) -> str:
    counts = counts or severity_counts(report.findings)
    parts = [f"{counts['error']} error{'s' if counts['error'] != 1 else ''}",
             f"{counts['warning']} warning{'s' if counts['warning'] != 1 else ''}",
             f"{counts['info']} info"]
    return ", ".join(parts)


def format_value(value: object, depth: int = 0) -> str:
    """A value on one line (Markdown tables, one-line summaries), bounded and printable."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if depth > 3:
        return "…"
    if isinstance(value, (list, tuple)):
        items = [format_value(v, depth + 1) for v in value[:8]]
        more = f", … {len(value) - 8} more" if len(value) > 8 else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, Mapping):
        pairs = list(value.items())
        body = ", ".join(f"{printable(k, 80)}: {format_value(v, depth + 1)}" for k, v in pairs[:8])
        return "{" + body + (f", … {len(pairs) - 8} more" if len(pairs) > 8 else "") + "}"
    return printable(value, 300)


# -- the checklist: rendered from the report's verdict, decided by envdoctor.verdict ----------------

def area_label(area: str) -> str:
    return AREA_LABELS.get(area, area)


def verdict_of(report: Report) -> Verdict:
    """The verdict the engine decided; a report assembled without one renders as "no verdict"."""
    return report.verdict if report.verdict is not None else NO_VERDICT


def area_line(report: Report, area: str, names: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """One area of the checklist as (mark key, text): the mark key is a severity, "unchecked", "skipped",
    "n/a" or None for ✓."""
    verdict = verdict_of(report)
    status, detail = verdict["areas"][area], verdict["details"][area]
    if names is None:
        names = first_names(report.findings)
    rules, count = detail["rules"], detail["findings"]
    if status in ("problem", "ok") and count:  # an ok area may hold info findings: they are shown, as notes
        if len(rules) == 1:
            summary = f"{rules[0]} {printable(names.get(rules[0], ''), 80)}" + (f" ({count} findings)" if count > 1 else "")
        else:
            summary = f"{count} findings: " + ", ".join(rules[:6]) + (" …" if len(rules) > 6 else "")
        return detail["worst"], summary
    if status == "ok":
        return None, "✓"
    if status == "not-applicable":
        return "n/a", f"not applicable ({printable(detail['reason'] or '', 120)})"
    cause, reason = detail["cause"], printable(detail["reason"] or "", 120)
    if cause == "failed":
        return "unchecked", "not checked: " + reason
    if cause == "no-facts":
        return "skipped", "not checked"
    return "skipped", f"not checked ({reason})"


def first_names(findings: Iterable[Finding]) -> dict[str, str]:
    """Rule id -> its name, from the findings (each rule's first)."""
    names: dict[str, str] = {}
    for finding in findings:
        if finding.rule not in names:
            names[finding.rule] = finding.name
    return names


# -- findings --------------------------------------------------------------------------------------

def group_findings(findings: Iterable[Finding]) -> list[list[Finding]]:
    """Findings grouped by rule and severity, in the order they come (worst first).

    A script with several findings of one rule (evidence `script`) gets a block
    of its own, whatever their severity: every start in that file is listed
    together, so the file is fixed once. Single findings of many files still
    group by rule.
    """
    findings = list(findings)
    per_script: dict[tuple[str, str], int] = {}
    for finding in findings:
        script = _script(finding)
        if script is not None:
            per_script[(finding.rule, script)] = per_script.get((finding.rule, script), 0) + 1
    groups: dict[tuple[str, object], list[Finding]] = {}
    for finding in findings:  # id(): severities are enum singletons, and hashing an Enum is slow
        script = _script(finding)
        several = script is not None and per_script[(finding.rule, script)] > 1
        groups.setdefault((finding.rule, ("script", script) if several else id(finding.severity)), []).append(finding)
    return list(groups.values())


def _script(finding: Finding) -> str | None:
    script = finding.evidence.get("script") if isinstance(finding.evidence, Mapping) else None
    return script if isinstance(script, str) else None


def _script_of(group: list[Finding]) -> str | None:
    """The one script every finding of the group is about, when they name one."""
    scripts = {f.evidence.get("script") if isinstance(f.evidence, Mapping) else None for f in group}
    script = scripts.pop() if len(scripts) == 1 else None
    return script if isinstance(script, str) else None


def _common_tail(messages: list[str]) -> str:
    """The sentences every message ends with (the shared explanation), or ""."""
    if len(messages) < 2:
        return ""
    split = [m.split(". ") for m in messages]
    tail: list[str] = []
    for parts in zip(*(reversed(s) for s in split)):
        if len(set(parts)) != 1:
            break
        tail.insert(0, parts[0])
    if not tail or any(len(s) <= len(tail) for s in split):
        return ""
    return ". ".join(tail)


def _where(finding: Finding) -> str:
    loc = finding.location
    if loc is None:
        return ""
    return f"{printable(loc.path, 300)}:{loc.line}:{loc.column}"


def _evidence_lines(value: object, indent: int, depth: int = 0) -> list[tuple[int, str]]:
    """Evidence as (indent, text) lines: `key: value`, nested tables and lists indented below."""
    lines: list[tuple[int, str]] = []
    if isinstance(value, Mapping):
        items = list(value.items())
        for key, item in items[:MAX_ITEMS]:
            key_text = printable(key, 80)
            if _is_scalar(item) or depth >= 3:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            elif isinstance(item, (list, tuple)) and all(_is_scalar(v) for v in item) and len(format_value(item)) < 60:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            elif not item:
                lines.append((indent, f"{key_text}: {format_value(item)}"))
            else:
                lines.append((indent, f"{key_text}:"))
                lines += _evidence_lines(item, indent + 2, depth + 1)
        if len(items) > MAX_ITEMS:
            lines.append((indent, f"… {len(items) - MAX_ITEMS} more"))
    elif isinstance(value, (list, tuple)):
        for item in value[:MAX_ITEMS]:
            if isinstance(item, Mapping) and item:  # a YAML-like entry: "- first: …", the rest under it
                pairs = list(item.items())[:12]
                for number, (key, inner) in enumerate(pairs):
                    lines.append((indent + (2 if number else 0), f"{'- ' if not number else ''}{printable(key, 80)}: "
                                                                 f"{format_value(inner)}"))
            else:
                lines.append((indent, f"- {format_value(item)}"))
        if len(value) > MAX_ITEMS:
            lines.append((indent, f"… {len(value) - MAX_ITEMS} more"))
    else:
        lines.append((indent, format_value(value)))
    return lines


def _is_scalar(value: object) -> bool:
    return not isinstance(value, (Mapping, list, tuple))


class _Writer:
    """Prints Text at a left indent; wrapped lines hang `hang` columns further in."""

    def __init__(self, console: Console) -> None:
        from rich.text import Text

        self.console, self._text = console, Text

    def line(self, text: str | Text = "", indent: int = 0, style: str = "", hang: int = 2) -> None:
        body = text if not isinstance(text, str) else self._text(text, style=style)
        width = max(20, self.console.width - indent)
        lines: list[Text] = []
        for paragraph in body.split("\n") if "\n" in body.plain else [body]:  # a line break stays one
            room = width if not lines else width - hang
            lines += [paragraph[start:end] for start, end in word_spans(paragraph.plain, room, width - hang)] or \
                [paragraph]
        for number, part in enumerate(lines):
            part.rstrip()
            pad = indent + (hang if number else 0)
            self.console.print(self._text(" " * pad) + part, soft_wrap=True)

    def code(self, text: str, indent: int) -> None:
        """A command or a path on a line of its own, whole: never wrapped, so it pastes as it is."""
        self.console.print(self._text(" " * indent + text), soft_wrap=True)

    def text(self) -> Text:
        return self._text()


def word_spans(plain: str, width: int, rest_width: int) -> list[tuple[int, int]]:
    """Where `plain` breaks into lines of at most `width` cells (the first) and `rest_width` (the others),
    at spaces only: a word wider than its line (a long path) is kept whole and overflows, never cut."""
    from rich.cells import cell_len

    spans: list[tuple[int, int]] = []
    start: int | None = None
    end = used = 0
    for word in re.finditer(r"[^ \t\n]+", plain):  # a no-break space (a figure and its unit) holds a word together
        room = max(20, width if not spans else rest_width)
        if start is None:
            start = 0  # the first line keeps its leading spaces
            used = cell_len(plain[:word.end()])
        elif used + cell_len(plain[end:word.end()]) > room:
            spans.append((start, end))
            start, used = word.start(), cell_len(word.group())
        else:
            used += cell_len(plain[end:word.end()])
        end = word.end()
    if start is not None:
        spans.append((start, end))
    return spans


def _write_group(out: _Writer, group: list[Finding], verbose: bool) -> None:
    script = _script_of(group) if len(group) > 1 else None
    _write_group_head(out, group, script)
    # One script's findings are listed in full (each is a line to move under the guard).
    limit = min(len(group), MAX_ITEMS) if script is not None else GROUP_LIMIT
    shown = group[:limit]
    messages, tail, shared = _group_messages(shown)
    fixes = list(dict.fromkeys(_generic(f, f.fix) for f in shown if f.fix))
    mixed = len({f.severity for f in group}) > 1
    runs_steps = all(f.fix_steps for f in shown if f.fix)
    for finding, message in zip(shown, messages):
        _write_finding(out, finding, message, mixed)
        if verbose and finding.evidence:
            for indent, text in _evidence_lines(dict(finding.evidence), 6):
                out.line(text, indent=indent, style="dim")
        if len(fixes) > 1 and finding.fix:
            _write_fix(out, finding.fix, indent=4, runs_steps=bool(finding.fix_steps))
    if len(group) > limit:
        out.line(f"… and {len(group) - limit} more {group[0].rule} findings (see --format json)", indent=2)
    if tail and (verbose or shared):  # the shared explanation, once; concise output leaves it to -v
        out.line(printable_block(tail), indent=2)
    if len(fixes) == 1:
        _write_fix(out, fixes[0], indent=2, runs_steps=runs_steps)


def _group_messages(shown: list[Finding]) -> tuple[list[str], str, bool]:
    """(each finding's message less what they share, what they share, whether they share it all)."""
    messages = [own_message(f) for f in shown]
    shared = len(set(messages)) == 1 and len(shown) > 1 and all(f.location for f in shown)
    tail = messages[0] if shared else _common_tail(messages)
    if shared:
        return ["" for _ in messages], tail, shared
    if tail:
        return [m[: len(m) - len(tail)].rstrip(". ") + "." for m in messages], tail, shared
    return messages, tail, shared


def _write_group_head(out: _Writer, group: list[Finding], script: str | None) -> None:
    """`✗ PKG001 name`, and where the group's findings are: one script, N files, or ×N."""
    first = group[0]
    level = first.severity.value
    head = out.text()
    head.append(f"{_MARK[level]} {first.rule} ", style=_STYLE[level])
    head.append(printable(first.name, 80), style="bold")
    files = list(dict.fromkeys(f.location.path for f in group if f.location))
    if script is not None:
        head.append(f" in {printable(script, 300)} ×{len(group)}")
    elif len(group) > 1:
        head.append(f" in {len(files)} files" if len(files) == len(group) and files else f" ×{len(group)}")
    out.line(head)


def _write_finding(out: _Writer, finding: Finding, message: str, mixed: bool) -> None:
    """One finding's line: its own mark when the group mixes severities, where it is, its message."""
    where = _where(finding)
    line = out.text()
    if mixed:
        line.append(f"{_MARK[finding.severity.value]} ", style=_STYLE[finding.severity.value])
    if where:
        line.append(where, style="dim")
        line.append("  " if message else "")
    line.append(printable_block(message))
    out.line(line, indent=2)


def own_message(finding: Finding) -> str:
    """The message without a leading `file:line: ` that the location already shows."""
    loc = finding.location
    if loc is not None:
        head, sep, rest = finding.message.partition(f":{loc.line}: ")
        if sep and head and loc.path.endswith(head):
            return rest
    return finding.message


def _generic(finding: Finding, text: str) -> str:
    """A fix that names its own file, with the file named generically, so per-file fixes group."""
    loc = finding.location
    return text.replace(loc.path, "each file") if loc is not None and loc.path in text else text


#: A fix's trailing shell comment (`fix_of`'s note): `cmd   # why`.
_NOTE = re.compile(r"^(?P<command>\S.*?) {3}# (?P<note>.*)$")
#: A span in backticks: a command to paste (a line of its own) when it starts as a shell command does.
_CODE_SPAN = re.compile(r"`([^`]+)`")
#: The programs a fix's commands start with (a first word holding a `/` or `VAR=` is a command too).
_SHELL_WORDS = frozenset({
    "envdoctor", "pip", "pip3", "python", "python3", "conda", "mamba", "micromamba", "uv", "uvx", "pixi", "apt",
    "apt-get", "dnf", "yum", "sudo", "mv", "cp", "rm", "ln", "chmod", "mkdir", "cd", "ulimit", "export", "unset",
    "torchrun", "docker", "sysctl", "systemctl", "loginctl", "mount", "nvidia-smi", "ldd", "ldconfig", "pipx"})


def _is_command(span: str) -> bool:
    first = span.split(" ", 1)[0]
    return " " in span.strip() and (first in _SHELL_WORDS or "/" in first or bool(re.match(r"[A-Z_]+=", first)))
#: A fix that is one call or assignment to type in (`DataLoader(dataset, num_workers=2)`).
_CALL = re.compile(r"^[A-Za-z_][\w.]*\(.*\)$")


def fix_blocks(fix: str, runs_steps: bool = False) -> list[tuple[str, str]]:
    """A fix as ("code", line) and ("prose", text) blocks, in order: what to paste, and the words around it.

    Code is a fix's steps (`runs_steps`: its first line is the `&&` chain `fix_steps` holds, one step a line,
    each but the last ending in `&&`, as a shell reads them), a command before a `   # note`, a call, a line
    indented by four spaces (SPW001's guard), and a shell command in backticks. Prose is
    everything else, re-flowed by the writer."""
    blocks: list[tuple[str, str]] = []
    for number, line in enumerate(fix.splitlines() or [""]):
        if line.startswith("    ") and number:
            blocks.append(("code", line))  # its own indent kept, under the fix
            continue
        note = _NOTE.match(line)
        command = note.group("command") if note else line if (runs_steps and number == 0) or _CALL.match(line) \
            else None
        if command is not None:
            steps = command.split(" && ")
            blocks += [("code", step + (" &&" if i < len(steps) - 1 else "")) for i, step in enumerate(steps)]
            if note:
                blocks.append(("prose", note.group("note")))
            continue
        last = 0
        for span in _CODE_SPAN.finditer(line):
            if not _is_command(span.group(1)):
                continue
            before, after = line[last:span.start()].rstrip(), line[span.end():]
            if before.endswith("(") and after.startswith(")"):  # "a venv (`cmd`) and": "a venv: / cmd / and"
                before, last = before[:-1].rstrip() + ":", span.end() + 1
            else:
                last = span.end()
            blocks.append(("prose", before.strip()))
            blocks.append(("code", span.group(1)))
        blocks.append(("prose", line[last:].strip()))
    return [(kind, text) for kind, text in blocks if text]


def _write_fix(out: _Writer, fix: str, indent: int, runs_steps: bool = False) -> None:
    """`fix: ` and the fix: prose wrapped at the width, each command or path whole on its own line, four
    columns in, so a paste never carries a line break into the shell."""
    blocks = fix_blocks(printable_block(fix), runs_steps) or [("prose", "")]
    first = out.text()
    first.append("fix: ", style="green")
    kind, text = blocks.pop(0)
    first.append(text)
    if kind == "code":  # the label, then the command whole on the rest of its line; the rest under it
        out.console.print(out.text().append(" " * indent) + first, soft_wrap=True)
        prose = code = indent + 5
    else:  # prose wraps two columns in; a command stands two further in
        out.line(first, indent=indent)
        prose, code = indent + 2, indent + 4
    for kind, text in blocks:
        if kind == "code":
            out.code(text, code if not text.startswith("    ") else indent + 5)
        else:
            out.line(text, indent=prose, hang=0)


# -- the whole report ------------------------------------------------------------------------------

def _heading(report: Report) -> str:
    target = report.target
    where = f"{printable(target.get('kind') or '?', 40)} {printable(target.get('prefix') or '?', 300)}"
    python = f"Python {printable(target['python'], 40)}" if target.get("python") else "no Python found"
    return (f"envdoctor {printable(report.tool.get('version', '?'), 40)} — {where} ({python}) "
            f"on {printable(report.host.get('hostname', '?'), 100)}")


def verdict_line(report: Report, counts: dict[str, int] | None = None) -> tuple[str | None, str]:
    """The verdict as (severity mark, text): the worst severity found, or None for ✓; a result of
    `unchecked` is marked as a warning (nothing found is not an all-clear when not everything was looked at)."""
    verdict = verdict_of(report)
    text = summary_line(report, counts)
    if verdict["unchecked"]:
        text += f" — not checked: {', '.join(area_label(a) for a in verdict['unchecked'])}"
    if verdict["result"] == "unchecked" and verdict["worst"] in (None, "info"):
        return "warning", text
    return verdict["worst"], text


def write(report: Report, console: Console, verbose: bool = False) -> None:
    """Draw the report on a rich Console."""
    out = _Writer(console)
    if report.facts.get("fleet"):  # compare / --distributed: many nodes, no single environment to name
        _write_fleet(out, report)
    elif report.loop is not None:  # envdoctor run: the user's own loop, not an environment's checklist
        from envdoctor.report.loop_view import loop_lines

        for indent, line in loop_lines(clean_tree(report.loop)):
            out.line(line, indent=indent, hang=11 if indent == 2 else 2)  # wrapped lines under the values
    else:
        _write_checklist(out, report)
    _write_findings(out, report, verbose)
    if report.loader:
        from envdoctor.report.loader_view import loader_renderables

        out.line()
        said: dict[str, str] = {}  # what the findings already said, so the loader's view says it once
        for finding in report.findings[:GROUP_LIMIT * BLOCK_LIMIT]:
            said[finding.rule] = said.get(finding.rule, "") + " " + finding.message
        _write_renderables(out, loader_renderables(clean_tree(report.loader), said))
    _write_errors(out, report)
    if report.findings and not verbose and any(f.evidence for f in report.findings):
        out.line("-v: the evidence; `envdoctor explain RULE`: why it matters.", style="dim")


def write_findings(report: Report, console: Console, heading: str, verbose: bool = False) -> None:
    """Only the findings, under a heading: what `envdoctor run` adds once the command ended, after the window's
    report (the loop's figures) went out while it ran."""
    out = _Writer(console)
    out.line(heading, style="bold")
    _write_findings(out, report, verbose)
    if report.findings and not verbose and any(f.evidence for f in report.findings):
        out.line("-v: the evidence; `envdoctor explain RULE`: why it matters.", style="dim")


def _write_renderables(out: _Writer, items: Iterable[RenderableType]) -> None:
    """Lines of text through the writer (their wrapped lines indented), tables and the like as they are."""
    for item in items:
        if isinstance(item, out.text().__class__):
            out.line(item)
        else:
            out.console.print(item)


def _write_verdict(out: _Writer, report: Report) -> None:
    level, text = verdict_line(report)
    out.line(f"{_MARK.get(level or '', '✓')} {text}", style=_STYLE.get(level or "", "bold green"))
    out.line()


def _write_fleet(out: _Writer, report: Report) -> None:
    from envdoctor.report.fleet_view import fleet_heading, fleet_renderables

    shown = clean_report(report)
    out.line(printable(fleet_heading(shown, shown.facts["fleet"]), 400), style="bold")
    _write_verdict(out, report)
    _write_renderables(out, fleet_renderables(shown))


def _write_checklist(out: _Writer, report: Report) -> None:
    """The heading, the verdict and a line per area (those not selected named together)."""
    out.line(_heading(report), style="bold")
    _write_verdict(out, report)
    verdict = verdict_of(report)
    names = first_names(report.findings)
    unselected = []
    for area in verdict["areas"]:
        if verdict["details"][area]["cause"] == "not-selected":
            unselected.append(area_label(area))
            continue
        level, status = area_line(report, area, names)
        line = out.text()
        line.append(f"{area_label(area):<9} ", style="bold")
        style = _STYLE.get(level or "", "green" if level is None else "magenta" if level == "unchecked" else "dim")
        mark = _MARK.get(level or "", "")
        line.append(f"{mark} {status}" if mark else status, style=style)
        out.line(line, indent=2)
    if unselected:
        out.line(f"not checked (not selected): {', '.join(unselected)}", indent=2, style="dim")


def _write_findings(out: _Writer, report: Report, verbose: bool) -> None:
    groups = group_findings(report.findings)
    for group in groups[:BLOCK_LIMIT]:
        out.line()
        _write_group(out, group, verbose)
    if len(groups) > BLOCK_LIMIT:
        rest = sum(len(g) for g in groups[BLOCK_LIMIT:])
        out.line()
        out.line(f"… {rest} more findings of {len(groups) - BLOCK_LIMIT} more rules (see --format json)")


def _write_errors(out: _Writer, report: Report) -> None:
    if not report.errors:
        return
    out.line()
    out.line("Could not check", style="magenta underline")
    for error in report.errors[:MAX_ITEMS]:
        who = printable(error.get("rule") or f"probe {error.get('probe')}", 80)
        out.line(f"{who}: {printable(error.get('message', ''), 500)}", indent=2)
    if len(report.errors) > MAX_ITEMS:
        out.line(f"… {len(report.errors) - MAX_ITEMS} more", indent=2)


def make_console(file: IO[str] | None = None, width: int | None = None, record: bool = False,
                 color: bool | None = None) -> Console:
    """A rich Console that never reads markup or emoji codes in what it prints."""
    from rich.console import Console

    kwargs: dict[str, Any] = {"highlight": False, "emoji": False, "markup": False, "record": record}
    if width is not None:
        kwargs["width"] = width
    if file is not None:
        kwargs["file"] = file
    if color is False:
        kwargs.update(force_terminal=False, no_color=True)
    elif color is True:
        kwargs["force_terminal"] = True
    return Console(**kwargs)


def render(report: Report, width: int = 80, verbose: bool = False) -> str:
    """The report as plain text (no colour, fixed width), for files and tests."""
    buffer = io.StringIO()
    write(report, make_console(buffer, width=width, color=False), verbose=verbose)
    return buffer.getvalue()


def svg_text(report: Report, verbose: bool = False) -> str:
    """The text report as an SVG picture, always drawn SVG_WIDTH columns wide, whatever stdout is."""
    with open(os.devnull, "w", encoding="utf-8") as sink:
        console = make_console(sink, width=SVG_WIDTH, record=True, color=True)
        write(report, console, verbose=verbose)
        return str(console.export_svg(title="envdoctor"))
