"""Expressions: names, attributes, containers, subscripts, comprehensions."""
from __future__ import annotations

import ast

from envdoctor.analysis.spawn.statements import StatementWalker
from envdoctor.analysis.spawn.syntax import child_expressions, guard_polarity
from envdoctor.analysis.spawn.values import (
    Bound,
    ClassInfo,
    Const,
    Deferred,
    Device,
    Either,
    Function,
    GuardFlag,
    Instance,
    Mapping_,
    Module,
    NamespaceObj,
    Option,
    QualName,
    Seq,
    SuperObj,
    Unknown,
    Value,
    any_of,
    is_plain,
    join,
    join_all,
    loaderish,
    method_of,
)
from envdoctor.analysis.spawn.walker import HELD, Frame

#: The node types `eval` tests first (bound once: a module global, not two attribute lookups a call).
_NAME, _CONSTANT = ast.Name, ast.Constant


class ExpressionWalker(StatementWalker):
    """Evaluates expressions to values of the lattice."""

    def run_deferred(self, deferred: Deferred, node: ast.AST, frame: Frame) -> Value:
        raise NotImplementedError  # CallWalker

    def module_attribute(self, module: Module, attr: str) -> Value:
        raise NotImplementedError  # ScriptAnalysis

    def eval(self, node: ast.expr | None, frame: Frame) -> Value:
        # The two commonest nodes, without a call of their own (expr_Name, expr_Constant); the node
        # types are final (the parser makes no subclasses), so `type() is` stands for isinstance.
        kind = type(node)
        if kind is _NAME:
            return self.lookup(node.id, frame)  # type: ignore[union-attr]  # an ast.Name (cast() costs a call)
        if kind is _CONSTANT:
            return Const(node.value)  # type: ignore[union-attr]  # an ast.Constant
        if node is None:
            return Const(None)
        table = self.expr_handlers
        method = table[kind] if kind in table else self.handler(table, "expr_", kind)
        if method is not None:
            value = method(self, node, frame)
            if self.traces and type(value) in HELD:
                self.read_held(value)  # what it holds may change before the next call reads it
            return value
        for child in child_expressions(node):
            self.eval(child, frame)
        return Unknown(node=node)

    # The commonest nodes the generic walk in `eval` would take, walked the same way (their expressions
    # in field order, the result unknown) without reading every field of the node by name.

    def expr_BinOp(self, node: ast.BinOp, frame: Frame) -> Value:
        self.eval(node.left, frame)
        self.eval(node.right, frame)
        return Unknown(node=node)

    def expr_BoolOp(self, node: ast.BoolOp, frame: Frame) -> Value:
        for value in node.values:
            self.eval(value, frame)
        return Unknown(node=node)

    def expr_UnaryOp(self, node: ast.UnaryOp, frame: Frame) -> Value:
        self.eval(node.operand, frame)
        return Unknown(node=node)

    def expr_JoinedStr(self, node: ast.JoinedStr, frame: Frame) -> Value:
        for value in node.values:
            if isinstance(value, ast.FormattedValue):  # its constant parts evaluate to nothing that matters
                self.eval(value.value, frame)
                if value.format_spec is not None:
                    self.eval(value.format_spec, frame)
        return Unknown(node=node)

    def expr_Constant(self, node: ast.Constant, frame: Frame) -> Value:
        return Const(node.value)

    def expr_Name(self, node: ast.Name, frame: Frame) -> Value:
        return self.lookup(node.id, frame)

    def expr_Lambda(self, node: ast.Lambda, frame: Frame) -> Value:
        return Function(node, self.eval_defaults(node.args, frame), closure=frame.closure(), module=frame.module)

    def expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set, frame: Frame) -> Value:
        items = []
        for element in node.elts:
            value = self.eval(element.value if isinstance(element, ast.Starred) else element, frame)
            if isinstance(element, ast.Starred):
                loader = loaderish(value)
                if loader is not None:
                    self.start_loader(loader, element, frame, "unpacking")
                value = Unknown(node=element)
            items.append(value)
        return Seq(items)

    def expr_Dict(self, node: ast.Dict, frame: Frame) -> Value:
        result = Mapping_({})
        for key, value in zip(node.keys, node.values):
            evaluated = self.eval(value, frame)
            if key is None:  # {**other}
                if isinstance(evaluated, Mapping_):
                    result.items.update(evaluated.items)
                    result.open |= evaluated.open
                else:
                    result.open = True
                continue
            k = self.eval(key, frame)
            if isinstance(k, Const) and isinstance(k.value, str):
                result.items[k.value] = evaluated
            else:
                result.open = True
        return result

    def expr_Attribute(self, node: ast.Attribute, frame: Frame) -> Value:
        value = self.attribute(node, frame)
        if isinstance(value, Bound):
            value.node = node
        return value

    def attribute(self, node: ast.Attribute, frame: Frame) -> Value:
        return self.attribute_of(self.eval(node.value, frame), node.attr)

    # complexity: 21 — one case per kind of owner, commonest first.
    def attribute_of(self, owner: Value, attr: str) -> Value:
        kind = type(owner)
        if kind is Unknown or kind is Bound:  # the commonest owners, which none of the cases below take
            return Bound(owner, attr)
        if isinstance(owner, Either):
            return join_all([self.attribute_of(option, attr) for option in owner.options])
        if isinstance(owner, Instance):  # `self.encoder` in a method: the next commonest (no type below is one)
            if self.traces:
                self.reads_log.append((owner, attr))
            if attr in owner.attrs:
                return owner.attrs[attr]
            found = owner.cls.lookup(attr)
            if isinstance(found, Function):
                return method_of(owner, attr, found)
            if found is not None:
                return found
            return Bound(owner, attr)
        if isinstance(owner, QualName):
            return QualName(f"{owner.name}.{attr}", owner.missing)
        if isinstance(owner, Module):
            return self.module_attribute(owner, attr)
        if isinstance(owner, NamespaceObj):
            # `args.workers`: the option's default unless the user passes --workers.
            if attr in owner.parser.options:
                flag, default = owner.parser.options[attr]
                return Option(flag, default)
            return Unknown(f"args.{attr}")
        if isinstance(owner, ClassInfo):
            found = owner.lookup(attr)
            if found is not None:
                return found
        if isinstance(owner, SuperObj) and owner.cls is not None:
            for base in owner.cls.bases:
                if isinstance(base, ClassInfo):
                    found = base.lookup(attr)
                    if isinstance(found, Function):
                        return method_of(owner.instance, attr, found)
            return Bound(owner, attr)
        return Bound(owner, attr)

    def expr_Subscript(self, node: ast.Subscript, frame: Frame) -> Value:
        owner = self.eval(node.value, frame)
        key = self.eval(node.slice, frame)
        if isinstance(owner, Mapping_):
            if isinstance(key, Const) and isinstance(key.value, (str, int)) and str(key.value) in owner.items:
                return owner.items[str(key.value)]
            if isinstance(key, Const) and not owner.open:
                return Unknown(node=node)
            # `loaders[phase]`: a key we cannot read stands for every value.
            values = owner.every_value()
            if values and not all(is_plain(v) for v in values):
                return any_of(values)
        if isinstance(owner, Seq) and owner.items:
            if isinstance(key, Const) and isinstance(key.value, int):
                if -len(owner.items) <= key.value < len(owner.items):
                    return owner.items[key.value]
            elif not isinstance(node.slice, ast.Slice) and not all(is_plain(v) for v in owner.items):
                return any_of(owner.items)
        return Unknown(node=node)

    def expr_IfExp(self, node: ast.IfExp, frame: Frame) -> Value:
        self.eval(node.test, frame)
        a, b = self.eval(node.body, frame), self.eval(node.orelse, frame)
        key = membership_key(node.test)
        if key is not None and isinstance(b, Const) and isinstance(b.value, int) and not isinstance(a, Const):
            # `cfg.num_workers if "num_workers" in cfg else 0`: the config's entry when it has one, else
            # the default, like `cfg.get("num_workers", 0)`.
            return Option(f"{key!r} in the config", Const(b.value))
        if isinstance(a, Device) or isinstance(b, Device):
            return Device(cuda=any(isinstance(v, Device) and v.cuda for v in (a, b)))
        for v in (a, b):
            if isinstance(v, Const) and isinstance(v.value, str) and v.value.startswith("cuda"):
                return Device(cuda=True)
        return join(a, b)

    def expr_NamedExpr(self, node: ast.NamedExpr, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.bind(node.target, value, frame, node.lineno)
        return value

    def expr_Compare(self, node: ast.Compare, frame: Frame) -> Value:
        polarity = guard_polarity(node)
        if polarity is not None:
            return GuardFlag(polarity)
        self.eval(node.left, frame)
        for op, right in zip(node.ops, node.comparators):
            value = self.eval(right, frame)
            loader = loaderish(value)
            if loader is not None and isinstance(op, (ast.In, ast.NotIn)):
                self.start_loader(loader, node, frame, "`in` test")
        return Unknown(node=node)

    def expr_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
                      frame: Frame) -> Value:
        inner = Frame(scope=dict(frame.scope), guarded=frame.guarded, module=frame.module, via=frame.via,
                      function=frame.function, declared_global=frame.declared_global,
                      self_class=frame.self_class, enclosing=frame.enclosing, loop_depth=frame.loop_depth + 1,
                      needs=frame.needs)
        for i, generator in enumerate(node.generators):
            # The first iterable is evaluated (and iter() called on it) right away,
            # even for a generator expression.
            iterable = self.eval(generator.iter, frame if i == 0 else inner)
            unpacked = isinstance(generator.target, (ast.Tuple, ast.List))
            self.consume(iterable, generator.iter, inner, "comprehension", unpacked=unpacked)
            element: Value = Unknown(node=generator.target)
            if isinstance(iterable, Seq) and iterable.items and not all(is_plain(v) for v in iterable.items[:4]):
                element = any_of(iterable.items)
            self.bind(generator.target, element, inner)
            for condition in generator.ifs:
                self.eval(condition, inner)
        if isinstance(node, ast.DictComp):
            self.eval(node.key, inner)
            value = self.eval(node.value, inner)
            # `{split: DataLoader(...) for split in splits}`: every key holds such a loader.
            return Mapping_({}, open=True, default=None if is_plain(value) else value)
        value = self.eval(node.elt, inner)
        if isinstance(node, ast.GeneratorExp) or is_plain(value):
            return Unknown(node=node)
        return Seq([value], repeated=True)

    def expr_Await(self, node: ast.Await, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        if isinstance(value, Deferred):
            return self.run_deferred(value, node, frame)
        return Unknown(node=node)

    def expr_YieldFrom(self, node: ast.YieldFrom, frame: Frame) -> Value:
        value = self.eval(node.value, frame)
        self.consume(value, node, frame, "yield from")
        return Unknown(node=node)

    def expr_Starred(self, node: ast.Starred, frame: Frame) -> Value:
        return self.eval(node.value, frame)

    # -- what starts workers ------------------------------------------------


def membership_key(test: ast.expr) -> str | None:
    """The key of `"key" in container`, or None for any other test."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In)
            and isinstance(test.left, ast.Constant) and isinstance(test.left.value, str)):
        return test.left.value
    return None
