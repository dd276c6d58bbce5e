"""A policy rule's static check: CEL parsed, type-checked and costed before it is run.

Owns what ``validate`` says about a rule beyond "it compiles", and the rule budget. The
CEL engine (``common-expression-language``, the Rust ``cel`` crate) compiles and runs an
expression but neither type-checks it against declared variables nor bounds its cost: a
rule naming ``chnage.digest`` fails only when a promotion meets it, and nine nested
``.all(…)`` over ten-item lists runs for hours. So every rule is read here first:

- **Parsed** by a recursive-descent parser of CEL's grammar (the spec's ``Expr``:
  ternary, ``||``, ``&&``, relations and ``in``, arithmetic, ``!``/``-``, member access,
  calls, index, list and map literals, the literals, ``//`` comments). What the engine
  accepts beyond it (message construction ``T{…}``, optional ``?.``) is refused here
  with a sentence: a rule this check cannot read is one it cannot bound.
- **Type-checked** against the documented variables (``VARIABLES``, the shapes
  ``core.policy.context`` builds): an unknown variable, field or function, an operator
  or function applied to types it has no overload for, and an answer that is not a
  ``bool``, each a sentence naming the column in the expression.
- **Costed**: an upper bound on the evaluation steps, from each value's largest size
  (every variable's list and string is bounded: ``release.evidence`` holds at most the
  evidence kinds, a string at most ``MAX_STRING`` characters). A comprehension
  (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) costs its range's size times
  its body's cost, so nesting multiplies; string and list operations cost their
  operands' sizes. A rule whose bound is over ``BUDGET`` is never run: ``validate``
  says so at its line and a plan meeting it denies the promotion (``policy_denied …
  could not be evaluated (budget exceeded)``), in the time it takes to read it.

Why a static bound rather than a deadline: the engine runs a rule in Rust without
giving the interpreter back, so a thread cannot time it out (nor answer ``/healthz``
meanwhile), and a process per rule costs more than the rules; the bound needs neither,
gives the same answer in ``validate`` and in every plan, and depends on the expression
alone. Measured numbers (what the budget costs in time) are in ``docs/promotion.md``.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from reconciler.core.desired import EvidenceKind

#: The most evaluation steps a rule's static bound may reach. Measured: a rule at this
#: bound runs in well under 100 ms with the engine (docs/promotion.md, "Rule budget").
BUDGET = 100_000
#: The longest string a variable holds, for the cost of string operations on it.
MAX_STRING = 4096
#: The most evidence kinds a release lists (``release.evidence``: each kind once).
MAX_EVIDENCE = len(EvidenceKind)


# -- types ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class T:
    """A CEL type with its largest size: ``kind`` is int, uint, double, bool, string,
    bytes, null, timestamp, duration, type, dyn, list, map or record (a map whose keys
    are known: the documented variables); ``size`` bounds a string's, bytes', list's or
    map's length."""

    kind: str
    size: int = 0
    elem: T | None = None  # list element, map value
    key: T | None = None  # map key
    fields: tuple[tuple[str, T], ...] = ()  # record fields

    def show(self) -> str:
        if self.kind == "list":
            return f"list({self.elem.show() if self.elem else 'dyn'})"
        if self.kind == "map":
            return (f"map({self.key.show() if self.key else 'dyn'}, "
                    f"{self.elem.show() if self.elem else 'dyn'})")
        if self.kind == "record":
            return "map(string, dyn)"
        return self.kind

    def field(self, name: str) -> T | None:
        return next((t for n, t in self.fields if n == name), None)


INT, UINT, DOUBLE, BOOL = T("int"), T("uint"), T("double"), T("bool")
NULL, TIMESTAMP, DURATION, TYPE = T("null"), T("timestamp"), T("duration"), T("type")
DYN = T("dyn", size=MAX_STRING)
STRING = T("string", size=MAX_STRING)
NUMERIC = ("int", "uint", "double")


def _record(**fields: T) -> T:
    return T("record", size=len(fields), fields=tuple(fields.items()))


#: The variables a rule sees (``core.policy.context`` builds them; keep the two alike).
VARIABLES: dict[str, T] = {
    "environment": STRING,
    "service": STRING,
    "change": _record(action=STRING, digest=STRING, registryHost=STRING, repository=STRING,
                      reference=STRING, tag=STRING),
    "release": _record(evidence=T("list", size=MAX_EVIDENCE, elem=T(
        "string", size=max(len(k.value) for k in EvidenceKind))),
                       evidenceComplete=BOOL, version=STRING),
    "upstream": _record(name=STRING, proven=BOOL, provenSeconds=INT),
    "soak": _record(requiredSeconds=INT),
    "now": TIMESTAMP,
    "local": _record(weekday=INT, hour=INT, minute=INT, date=STRING),
}


# -- lexer ----------------------------------------------------------------------------------

class CelSyntaxError(Exception):
    """The expression is not CEL this check reads; ``column`` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


_TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<string>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
        |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\?\.|[-+*/%!<>?:.,()\[\]{}])
""", re.VERBOSE | re.DOTALL)

_RESERVED = {"as", "break", "const", "continue", "else", "for", "function", "if", "import",
             "let", "loop", "package", "namespace", "return", "var", "void", "while"}


@dataclass(frozen=True)
class Tok:
    kind: str  # number, string, ident, op, end
    text: str
    at: int  # 0-based offset


def _lex(text: str) -> list[Tok]:
    out: list[Tok] = []
    at = 0
    while at < len(text):
        found = _TOKEN.match(text, at)
        if found is None:
            raise CelSyntaxError(f"unexpected character {text[at]!r}", at + 1)
        kind = found.lastgroup or "space"
        if kind != "space":
            out.append(Tok(kind, found.group(), at))
        at = found.end()
    out.append(Tok("end", "", len(text)))
    return out


# -- syntax tree ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    at: int  # 0-based offset of the node in the expression
    op: str  # lit, ident, select, call, index, list, map
    value: object = None  # lit: its T; ident/select/call: the name
    args: tuple[Node, ...] = ()
    target: Node | None = None  # select operand, method receiver, index operand
    keys: tuple[Node, ...] = field(default=())  # map literal keys


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _lex(text)
        self.pos = 0

    def peek(self, text: str) -> bool:
        tok = self.toks[self.pos]
        return tok.kind == "op" and tok.text == text

    def take(self) -> Tok:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, text: str) -> Tok:
        tok = self.take()
        if tok.kind != "op" or tok.text != text:
            shown = tok.text or "the end"
            raise CelSyntaxError(f"expected {text!r}, found {shown!r}", tok.at + 1)
        return tok

    def parse(self) -> Node:
        node = self.expr()
        tok = self.toks[self.pos]
        if tok.kind != "end":
            raise CelSyntaxError(f"unexpected {tok.text!r}", tok.at + 1)
        return node

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.peek("?"):
            at = self.take().at
            yes = self.binary(0)
            self.expect(":")
            no = self.expr()
            return Node(at, "call", "_?_:_", (cond, yes, no))
        return cond

    LEVELS: tuple[tuple[str, ...], ...] = (("||",), ("&&",),
                                           ("==", "!=", "<", "<=", ">", ">=", "in"),
                                           ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while True:
            tok = self.toks[self.pos]
            if (tok.kind == "op" or tok.text == "in") and tok.text in self.LEVELS[level]:
                self.pos += 1
                right = self.binary(level + 1)
                left = Node(tok.at, "call", f"_{tok.text}_", (left, right))
            else:
                return left

    def unary(self) -> Node:
        if self.peek("!") or self.peek("-"):
            tok = self.take()
            if tok.text == "-" and self.toks[self.pos].kind == "number":
                number = self.take()
                return self.postfix(_number(f"-{number.text}", tok.at))
            return Node(tok.at, "call", "!_" if tok.text == "!" else "-_", (self.unary(),))
        return self.postfix(self.primary())

    def args(self, close: str) -> tuple[Node, ...]:
        out: list[Node] = []
        while not self.peek(close):
            out.append(self.expr())
            if not self.peek(close):
                self.expect(",")
        self.expect(close)
        return tuple(out)

    def postfix(self, node: Node) -> Node:
        while True:
            if self.peek("."):
                self.take()
                name = self.take()
                if name.kind != "ident":
                    raise CelSyntaxError("expected a field or method name after '.'",
                                         name.at + 1)
                if self.peek("("):
                    self.take()
                    node = Node(name.at, "call", name.text, self.args(")"), target=node)
                else:
                    node = Node(name.at, "select", name.text, target=node)
            elif self.peek("["):
                at = self.take().at
                index = self.expr()
                self.expect("]")
                node = Node(at, "index", args=(index,), target=node)
            elif self.peek("?."):
                raise CelSyntaxError("optional field selection (?.) is not supported in "
                                     "policy rules", self.toks[self.pos].at + 1)
            elif self.peek("{") and node.op in ("ident", "select"):
                raise CelSyntaxError("message construction (Type{...}) is not supported "
                                     "in policy rules", self.toks[self.pos].at + 1)
            else:
                return node

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "number":
            return _number(tok.text, tok.at)
        if tok.kind == "string":
            return _string(tok.text, tok.at)
        if tok.kind == "ident":
            if tok.text in ("true", "false"):
                return Node(tok.at, "lit", BOOL)
            if tok.text == "null":
                return Node(tok.at, "lit", NULL)
            if tok.text in _RESERVED or tok.text == "in":
                raise CelSyntaxError(f"{tok.text!r} is a reserved word", tok.at + 1)
            if self.peek("("):
                self.take()
                return Node(tok.at, "call", tok.text, self.args(")"))
            return Node(tok.at, "ident", tok.text)
        if tok.kind == "op" and tok.text == "(":
            inner = self.expr()
            self.expect(")")
            return inner
        if tok.kind == "op" and tok.text == "[":
            items: list[Node] = []
            while not self.peek("]"):
                items.append(self.expr())
                if not self.peek("]"):
                    self.expect(",")
            self.expect("]")
            return Node(tok.at, "list", args=tuple(items))
        if tok.kind == "op" and tok.text == "{":
            keys: list[Node] = []
            values: list[Node] = []
            while not self.peek("}"):
                keys.append(self.expr())
                self.expect(":")
                values.append(self.expr())
                if not self.peek("}"):
                    self.expect(",")
            self.expect("}")
            return Node(tok.at, "map", args=tuple(values), keys=tuple(keys))
        if tok.kind == "op" and tok.text == ".":
            raise CelSyntaxError("a leading '.' (root namespace) is not supported in policy "
                                 "rules", tok.at + 1)
        raise CelSyntaxError(f"unexpected {tok.text or 'end of the expression'!r}", tok.at + 1)


def _number(text: str, at: int) -> Node:
    lowered = text.lower()
    if lowered.endswith("u"):
        return Node(at, "lit", UINT)
    if not lowered.startswith(("0x", "-0x")) and any(c in lowered for c in ".e"):
        return Node(at, "lit", DOUBLE)
    return Node(at, "lit", INT)


def _string(text: str, at: int) -> Node:
    prefix = ""
    while text[0] in "rRbB":
        prefix += text[0].lower()
        text = text[1:]
    quote = 3 if text[:3] in ('"""', "'''") else 1
    length = len(text) - 2 * quote
    return Node(at, "lit", T("bytes" if "b" in prefix else "string", size=max(0, length)))


# -- checking -------------------------------------------------------------------------------

class CelTypeError(Exception):
    """A rule that cannot evaluate to a boolean; ``column`` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True)
class Checked:
    """A rule read: its answer's type and the upper bound of its evaluation steps."""

    type: T
    cost: int


_MACROS = {"all", "exists", "exists_one", "map", "filter"}
_TIME_PARTS = {"getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek",
               "getDayOfYear", "getHours", "getMinutes", "getSeconds", "getMilliseconds"}
_DURATION_PARTS = {"getHours", "getMinutes", "getSeconds", "getMilliseconds"}
_CONVERSIONS = {"int": INT, "uint": UINT, "double": DOUBLE, "string": T("string", size=64),
                "bytes": T("bytes", size=MAX_STRING), "bool": BOOL, "timestamp": TIMESTAMP,
                "duration": DURATION}
_TYPE_NAMES = {"int", "uint", "double", "bool", "string", "bytes", "list", "map",
               "null_type", "type", "timestamp", "duration", "dyn"}
#: Above this, sizes and costs are "too large" all the same (no big-number arithmetic).
_CAP = 10**15


def _cap(value: int) -> int:
    return min(value, _CAP)


def _join(a: T, b: T) -> T:
    """The type of a value that is ``a`` or ``b`` (a list's elements, a ternary)."""
    if a.kind == b.kind and a.kind not in ("list", "map", "record"):
        return T(a.kind, size=max(a.size, b.size))
    if a.kind == b.kind == "list" and a.elem and b.elem:
        return T("list", size=max(a.size, b.size), elem=_join(a.elem, b.elem))
    if a.kind == "null":
        return b
    if b.kind == "null":
        return a
    return T("dyn", size=max(a.size, b.size, _inner(a), _inner(b)))


def _weight(t: T) -> int:
    """How many values ``t`` is made of (what copying it costs): a list of ten lists of
    ten ints weighs 111."""
    if t.kind == "list":
        return _cap(1 + max(t.size, 1) * _weight(t.elem or DYN))
    if t.kind == "map":
        return _cap(1 + max(t.size, 1) * (_weight(t.key or DYN) + _weight(t.elem or DYN)))
    if t.kind == "record":
        return 1 + sum(_weight(f) for _, f in t.fields)
    return 1 + t.size // 64


def _inner(t: T) -> int:
    """The largest size anywhere inside ``t`` (what a ``dyn`` made of it may hold)."""
    sizes = [t.size]
    if t.elem is not None:
        sizes.append(_inner(t.elem))
    if t.key is not None:
        sizes.append(_inner(t.key))
    sizes.extend(_inner(f) for _, f in t.fields)
    return max(sizes)


class _Checker:
    def __init__(self, variables: dict[str, T]) -> None:
        self.scopes: list[dict[str, T]] = [dict(variables)]

    def fail(self, node: Node, message: str) -> CelTypeError:
        return CelTypeError(message, node.at + 1)

    def lookup(self, name: str) -> T | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def check(self, node: Node) -> Checked:
        if node.op == "lit":
            assert isinstance(node.value, T)
            return Checked(node.value, 1)
        if node.op == "ident":
            name = str(node.value)
            found = self.lookup(name)
            if found is None:
                if name in _TYPE_NAMES:
                    return Checked(TYPE, 1)
                known = ", ".join(sorted(self.scopes[0]))
                raise self.fail(node, f"unknown variable {name!r} (a rule sees: {known})")
            return Checked(found, 1)
        if node.op == "select":
            assert node.target is not None
            inner = self.check(node.target)
            return Checked(self.select(node, inner.type, str(node.value)), inner.cost + 1)
        if node.op == "index":
            assert node.target is not None
            inner, index = self.check(node.target), self.check(node.args[0])
            return Checked(self.index(node, inner.type, index.type, node.args[0]),
                           _cap(inner.cost + index.cost + 1))
        if node.op == "list":
            items = [self.check(a) for a in node.args]
            elem = items[0].type if items else DYN
            for item in items[1:]:
                elem = _join(elem, item.type)
            return Checked(T("list", size=len(items), elem=elem),
                           _cap(1 + sum(i.cost for i in items)))
        if node.op == "map":
            keys = [self.check(k) for k in node.keys]
            values = [self.check(v) for v in node.args]
            key = keys[0].type if keys else DYN
            value = values[0].type if values else DYN
            for k in keys[1:]:
                key = _join(key, k.type)
            for v in values[1:]:
                value = _join(value, v.type)
            if key.kind not in ("string", "int", "uint", "bool", "dyn"):
                raise self.fail(node, f"a map key cannot be {key.show()}")
            return Checked(T("map", size=len(keys), key=key, elem=value),
                           _cap(1 + sum(c.cost for c in keys + values)))
        return self.call(node)

    def select(self, node: Node, of: T, name: str) -> T:
        if of.kind == "record":
            found = of.field(name)
            if found is None:
                known = ", ".join(n for n, _ in of.fields)
                raise self.fail(node, f"unknown field {name!r} (it has: {known})")
            return found
        if of.kind == "map":
            if of.key is not None and of.key.kind not in ("string", "dyn"):
                raise self.fail(node, f"field {name!r} of a {of.show()}: its keys are not "
                                "strings")
            return of.elem or DYN
        if of.kind == "dyn":
            return T("dyn", size=of.size)
        raise self.fail(node, f"{of.show()} has no fields (selecting {name!r})")

    def index(self, node: Node, of: T, index: T, index_node: Node) -> T:
        if of.kind == "list":
            if index.kind not in ("int", "uint", "dyn"):
                raise self.fail(node, f"a list index must be an int, not {index.show()}")
            return of.elem or DYN
        if of.kind == "map":
            return of.elem or DYN
        if of.kind == "record":
            if index_node.op == "lit" and index.kind == "string":
                return T("dyn", size=_inner(of))
            if index.kind not in ("string", "dyn"):
                raise self.fail(node, f"a map key here is a string, not {index.show()}")
            return T("dyn", size=_inner(of))
        if of.kind == "dyn":
            return T("dyn", size=of.size)
        raise self.fail(node, f"{of.show()} cannot be indexed")

    def call(self, node: Node) -> Checked:
        name = str(node.value)
        if node.target is not None and name in _MACROS:
            return self.comprehension(node, name)
        if node.target is None and name == "has":
            if len(node.args) != 1 or node.args[0].op != "select":
                raise self.fail(node, "has() takes one field selection, as in "
                                "has(change.tag)")
            inner = self.check(node.args[0])
            return Checked(BOOL, inner.cost + 1)
        receiver = self.check(node.target) if node.target is not None else None
        args = [self.check(a) for a in node.args]
        cost = _cap(1 + (receiver.cost if receiver else 0) + sum(a.cost for a in args))
        types = [a.type for a in args]
        if receiver is not None:
            result, extra = self.method(node, name, receiver.type, types)
        else:
            result, extra = self.function(node, name, types)
        return Checked(result, _cap(cost + extra))

    def comprehension(self, node: Node, name: str) -> Checked:
        assert node.target is not None
        arity = (2, 3) if name == "map" else (2,)
        if len(node.args) not in arity:
            raise self.fail(node, f".{name}() takes a variable and an expression"
                            + (" (or a variable, a filter and an expression)"
                               if name == "map" else ""))
        var = node.args[0]
        if var.op != "ident":
            raise self.fail(var, f".{name}()'s first argument is a variable name")
        over = self.check(node.target)
        if over.type.kind == "list":
            elem, count = over.type.elem or DYN, over.type.size
        elif over.type.kind in ("map", "record"):
            elem, count = (over.type.key or STRING), over.type.size
        elif over.type.kind == "dyn":
            elem, count = T("dyn", size=over.type.size), over.type.size
        else:
            raise self.fail(node, f".{name}() needs a list or a map, not {over.type.show()}")
        self.scopes.append({str(var.value): elem})
        try:
            bodies = [self.check(a) for a in node.args[1:]]
        finally:
            self.scopes.pop()
        if name != "map" or len(bodies) == 2:  # map(x, filter, value) filters too
            predicate = bodies[0]
            if predicate.type.kind not in ("bool", "dyn"):
                raise self.fail(node.args[1], f".{name}()'s condition must be a bool, not "
                                f"{predicate.type.show()}")
        step = _cap(1 + sum(b.cost for b in bodies))
        if name in ("map", "filter"):
            # the engine builds the answer by appending to a copy of it at each step
            # (CEL's macro expansion: __result__ + [value]): quadratic in the count
            kept = bodies[-1].type if name == "map" else elem
            step = _cap(step + _cap(max(count, 1) * _weight(kept)))
        cost = _cap(over.cost + _cap(max(count, 1) * step))
        if name == "map":
            return Checked(T("list", size=count, elem=bodies[-1].type), cost)
        if name == "filter":
            return Checked(T("list", size=count, elem=elem), cost)
        return Checked(BOOL, cost)

    def method(self, node: Node, name: str, of: T, args: list[T]) -> tuple[T, int]:
        def want(*kinds: str) -> None:
            if len(args) != len(kinds) or any(a.kind not in (k, "dyn")
                                              for a, k in zip(args, kinds, strict=False)):
                shown = ", ".join(a.show() for a in args)
                raise self.fail(node, f"no overload of {of.show()}.{name}({shown})")

        if of.kind == "dyn":
            return T("dyn", size=of.size), of.size
        if of.kind == "string" and name in ("contains", "startsWith", "endsWith", "matches"):
            want("string")
            # a regular expression is matched in linear time by the engine (Rust regex)
            return BOOL, of.size + args[0].size
        if name == "size" and of.kind in ("string", "bytes", "list", "map", "record"):
            want()
            return INT, 1
        if of.kind == "timestamp" and name in _TIME_PARTS:
            want()  # the engine takes no time-zone argument: `local` is the policy's zone
            return INT, 1
        if of.kind == "duration" and name in _DURATION_PARTS:
            want()
            return INT, 1
        raise self.fail(node, f"unknown function {name!r} on {of.show()}")

    def function(self, node: Node, name: str, args: list[T]) -> tuple[T, int]:
        shown = ", ".join(a.show() for a in args)

        def nope() -> CelTypeError:
            return self.fail(node, f"no overload of {name.strip('_') or name} for ({shown})")

        kinds = [a.kind for a in args]
        if "dyn" in kinds and name not in ("_?_:_", "_&&_", "_||_", "!_", "size"):
            return T("dyn", size=max(_inner(a) for a in args)), sum(a.size for a in args)
        if name in ("_&&_", "_||_"):
            if any(k not in ("bool", "dyn") for k in kinds):
                raise nope()
            return BOOL, 0
        if name == "!_":
            if kinds[0] not in ("bool", "dyn"):
                raise nope()
            return BOOL, 0
        if name == "-_":
            if kinds[0] not in ("int", "double", "duration"):
                raise nope()
            return args[0], 0
        if name == "_?_:_":
            if kinds[0] not in ("bool", "dyn"):
                raise self.fail(node, f"a condition must be a bool, not {args[0].show()}")
            return _join(args[1], args[2]), 0
        if name in ("_==_", "_!=_"):
            a, b = kinds
            if a != b and "null" not in kinds and not (a in NUMERIC and b in NUMERIC) \
                    and {a, b} != {"map", "record"}:
                raise nope()
            # Equality stops at the shorter side's end (a 4096-long variable against a
            # short literal costs the literal), as the ordering comparisons below.
            return BOOL, min(args[0].size, args[1].size)
        if name in ("_<_", "_<=_", "_>_", "_>=_"):
            a, b = kinds
            if not (a == b and a in ("int", "uint", "double", "string", "bytes", "bool",
                                     "timestamp", "duration")) \
                    and not (a in NUMERIC and b in NUMERIC):
                raise nope()
            return BOOL, min(args[0].size, args[1].size)
        if name == "_in_":
            container = args[1]
            if container.kind == "list":
                # Each item is one equality: the shorter of the needle and the item.
                item = container.elem.size if container.elem is not None else args[0].size
                return BOOL, _cap(container.size * (1 + min(args[0].size, item)))
            if container.kind in ("map", "record"):
                return BOOL, 1
            raise nope()
        if name in ("_+_", "_-_", "_*_", "_/_", "_%_"):
            return self.arithmetic(name, args, nope)
        if name == "size" and len(args) == 1 and kinds[0] in ("string", "bytes", "list",
                                                              "map", "record", "dyn"):
            return INT, 1
        if name in _CONVERSIONS and len(args) == 1:
            result = _CONVERSIONS[name]
            if name == "string" and kinds[0] in ("string", "bytes"):
                result = T("string", size=args[0].size)
            return result, args[0].size
        if name == "dyn" and len(args) == 1:
            return T("dyn", size=_inner(args[0])), 0
        if name == "type" and len(args) == 1:
            return TYPE, 0
        raise self.fail(node, f"unknown function {name!r}" + (f" for ({shown})"
                                                               if args else ""))

    def arithmetic(self, name: str, args: list[T],
                   nope: Callable[[], CelTypeError]) -> tuple[T, int]:
        a, b = args
        kinds = (a.kind, b.kind)
        if name == "_+_":
            if kinds[0] == kinds[1] and kinds[0] in ("string", "bytes"):
                return T(a.kind, size=_cap(a.size + b.size)), _cap(a.size + b.size)
            if kinds == ("list", "list"):
                elem = _join(a.elem or DYN, b.elem or DYN)
                return T("list", size=_cap(a.size + b.size), elem=elem), _cap(a.size + b.size)
            if kinds in (("timestamp", "duration"), ("duration", "timestamp")):
                return TIMESTAMP, 0
        if name == "_-_" and kinds == ("timestamp", "timestamp"):
            return DURATION, 0
        if name == "_-_" and kinds == ("timestamp", "duration"):
            return TIMESTAMP, 0
        if name in ("_+_", "_-_") and kinds == ("duration", "duration"):
            return DURATION, 0
        if kinds[0] == kinds[1] and kinds[0] in NUMERIC:
            if name == "_%_" and kinds[0] == "double":
                raise nope()
            return a, 0
        raise nope()


@cache
def check(expression: str) -> Checked:
    """The rule's answer type and cost bound; ``CelSyntaxError`` / ``CelTypeError`` when
    it cannot be read or cannot answer a boolean."""
    tree = _Parser(expression).parse()
    checked = _Checker(VARIABLES).check(tree)
    if checked.type.kind not in ("bool", "dyn"):
        raise CelTypeError(f"the rule answers {checked.type.show()}, not a bool "
                           "(true lets the promotion go)", 1)
    return checked


def problem(expression: str) -> str | None:
    """Why the rule cannot be trusted to answer (a sentence with the column), or None:
    it parses, type-checks to a boolean and its cost bound is within ``BUDGET``."""
    try:
        checked = check(expression)
    except (CelSyntaxError, CelTypeError) as exc:
        return f"{exc} (column {exc.column})"
    except RecursionError:
        return "nested too deeply to read"
    if checked.cost > BUDGET:
        return over_budget(checked.cost)
    return None


def over_budget(cost: int) -> str:
    shown = f"more than {_CAP:,}" if cost >= _CAP else f"{cost:,}"
    return (f"budget exceeded: it may take {shown} evaluation steps, the budget is "
            f"{BUDGET:,} (each comprehension multiplies by its list's size, each comparison "
            "by its strings' length)")
