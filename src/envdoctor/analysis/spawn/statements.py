"""Statements: blocks in order, definitions, assignments, branches, loops and the main guard."""
from __future__ import annotations

import ast
import operator
import time
from collections.abc import Callable, Iterable
from typing import Any

from envdoctor.analysis.spawn.names import EXITS, TYPE_CHECKING_NAMES
from envdoctor.analysis.spawn.syntax import bound_names, child_expressions, guard_polarity, matches_only_main
from envdoctor.analysis.spawn.values import (
    ClassInfo,
    Const,
    Function,
    GuardFlag,
    Option,
    QualName,
    Seq,
    Unknown,
    Value,
    is_plain,
    join_all,
    unparse,
)
from envdoctor.analysis.spawn.walker import Frame, Walker, needed_together


class StatementWalker(Walker):
    """Walks statements the way the interpreter runs them."""

    def consume(self, value: Value, node: ast.AST, frame: Frame, how: str, unpacked: bool = False) -> None:
        raise NotImplementedError  # StartTracker

    def exec_block(self, body: Iterable[ast.stmt], frame: Frame) -> bool:
        """Walk a block; True when it always ends early (return, raise, sys.exit …).

        What follows such a statement in the same block never runs, so it is
        not walked: a loop after `sys.exit()` or after `return` starts nothing.
        """
        # Walker.out_of_time, inlined: this loop runs once a statement, and the call cost the whole
        # diffusers tree 1.97x ast.parse against 1.75x (bench_spawn_guard.py, same machine, same run).
        # exec_stmt's dispatch is inlined too (one call less a statement).
        deadline = self.deadline
        table = self.stmt_handlers
        for stmt in body:
            if time.monotonic() > deadline:  # a pathological file: what was found so far stands, marked truncated
                self.truncated = True
                return False
            try:
                kind = type(stmt)
                method = table[kind] if kind in table else self.handler(table, "stmt_", kind)
                if method is not None:
                    if method(self, stmt, frame):
                        return True
                elif self.exec_other(stmt, frame):
                    return True
            except RecursionError:  # an expression nested deeper than we follow: skip it
                self.truncated = True
        return False

    def exec_other(self, stmt: ast.stmt, frame: Frame) -> bool:
        """A statement no `stmt_` method walks (raise, assert, del, …): its expressions run, in order."""
        for child in child_expressions(stmt):
            self.eval(child, frame)
        return isinstance(stmt, (ast.Raise, ast.Break, ast.Continue))

    def stmt_FunctionDef(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame) -> None:
        for decorator in stmt.decorator_list:
            self.eval(decorator, frame)
        self.set_name(frame, stmt.name, Function(stmt, self.eval_defaults(stmt.args, frame), owner=frame.self_class,
                                                 closure=frame.closure(), module=frame.module,
                                                 local_in=local_in(frame),
                                                 static=frame.class_body and is_static(stmt)))
        self.known_def(stmt, frame)

    def known_def(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, frame: Frame) -> None:
        """A function or class `relevant` may follow a call into by its name (`helper(`, `Feeder(`)."""
        self.defs.setdefault(stmt.name, []).append((stmt, frame.module.lines))
        for record in self.imports:
            record.defs.append((stmt.name, stmt, frame.module.lines))

    def eval_defaults(self, args: ast.arguments, frame: Frame) -> dict[str, Value]:
        defaults: dict[str, Value] = {}
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            defaults[arg.arg] = self.eval(default, frame)
        for kwarg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
            if kw_default is not None:
                defaults[kwarg.arg] = self.eval(kw_default, frame)
        return defaults

    def stmt_ClassDef(self, stmt: ast.ClassDef, frame: Frame) -> None:
        for decorator in stmt.decorator_list:
            self.eval(decorator, frame)
        bases = [self.eval(base, frame) for base in stmt.bases]
        for keyword in stmt.keywords:
            self.eval(keyword.value, frame)
        info = ClassInfo(stmt, bases, {}, module=frame.module, local_in=local_in(frame))
        # A class body runs at definition time, in a namespace of its own.
        body_frame = Frame(scope=info.namespace, guarded=frame.guarded, module=frame.module, via=frame.via,
                           function=frame.function, self_class=info, class_body=True,
                           enclosing=frame.closure(), needs=frame.needs)
        self.exec_block(stmt.body, body_frame)
        self.set_name(frame, stmt.name, info)
        self.known_def(stmt, frame)

    def stmt_Assign(self, stmt: ast.Assign, frame: Frame) -> None:
        value = self.eval(stmt.value, frame)
        for target in stmt.targets:
            self.bind(target, value, frame, stmt.lineno)

    def stmt_AnnAssign(self, stmt: ast.AnnAssign, frame: Frame) -> None:
        if stmt.value is not None:
            self.bind(stmt.target, self.eval(stmt.value, frame), frame, stmt.lineno)

    def stmt_AugAssign(self, stmt: ast.AugAssign, frame: Frame) -> None:
        self.eval(stmt.value, frame)
        if isinstance(stmt.target, ast.Name):
            self.bind(stmt.target, Unknown(node=stmt.target), frame)

    def stmt_Expr(self, stmt: ast.Expr, frame: Frame) -> bool:
        self.eval(stmt.value, frame)
        # `sys.exit(main())` runs main() first, then nothing after it runs.
        call = stmt.value
        if isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)):
            func = self.eval(call.func, frame)  # a name or attribute: evaluating it again is harmless
            if isinstance(func, QualName) and func.name in EXITS:
                return True
            if (isinstance(func, Unknown) and isinstance(call.func, ast.Name)
                    and call.func.id in ("exit", "quit")):
                return True
        return False

    def stmt_Return(self, stmt: ast.Return, frame: Frame) -> bool:
        frame.returns.append(self.eval(stmt.value, frame) if stmt.value is not None else Const(None))
        return True

    def stmt_Global(self, stmt: ast.Global, frame: Frame) -> None:
        frame.declared_global.update(stmt.names)

    def guard_of(self, test: ast.expr, frame: Frame) -> bool | None:
        """guard_polarity, seen through `not` and through a name holding the comparison."""
        polarity = guard_polarity(test)
        if polarity is not None:
            return polarity
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.guard_of(test.operand, frame)
            return None if inner is None else not inner
        if isinstance(test, ast.Name):
            value = self.lookup(test.id, frame)
            if isinstance(value, GuardFlag):
                return value.polarity
        return None

    def stmt_If(self, stmt: ast.If, frame: Frame) -> bool:
        guard = self.guard_of(stmt.test, frame)
        if guard is not None:
            # `if __name__ == "__main__":` runs its body only in the main process;
            # its else (and the body of the `!=` form) runs in every worker too.
            main_body, other = (stmt.body, stmt.orelse) if guard else (stmt.orelse, stmt.body)
            if not frame.module.is_main:  # an imported module's __name__ is never "__main__"
                return self.exec_block(other, frame)
            self.guard_lines.append(stmt.lineno)
            self.exec_block(other, frame)
            if self.main_guard or not self.ends_the_script(stmt, frame):
                self.exec_guarded(main_body, frame)
            else:
                self.skipped_guard_lines.append(stmt.lineno)
            # What follows still runs in the main process and in every worker: even where
            # the workers' branch ends (`if __name__ != "__main__": sys.exit()`), the
            # workers then die at import, so what follows is still reported.
            return False
        constant = self.static_truth(stmt.test, frame)
        if constant is None and not _reference(stmt.test):
            self.eval(stmt.test, frame)
        if constant is True:
            return self.exec_block(stmt.body, frame)
        if constant is False:
            return self.exec_block(stmt.orelse, frame)
        return self.exec_branches([stmt.body, stmt.orelse], frame, self.option_branches(stmt.test, frame))

    def ends_the_script(self, stmt: ast.If, frame: Frame) -> bool:
        """Whether `stmt`, a main guard, is a statement of the script's own module level that only
        `if __name__ == "__main__":` blocks without an else follow: nothing that runs at import time can
        read what its body binds."""
        tree = self.main.tree
        if frame.module is not self.main or frame.via or frame.function is not None or tree is None:
            return False
        for later in reversed(tree.body):
            if later is stmt:
                return True
            if not (isinstance(later, ast.If) and not later.orelse and self.guard_of(later.test, frame) is True):
                return False
        return False

    def option_branches(self, test: ast.expr, frame: Frame) -> tuple[str | None, str | None] | None:
        """`if args.test_only:` on an option that is off unless given (its default false, none given): the
        option the body needs, and for `if not args.test_only:` the one the else needs. None otherwise,
        and under the guard, where a start is no finding whatever the branch."""
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        operand = test.operand if isinstance(test, ast.UnaryOp) and negated else test
        if frame.guarded or not _reference(operand):
            return None
        value = self.eval(operand, frame)
        if not (isinstance(value, Option) and value.flag.startswith("-") and isinstance(value.default, Const)
                and not value.default.value):
            return None
        return (None, value.flag) if negated else (value.flag, None)

    def exec_guarded(self, body: list[ast.stmt], frame: Frame) -> None:
        saved = frame.guarded
        frame.guarded = True
        try:
            self.exec_block(body, frame)
        finally:
            frame.guarded = saved

    def exec_branches(self, branches: list[list[ast.stmt]], frame: Frame,
                      needs: tuple[str | None, ...] | None = None) -> bool:
        """Run alternative branches from the same start and merge what they bound.

        Only the names the branches can bind are saved and merged, so an `if`
        in a module with thousands of names costs what its own body costs.
        `needs`, one per branch: the option a branch runs only with (see option_branches).
        """
        wants = needs or (None,) * len(branches)
        lines = frame.module.lines
        names = set().union(*(bound_names(body, lines) for body in branches))
        if not names:  # `if x: logging.info(...)`: nothing to save or merge
            ended = [self.exec_branch(body, frame, want) for body, want in zip(branches, wants)]
            return all(ended)
        scope = frame.scope
        missing: Value = Value()  # a marker: the name was not bound
        before = {name: scope.get(name, missing) for name in names}
        results = []
        ended = []
        # Names put back or merged are written as a binding writes them (see Walker.wrote).
        holder = self.scope_holder(frame)
        for body, want in zip(branches, wants):
            for name, value in before.items():
                if ended and holder is not None:
                    self.wrote(holder, name)
                if value is missing:
                    scope.pop(name, None)
                else:
                    scope[name] = value
            ended.append(self.exec_branch(body, frame, want))
            results.append({name: scope.get(name, missing) for name in names})
        if all(ended):
            return True
        # A branch that ended early (return, raise) passes nothing on to what follows.
        self.merge_branches(frame, names, [r for r, end in zip(results, ended) if not end], missing)
        return False

    def merge_branches(self, frame: Frame, names: set[str], results: list[dict[str, Value]], missing: Value) -> None:
        """Each name as the branches that went on left it (`missing` where one did not bind it), joined."""
        scope = frame.scope
        holder = self.scope_holder(frame)
        for name in names:
            if holder is not None:
                self.wrote(holder, name)
            values = [r[name] for r in results if r[name] is not missing]
            if not values:
                scope.pop(name, None)
                continue
            scope[name] = join_all(values)

    def exec_branch(self, body: list[ast.stmt], frame: Frame, need: str | None) -> bool:
        """One branch, run only with option `need` when one is given (Frame.needs, for the starts in it)."""
        if need is None:
            return self.exec_block(body, frame)
        outer = frame.needs
        frame.needs = needed_together(outer, need)
        try:
            return self.exec_block(body, frame)
        finally:
            frame.needs = outer

    def static_truth(self, test: ast.expr, frame: Frame) -> bool | None:
        """True/False for tests known before running (`if TYPE_CHECKING`, `if False`)."""
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, (ast.Name, ast.Attribute)):
            value = self.eval(test, frame)
            if isinstance(value, QualName) and value.name in TYPE_CHECKING_NAMES:
                return False
            # `DEBUG = False` … `if DEBUG:`: a name bound to a literal at this point of the walk.
            # Not inside a loop, which walks its body once: `first = True` … `if first: …
            # first = False; continue` holds another value on the next pass.
            if (frame.loop_depth == 0 and isinstance(value, Const)
                    and isinstance(value.value, (bool, int, float, str, type(None)))):
                return bool(value.value)
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" and isinstance(value, Unknown):
                return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.static_truth(test.operand, frame)
            return None if inner is None else not inner
        if isinstance(test, ast.Compare):
            return self.static_comparison(test, frame)
        if isinstance(test, ast.BoolOp) and len(test.values) <= 8 and not any(
                getattr(v, "id", getattr(v, "attr", "")) == "TYPE_CHECKING" for v in test.values):
            # `mode != "serial" and NPROC > 1`: decided when the constants decide it.
            truths = [self.static_truth(value, frame) for value in test.values]
            decisive = isinstance(test.op, ast.Or)  # one True decides an `or`, one False an `and`
            if decisive in truths:
                return decisive
            return (not decisive) if all(t is not None for t in truths) else None
        if (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or)
                and self.static_truth(test.values[0], frame) is False
                and isinstance(test.values[0], (ast.Name, ast.Attribute)) and "TYPE_CHECKING" in unparse(test.values[0])):
            # `if TYPE_CHECKING or DIFFUSERS_SLOW_IMPORT:` is the lazy-import idiom: the imports a
            # type checker reads, which a normal run (the flag unset) never executes.
            return False
        return None

    def static_comparison(self, test: ast.Compare, frame: Frame) -> bool | None:
        """`NPROC > 1` after `NPROC = 1`, `split == "train"` in a call given no split: both sides constants."""
        if len(test.ops) != 1 or frame.loop_depth:
            return None
        left, right = self.constant_operand(test.left, frame), self.constant_operand(test.comparators[0], frame)
        compare = _COMPARISONS.get(type(test.ops[0]))
        if left is _NOT_CONSTANT or right is _NOT_CONSTANT or compare is None:
            return None
        try:
            return bool(compare(left, right))
        except TypeError:  # `1 < "a"` raises at run time: not for the walk to decide
            return None

    def constant_operand(self, node: ast.expr, frame: Frame) -> object:
        """The literal value of a constant or of a name bound to one (not in a loop), else _NOT_CONSTANT."""
        if isinstance(node, ast.Constant):
            value: object = node.value
        elif isinstance(node, (ast.Name, ast.Attribute)):
            found = self.eval(node, frame)
            if not isinstance(found, Const):
                return _NOT_CONSTANT
            value = found.value
        else:
            return _NOT_CONSTANT
        return value if isinstance(value, (bool, int, float, str, type(None))) else _NOT_CONSTANT

    def stmt_For(self, stmt: ast.For | ast.AsyncFor, frame: Frame) -> None:
        iterable = self.eval(stmt.iter, frame)
        self.consume(iterable, stmt, frame, "for-loop", unpacked=isinstance(stmt.target, (ast.Tuple, ast.List)))
        element: Value = Unknown(node=stmt.target)
        if isinstance(iterable, Seq):
            if not all(is_plain(v) for v in iterable.items[:4]) and len(iterable.items) <= 4:
                # `for loader in (train_loader, val_loader):`, `for name, loader in loaders.items():`
                # — follow each one.
                for item in iterable.items:
                    self.bind(stmt.target, item, frame, stmt.lineno)
                    self.exec_loop_body(stmt.body, frame)
                self.exec_block(stmt.orelse, frame)
                return
        self.bind(stmt.target, element, frame, stmt.lineno)
        self.exec_loop_body(stmt.body, frame)
        self.exec_block(stmt.orelse, frame)

    def exec_loop_body(self, body: list[ast.stmt], frame: Frame) -> None:
        frame.loop_depth += 1
        try:
            self.exec_block(body, frame)
        finally:
            frame.loop_depth -= 1

    def stmt_While(self, stmt: ast.While, frame: Frame) -> None:
        # The test is read as inside the loop: its names change between passes.
        frame.loop_depth += 1
        try:
            constant = self.static_truth(stmt.test, frame)
        finally:
            frame.loop_depth -= 1
        if constant is None:
            self.eval(stmt.test, frame)
        if constant is not False:  # `while False:` never runs its body
            self.exec_loop_body(stmt.body, frame)
        if constant is not True:  # `while True:` leaves only through break: its else never runs
            self.exec_block(stmt.orelse, frame)

    def stmt_With(self, stmt: ast.With | ast.AsyncWith, frame: Frame) -> bool:
        for item in stmt.items:
            value = self.eval(item.context_expr, frame)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, value, frame, stmt.lineno)
        return self.exec_block(stmt.body, frame)

    def stmt_Try(self, stmt: ast.Try, frame: Frame) -> None:
        self.exec_block(stmt.body, frame)
        for handler in stmt.handlers:
            if handler.type is not None:
                self.eval(handler.type, frame)
            if handler.name:
                self.set_name(frame, handler.name, Unknown(handler.name))
            self.exec_block(handler.body, frame)
        self.exec_block(stmt.orelse, frame)
        self.exec_block(stmt.finalbody, frame)

    def stmt_Match(self, stmt: ast.Match, frame: Frame) -> None:
        self.eval(stmt.subject, frame)
        if isinstance(stmt.subject, ast.Name) and stmt.subject.id == "__name__":
            # `match __name__: case "__main__":` is the guard written as a match.
            main_cases = [case for case in stmt.cases if case.guard is None and matches_only_main(case.pattern)]
            if main_cases:
                others = [case.body for case in stmt.cases if case not in main_cases] + [[]]
                if not frame.module.is_main:
                    self.exec_branches(others, frame)
                    return
                self.guard_lines.append(stmt.lineno)
                for case in main_cases:
                    self.exec_guarded(case.body, frame)
                self.exec_branches([case.body for case in stmt.cases if case not in main_cases] + [[]], frame)
                return
        self.exec_branches([case.body for case in stmt.cases] + [[]], frame)

    # -- expressions --------------------------------------------------------


#: What `static_comparison` marks an operand it cannot read with.
_NOT_CONSTANT = object()
_COMPARISONS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
}


def local_in(frame: Frame) -> str:
    """The qualified name of the function a def or class statement runs in ("" at module or class level
    outside any function): what pickle's `<locals>` names."""
    function = frame.function
    if function is None or isinstance(function.node, ast.Lambda):
        return ""
    owner = function.owner
    return f"{owner.node.name}.{function.name}" if owner is not None else function.name


def _reference(node: ast.expr) -> bool:
    """A name or a chain of attributes of one (`if self.training:`): static_truth has evaluated it
    already, and evaluating it again reads the same values and changes nothing."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def is_static(stmt: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a method defined in a class body is a `@staticmethod` (Function.static)."""
    return any(isinstance(decorator, ast.Name) and decorator.id == "staticmethod" for decorator in stmt.decorator_list)
