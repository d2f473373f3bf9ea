"""Running the body of a function the walk has read: parameters bound, returns joined, memoised."""
from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from envdoctor.analysis.spawn.names import MAX_CALL_DEPTH, MAX_CALLS_FOLLOWED
from envdoctor.analysis.spawn.starts import StartTracker
from envdoctor.analysis.spawn.syntax import body_of, is_generator_node
from envdoctor.analysis.spawn.values import (
    Bound,
    ClassInfo,
    Const,
    Deferred,
    Either,
    Function,
    GuardFlag,
    Instance,
    Mapping_,
    NamespaceObj,
    Option,
    ParserObj,
    QualName,
    Seq,
    SettingsObj,
    Step,
    Unknown,
    Value,
    is_plain,
    join_all,
    read_off_unknown,
    tick,
)
from envdoctor.analysis.spawn.walker import HELD, Frame, Memo, Trace, holders

#: What a function's lines mention when it may build or start workers, or set what may decide their count
#: (`global NUM_WORKERS`, `KW.update(num_workers=2)`) (see skippable).
RELEVANT = re.compile(r"[Ll]oader|Process|Pool|Executor|spawn|start_processes|start_method|get_context|cuda|"
                      r"Trainer|Engine|\.fit\(|\.run\(|prepare|yield|async|multiprocessing|concurrent|"
                      r"num_workers|\bglobal\s")
#: Words one of which RELEVANT's every match contains: a text with none of them is searched no further
#: (the pattern tries each of its branches at every character; `in` finds a word much faster).
RELEVANT_WORDS = ("oader", "Process", "Pool", "Executor", "spawn", "start_", "get_context", "cuda", "Trainer",
                  "Engine", ".fit(", ".run(", "prepare", "yield", "async", "multiprocessing", "concurrent",
                  "num_workers", "global")
#: The names a function may call, looked up among the functions and classes the walk has read: those it
#: calls (`helper(`, `self.helper(`), reads an attribute of (`Feeder.build(`) or hands on as a value
#: (`partial(Feeder, n)`, `[Feeder]`). Possessive and anchored at a word's start: without trying every
#: shorter word inside each longer one (2.5 times faster on the functions of dgl's examples and NeMo).
CALLED = re.compile(r"\b([^\W\d]\w*+)\s*+[(.,)\]]")


def mentions_of(node: ast.AST, lines: Sequence[str]) -> tuple[bool, frozenset[str]]:
    """(does the function's or class's text mention what builds or starts workers, the names it may call:
    CALLED's, and a class's bases), read once.

    The names are read only when the text mentions nothing (`relevant` follows them only then). Kept on
    the node itself: every script that calls a shared module's function reads the same text.
    """
    known: tuple[bool, frozenset[str]] | None = getattr(node, "_envdoctor_mentions", None)
    if known is None:
        first = getattr(node, "lineno", 1)
        text = "\n".join(lines[first - 1:getattr(node, "end_lineno", None) or len(lines)])
        mentions = any(word in text for word in RELEVANT_WORDS) and RELEVANT.search(text) is not None
        called = frozenset() if mentions else frozenset(CALLED.findall(text)).union(base_names(node))
        known = (mentions, called)
        setattr(node, "_envdoctor_mentions", known)  # noqa: B010 - a mark of our own on the node
    return known


def base_names(node: ast.AST) -> list[str]:
    """The names a class's bases are called by (`Base`, `nn.Module`: `Module`), whose constructors its own
    runs when it has none."""
    if not isinstance(node, ast.ClassDef):
        return []
    return [base.id if isinstance(base, ast.Name) else base.attr for base in node.bases
            if isinstance(base, (ast.Name, ast.Attribute))]


#: The arguments a memo's key holds by identity: the same object may be passed again, an equal one is another.
_BY_IDENTITY = frozenset({Function, ClassInfo, Instance, ParserObj, NamespaceObj, SettingsObj})


def literal_key(value: Const) -> tuple[str, str, object]:
    """A constant argument in a memo's key. Numbers and short strings may decide num_workers, a start method
    or a device; long strings (messages, paths) cannot, so only their type counts."""
    literal = value.value
    if isinstance(literal, (str, bytes)) and len(literal) > 24:
        literal = "<long>"
    elif not isinstance(literal, (int, float, str, bytes, type(None))):
        literal = "<other>"
    return ("const", type(value.value).__name__, literal)


def key_part(value: Value) -> object | None:
    """An argument in a memo's key: what makes its walk go the way it goes (None: any walk may differ)."""
    if isinstance(value, Const):
        return literal_key(value)
    if isinstance(value, Unknown):
        # A library object (`Node2Vec(...)`, one given num_workers=) or one holding the walk's own objects
        # behaves as no other unknown value does.
        return "?" if value.lib is None and value.workers is None and not value.holds else value
    if isinstance(value, QualName):
        return ("name", value.name, value.missing)
    if type(value) is Bound:
        # An attribute read off a value the walk knows nothing of is as unknown as it; another one, a
        # method bound to an object or an attribute the object was never given, counts by what it was
        # read off and by the name (what the callee reads of the object through it, its memo notes).
        if read_off_unknown(value):
            return "?"
        owner = key_part(value.obj)
        return None if owner is None else ("bound", owner, value.attr, value.func)
    if type(value) is Either:
        options = tuple(key_part(option) for option in value.options)
        return None if None in options else ("either", options)
    if isinstance(value, GuardFlag):
        return ("guard", value.polarity)
    if isinstance(value, Option):
        return ("option", value.flag, literal_key(value.default)) if isinstance(value.default, Const) else value
    if type(value) in _BY_IDENTITY or isinstance(value, (Mapping_, Seq)) and is_plain(value):
        return value
    return None


def packed_key(value: Value) -> object | None:
    """The `*args` or `**kwargs` a call packed, in a memo's key: made for the call, so what it holds counts."""
    if isinstance(value, Seq) and len(value.items) <= 16:
        parts = tuple(key_part(item) for item in value.items)
        return None if None in parts else ("args", parts)
    if isinstance(value, Mapping_) and len(value.items) <= 16 and not value.open and value.default is None:
        named = tuple((name, key_part(item)) for name, item in value.items.items())
        return None if any(part is None for _, part in named) else ("kwargs", named)
    return None


def callables_in(value: Value, depth: int = 0) -> list[Function | ClassInfo]:
    """The walk's functions and classes a plain argument is or holds (`run(Feeder, 8)`, `[make_a, make_b]`):
    what the function given it may call."""
    if isinstance(value, (Function, ClassInfo)):
        return [value]
    if depth < 2 and isinstance(value, (Seq, Mapping_)):
        items = value.items if isinstance(value, Seq) else list(value.items.values())
        return [found for item in items[:16] for found in callables_in(item, depth + 1)]
    return []


def moved(value: Value, old: Value | None, new: Instance) -> Value:
    """An attribute a constructor's walk left on one object, given to another: itself where it named the first."""
    if value is old:
        return new
    if isinstance(value, Bound) and value.obj is old:
        return replace(value, obj=new)
    if isinstance(value, Either) and any(option is old or isinstance(option, Bound) for option in value.options):
        return Either([moved(option, old, new) for option in value.options])  # `self if x else other`
    return value


def packed_names(func: Function) -> tuple[str | None, str | None]:
    """The names of a function's `*args` and `**kwargs` (None where it has none)."""
    args = func.node.args
    return (args.vararg.arg if args.vararg else None, args.kwarg.arg if args.kwarg else None)


#: What may capture a function's scope in a closure: a nested function, lambda or class.
_NESTED = re.compile(r"\b(?:def|lambda|class)\b")


def private_body(node: ast.AST, lines: Sequence[str]) -> bool:
    """Whether nothing in the function's body after its `def` line (read as text: a mention in a string or
    comment counts too) can define a function, lambda or class, whose closure would read its scope."""
    known: bool | None = getattr(node, "_envdoctor_private", None)
    if known is None:
        end = getattr(node, "end_lineno", None)
        known = False
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and end is not None and lines:
            text = "\n".join(lines[node.lineno:end])
            # Three substring searches rule out most bodies faster than the pattern reads one.
            known = not ("def" in text or "lambda" in text or "class" in text) or _NESTED.search(text) is None
        setattr(node, "_envdoctor_private", known)  # noqa: B010 - a mark of our own on the node
    return known


class BodyRunner(StartTracker):
    """Calls into functions: a generator or coroutine is deferred until consumed, the rest run now."""

    _relevant: dict[ast.AST, bool]
    defs: dict[str, list[tuple[ast.AST, Sequence[str]]]]

    def call_function(self, func: Function, node: ast.AST, frame: Frame, positional: list[Value],
                      keywords: dict[str, Value], self_value: Value | None) -> Value:
        name = func.name
        scope = self.bind_parameters(func, positional, keywords, self_value)
        call_site = self.step(name, node, frame)
        if isinstance(func.node, ast.AsyncFunctionDef) or self.is_generator(func):
            return Deferred(func, scope, call_site)
        return self.run_body(func, scope, call_site, frame, self_value)

    def run_deferred(self, deferred: Deferred, node: ast.AST, frame: Frame) -> Value:
        return self.run_body(deferred.func, dict(deferred.scope), deferred.call_site, frame, deferred.scope.get("self"))

    def run_body(self, func: Function, scope: dict[str, Value], call_site: Step,
                 frame: Frame, self_value: Value | None) -> Value:
        node = func.node
        made = self.constructing if self_value is not None and self_value is self.constructing else None
        self.constructing = None
        if self.cut_short(node) or self.skippable(func, scope):
            return Unknown(f"{call_site.call}()")
        memo_key = self.memo_key(func, scope, frame, made)
        if self.out_of_time():
            return Unknown(f"{call_site.call}()")
        memo = self.memo.get(memo_key) if memo_key is not None else None
        if memo is not None and self.still_holds(memo):
            return self.replay_memo(memo, frame, call_site, made)
        self.calls_followed += 1
        # The chain shows how module level reached this code; its head is the
        # module-level statement to move under the guard.
        via = frame.via + (call_site,)
        inner = Frame(scope=scope, guarded=frame.guarded, module=func.module or frame.module, via=via,
                      function=func, self_class=func.owner, self_value=self_value, enclosing=func.closure,
                      forced_method=frame.forced_method, forced_by=frame.forced_by, needs=frame.needs,
                      private=private_body(node, func.module.lines if func.module is not None else []))
        first = len(self.events)
        trace = self.begin_trace(func, scope)
        if made is not None:
            made.born = tick()  # made for this call: the call's own, as its scope is
        self.stack.append(node)
        try:
            if isinstance(node, ast.Lambda):
                inner.returns.append(self.eval(node.body, inner))
            else:
                self.exec_block(body_of(node, func.module.lines if func.module is not None else [], self.restored), inner)
        finally:
            self.stack.pop()
            self.traces.pop()
        result = join_all(inner.returns) if inner.returns else Const(None)
        if memo_key is not None and self.taints == trace.taints:
            self.remember(memo_key, trace, result, [{**e, "via": e["via"][len(via):]} for e in self.events[first:]],
                          made)
        if not self.traces:
            self.reads_log.clear()
            self.writes_log.clear()
        return result

    def cut_short(self, node: ast.AST) -> bool:
        """A call not followed: one already on the stack, beyond the depth followed, or past the budget. What the
        walks it is in give then depends on the chain that reached it: none of them is kept (Walker.taints)."""
        if node in self.stack or len(self.stack) >= MAX_CALL_DEPTH:
            self.taints += 1
            return True
        if self.calls_followed >= MAX_CALLS_FOLLOWED:
            self.truncated = True
            self.taints += 1
            return True
        return False

    def replay_memo(self, memo: Memo, frame: Frame, call_site: Step, made: Instance | None) -> Value:
        """Same function, same arguments, nothing its walk read or wrote changed since: walking it again would
        find the same starts. They are recorded again only when reached from another module-level statement
        (`run()` twice is two statements to move under the guard), and the walks this call is in count what
        the memo's walk read and wrote as their own. A constructor's memo gives the new object the attributes
        the first one was left with (itself where they named the first one)."""
        if made is not None and memo.attrs is not None:
            made.attrs.update({name: moved(value, memo.made_object, made) for name, value in memo.attrs.items()})
        if self.traces:
            self.reads_log.extend(memo.reads)
            self.writes_log.extend(memo.writes)
        self.replay_events(memo.events, (*frame.via, call_site), frame.guarded, frame.needs)
        return memo.result

    def begin_trace(self, func: Function, scope: dict[str, Value]) -> Trace:
        """Start noting what a call's walk reads and writes (see Trace), its arguments' contents first."""
        trace = Trace(tick(), len(self.reads_log), len(self.writes_log), self.taints)
        self.traces.append(trace)
        packed = packed_names(func)
        for name, value in scope.items():
            if name in packed and isinstance(value, (Seq, Mapping_)):
                value.born = tick()  # made for this call: the call's own, as its scope is
            elif type(value) in HELD:
                self.read_held(value)  # an argument's contents, which a later caller may have changed
        return trace

    def remember(self, key: tuple[Any, ...], trace: Trace, result: Value, events: list[dict[str, Any]],
                 made: Instance | None) -> None:
        """Keep a call's walk as the memo for its key, unless walking it again could go another way: when it
        read what it had itself changed of what was there before it began (`CACHE["x"]` looked up, then
        set; an object's attribute read after it set it).

        A constructor's walk on a new object (`made`) is kept for the next new object of its class only when
        it changed nothing that was there before it began: all it did is the object's attributes (and the
        objects it made for them, which the next one shares: a later change to any of them drops the memo).
        """
        reads = set(self.reads_log[trace.reads:])
        writes = set(self.writes_log[trace.writes:])
        earlier = {cell for cell in writes if cell[0].born <= trace.start}
        if earlier and (made is not None or not reads.isdisjoint(earlier | {(holder, None) for holder, _ in earlier})):
            return
        attrs = None
        if made is not None:
            own = {holder for holder, _ in writes} | {holder for holder, _ in reads
                                                     if not isinstance(holder, int) and holder.born > trace.start}
            own.update(holder for value in made.attrs.values() for holder in holders(value))
            own.discard(made)
            reads = {cell for cell in reads if cell[0] is not made} | {(holder, None) for holder in own}
            writes = set()
            attrs = dict(made.attrs)
        for returned in holders(result):
            reads.add((returned, None))  # changed later, it is no longer what the next call would make
        self.memo[key] = Memo(result, events, frozenset(reads), frozenset(writes), tick(), self.epoch, made, attrs)

    def still_holds(self, memo: Memo) -> bool:
        """Whether nothing the memo's walk read or wrote has been written since it ended."""
        if memo.epoch != self.epoch:
            return False
        last, made = self.last_write, memo.made
        return all(last.get(cell, 0) <= made for cell in memo.reads) and all(
            last.get(cell, 0) <= made for cell in memo.writes)

    def skippable(self, func: Function, scope: dict[str, Value]) -> bool:
        """A library function called with plain arguments that cannot reach anything that starts workers.

        The script's own functions are always walked. A function of another
        module called with plain arguments (no loader, process or context) is
        walked only when its lines, those of a function or class it names (see
        CALLED; a class: all of its lines and its bases', since the caller may use
        any method of what it returns), or those of a function or class it is given
        (`run(Feeder, 8)`) mention what builds or starts workers (a loader, a
        process, a trainer, CUDA), name `num_workers` (`KW.update(num_workers=2)`
        in a module's `setup()`), or declare a `global` (`set_workers(4)` may
        decide a later loader's num_workers): walking a library's whole call graph
        for `get_logger(__name__)` cost most of the analysis and can find nothing.
        """
        module = func.module
        if module is None or module.is_main or not all(is_plain(v) for v in scope.values()):
            return False
        return not self.relevant(func.node, module.lines) and not any(
            self.relevant(given.node, given.module.lines) for value in scope.values() for given in callables_in(value)
            if given.module is not None)

    def relevant(self, node: ast.AST, lines: Sequence[str]) -> bool:
        """Whether the function's (or class's) lines, or those of any function or class it reaches by name,
        mention what starts workers.

        A search of everything reachable, so the answer does not depend on the
        order the called names are tried in (it did while a function met again
        on a cycle counted as "not relevant", and that order follows the hash
        seed). When nothing reachable mentions it, every function seen is
        irrelevant too: all they reach was searched.
        """
        cached = self._relevant.get(node)
        if cached is not None:
            return cached
        for replayed in self.replayed_defs:
            for name, other, other_lines in replayed:
                self.defs.setdefault(name, []).append((other, other_lines))
        self.replayed_defs.clear()
        seen = {node}
        todo = [(node, lines)]
        found = False
        while todo and not found:
            current, current_lines = todo.pop()
            known = self._relevant.get(current)
            if known is not None:
                found = known
                continue
            mentions, called = mentions_of(current, current_lines)
            found = mentions
            for name in called:
                for other, other_lines in self.defs.get(name, ()):
                    if other not in seen:
                        seen.add(other)
                        todo.append((other, other_lines))
        if found:
            self._relevant[node] = True
        else:
            self._relevant.update(dict.fromkeys(seen, False))
        return found

    def memo_key(self, func: Function, scope: dict[str, Value], frame: Frame,
                 made: Instance | None = None) -> tuple[Any, ...] | None:
        """A key for calls whose walk would repeat an earlier one (see still_holds), or None when it might not.

        The function itself, not its node: a nested function's closure is its own each time its `def` runs.
        A new object a constructor runs on counts by its class (see remember).
        """
        parts: list[Any] = [func, frame.guarded, frame.needs, frame.forced_method]
        packed = packed_names(func)
        for name, value in scope.items():
            if value is made and made is not None:
                parts.append(("new", made.cls, made.home))
                continue
            part = packed_key(value) if name in packed else key_part(value)
            if part is None:
                return None  # a loader, a process, a context …: always follow
            parts.append(part)
        return tuple(parts)

    def bind_parameters(self, func: Function, positional: list[Value], keywords: dict[str, Value],
                        self_value: Value | None) -> dict[str, Value]:
        args = func.node.args
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        values = list(positional)
        if self_value is not None and names:
            values.insert(0, self_value)
        scope: dict[str, Value] = {}
        for i, name in enumerate(names):
            if i < len(values):
                scope[name] = values[i]
            elif name in keywords:
                scope[name] = keywords[name]
            elif name in func.defaults:
                scope[name] = func.defaults[name]
            else:
                scope[name] = Unknown(name)
        for arg in args.kwonlyargs:
            scope[arg.arg] = keywords.get(arg.arg, func.defaults.get(arg.arg, Unknown(arg.arg)))
        if args.vararg:
            scope[args.vararg.arg] = Seq(values[len(names):])
        if args.kwarg:
            known = set(names) | {a.arg for a in args.kwonlyargs}
            scope[args.kwarg.arg] = Mapping_({k: v for k, v in keywords.items() if k not in known})
        return scope

    def is_generator(self, func: Function) -> bool:
        node = func.node
        cached = self._generators.get(node)
        if cached is None:
            # Reading the function's own lines first is much cheaper than walking its tree.
            lines = func.module.lines if func.module is not None else []
            end = getattr(node, "end_lineno", None) or len(lines)
            cached = (not lines or any("yield" in line for line in lines[node.lineno - 1:end])) \
                and (body_of(node, lines, self.restored) is not None and is_generator_node(node))
            self._generators[node] = cached
        return cached

    # -- the result ----------------------------------------------------------

    def result(self) -> dict[str, Any]:
        starts = [e for e in self.events if e["kind"] not in ("set-start-method", "cuda-init")]
        return {
            "guard_lines": self.guard_lines,
            **({"skipped_guard_lines": self.skipped_guard_lines} if self.skipped_guard_lines else {}),
            "worker_starts": starts,
            "start_method_calls": [e for e in self.events if e["kind"] == "set-start-method"],
            "cuda_inits": [e for e in self.events if e["kind"] == "cuda-init"],
            "calls_followed": self.calls_followed,
            "truncated": self.truncated,
        }


