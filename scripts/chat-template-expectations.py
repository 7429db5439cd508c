#!/usr/bin/env python3
# chat-template-expectations.py: reference outputs of chat templates, as Hugging Face
# transformers' `apply_chat_template` renders them with Python jinja2.
#
# Renders every *.jinja in the templates folder (sorted by name) on every conversation of
# conversations.json, in exactly transformers' environment (ImmutableSandboxedEnvironment with
# trim_blocks, lstrip_blocks, loopcontrols and the {% generation %} tag; its tojson filter,
# raise_exception and strftime_now globals), and writes expected.json, which the C++ Jinja
# engine's tests compare against byte for byte. strftime_now formats a fixed time (NOW below),
# recorded in the output as "now". A render that fails records the error instead of the output
# ("raised": true when the template itself called raise_exception).
#
# Run from anywhere (relative paths are taken from the repository root):
#   scripts/chat-template-expectations.py [--templates ../shared/templates]
#       [--conversations tests/data/chat_templates/conversations.json]
#       [--out tests/data/chat_templates/expected.json]
#       [--table]                 also print which templates fail on which conversations
#       [--features [PATH]]       also write the list of Jinja features the templates use
#                                 (default PATH tests/data/chat_templates/FEATURES.md), found
#                                 by walking jinja2's own parse tree of each template
# Needs only python3 and jinja2 (Debian: python3-jinja2). Output is deterministic.

import argparse
import datetime
import json
import os
import re
import sys
from collections import defaultdict

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes as nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "scripts/chat-template-expectations.py"
NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
BOS = "<s>"
EOS = "</s>"
DEFAULT_FEATURES = "tests/data/chat_templates/FEATURES.md"


class GenerationTracker(jinja2.ext.Extension):
    """transformers' AssistantTracker when not tracking: {% generation %}body{% endgeneration %}
    renders body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


_raised = []  # exceptions raised by our raise_exception during the current render


def raise_exception(message):
    e = TemplateError(message)
    _raised.append(e)
    raise e


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


def make_env(env_class=ImmutableSandboxedEnvironment):
    env = env_class(trim_blocks=True, lstrip_blocks=True,
                    extensions=[jinja2.ext.loopcontrols, GenerationTracker])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_one(template, conv):
    del _raised[:]
    try:
        out = template.render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                              add_generation_prompt=conv["add_generation_prompt"],
                              bos_token=BOS, eos_token=EOS, **conv.get("kwargs", {}))
        return {"output": out}
    except Exception as e:  # every failure is the template's answer
        return {"error": str(e), "error_type": type(e).__name__,
                "raised": any(e is r for r in _raised)}


def repo_path(p):
    return p if os.path.isabs(p) else os.path.normpath(os.path.join(REPO, p))


def load_templates(folder):
    names = sorted(f for f in os.listdir(folder) if f.endswith(".jinja"))
    out = []
    for n in names:
        with open(os.path.join(folder, n), encoding="utf-8") as f:
            out.append((n, f.read()))
    return out


# ---------------------------------------------------------------------------------------------
# Feature survey: walk jinja2's parse tree of every template.

class TracingEnv(ImmutableSandboxedEnvironment):
    """Same behaviour; records the receiver type of every method call (used only by --features)."""
    calls = defaultdict(set)  # (receiver type, method, tag) -> templates
    current = None

    def call(__self, __context, __obj, *args, **kwargs):
        if isinstance(__obj, jinja2.Undefined):
            o = getattr(__obj, "_undefined_obj", None)
            n = getattr(__obj, "_undefined_name", None)
            if n is not None and o is not jinja2.utils.missing:
                exc = getattr(__obj, "_undefined_exception", None)
                tag = "blocked by sandbox" if exc is jinja2.exceptions.SecurityError else "undefined"
                TracingEnv.calls[(type(o).__name__, n, tag)].add(TracingEnv.current)
        else:
            recv = getattr(__obj, "__self__", None)
            name = getattr(__obj, "__name__", None)
            if recv is not None and name and not isinstance(recv, type(sys)):
                TracingEnv.calls[(type(recv).__name__, name, "ok")].add(TracingEnv.current)
        return super().call(__context, __obj, *args, **kwargs)


def _arg_repr(n, kinds=False):
    if isinstance(n, nodes.Const):
        if kinds:
            return {str: "str", int: "int", float: "float", bool: "bool", type(None): "none"}.get(type(n.value), "const")
        r = repr(n.value)
        return r if len(r) <= 24 else r[:20] + "...'"
    if isinstance(n, nodes.Neg) and isinstance(n.node, nodes.Const):
        return "int" if kinds else "-" + repr(n.node.value)
    if kinds and isinstance(n, (nodes.List, nodes.Dict)):
        return ("[]" if not n.items else "[…]") if isinstance(n, nodes.List) else ("{}" if not n.items else "{…}")
    return "…"


def _shape(name, n, kinds=False, parens=False):
    parts = [_arg_repr(a, kinds) for a in n.args]
    parts += [f"{k.key}={_arg_repr(k.value, kinds)}" for k in n.kwargs]
    if n.dyn_args is not None:
        parts.append("*…")
    if n.dyn_kwargs is not None:
        parts.append("**…")
    return f"{name}({', '.join(parts)})" if parts or parens else name


PASSED = {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"}
BUILTIN_NAMES = {"loop", "caller", "varargs", "kwargs", "true", "false", "none", "True", "False", "None"}


def survey(templates, env):
    F = defaultdict(lambda: defaultdict(set))  # category -> feature -> templates

    def add(cat, key, t):
        F[cat][key].add(t)

    for tname, src in templates:
        try:
            ast = env.parse(src)
        except Exception as e:
            add("parse errors", f"{type(e).__name__}: {e}", tname)
            continue
        macros = {m.name for m in ast.find_all(nodes.Macro)}
        # names the template reads from the render context: undeclared per jinja2.meta (run on a
        # separate parse: it optimizes the tree in place) and either never set by the template,
        # probed with `is defined`, or one of the variables transformers always passes
        stored = {x.name for x in ast.find_all(nodes.Name) if x.ctx in ("store", "param")}
        probed = {x.node.name for x in ast.find_all(nodes.Test)
                  if x.name in ("defined", "undefined") and isinstance(x.node, nodes.Name)}
        for v in sorted(jinja2.meta.find_undeclared_variables(env.parse(src))):
            if (v not in stored or v in PASSED or v in probed) and v not in BUILTIN_NAMES and v not in env.globals:
                add("context variables (read from the render context)", v, tname)

        # lexical features
        for _, ttype, value in env.lex(src):
            if ttype in ("block_begin", "variable_begin", "block_end", "variable_end") and "-" in value:
                add("lexical", "whitespace control '-' (" + ttype.split("_")[1] + ")", tname)
            elif ttype in ("block_begin", "variable_begin") and "+" in value:
                add("lexical", "'+' lstrip disable", tname)
            elif ttype == "comment_begin":
                add("lexical", "comments {# #}", tname)
            elif ttype == "raw_begin":
                add("lexical", "{% raw %}", tname)
            elif ttype == "string":
                add("lexical", "string literal " + ("'…'" if value[0] == "'" else '"…"'), tname)
                for esc in re.findall(r"\\(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", value[1:-1], re.S):
                    add("string literal escapes", esc if esc != "\\\n" else "\\<newline>", tname)
            elif ttype == "integer":
                add("literals", "integer", tname)
            elif ttype == "float":
                add("literals", "float", tname)

        def walk(n, ctx):
            # ctx: dict with 'macro' = name of enclosing macro or None
            if isinstance(n, nodes.Filter):
                if n.node is None:
                    add("filters", n.name + " (in {% filter %} block)", tname)
                add("filters", n.name, tname)
                if n.args or n.kwargs or n.dyn_args or n.dyn_kwargs:
                    add("filter arguments used", _shape(n.name, n), tname)
                if n.name in ("select", "reject") and n.args and isinstance(n.args[0], nodes.Const):
                    add("tests named by string (select/reject/selectattr/rejectattr)", str(n.args[0].value), tname)
                if n.name in ("selectattr", "rejectattr"):
                    if len(n.args) >= 2 and isinstance(n.args[1], nodes.Const):
                        add("tests named by string (select/reject/selectattr/rejectattr)", str(n.args[1].value), tname)
                    elif len(n.args) == 1:
                        add("tests named by string (select/reject/selectattr/rejectattr)", "(none: truthiness)", tname)
                if n.name == "map" and n.args and isinstance(n.args[0], nodes.Const):
                    add("filters named by string (map)", str(n.args[0].value), tname)
            elif isinstance(n, nodes.Test):
                add("tests", n.name, tname)
                if n.args or n.kwargs:
                    add("test arguments used", _shape(n.name, n), tname)
            elif isinstance(n, nodes.Call):
                c = n.node
                if isinstance(c, nodes.Getattr):
                    recv = c.node
                    if isinstance(recv, nodes.Name) and recv.name == "loop":
                        add("loop attributes", f"loop.{c.attr}()", tname)
                    else:
                        kind = "'literal'" if isinstance(recv, nodes.Const) and isinstance(recv.value, str) else "x"
                        add("methods", c.attr, tname)
                        add("method call shapes (argument kinds)", f"{kind}.{_shape(c.attr, n, kinds=True, parens=True)}", tname)
                elif isinstance(c, nodes.Name):
                    if c.name in macros:
                        add("calls", "macro call (user macro)", tname)
                        if n.kwargs:
                            add("calls", "macro call with keyword arguments", tname)
                        if ctx.get("macro") == c.name:
                            add("calls", "recursive macro call", tname)
                    elif c.name == "caller":
                        add("calls", "caller() inside macro", tname)
                    else:
                        add("global functions", c.name, tname)
                        if c.name == "namespace":
                            shape = "namespace(k=v, …)" if n.kwargs else _shape(c.name, n, kinds=True, parens=True)
                        elif c.name == "raise_exception":
                            shape = _shape(c.name, n, kinds=True, parens=True)
                        else:
                            shape = _shape(c.name, n, parens=True)
                        add("global call shapes", shape, tname)
                elif isinstance(c, nodes.ExtensionAttribute):
                    pass
                else:
                    add("calls", "call of " + type(c).__name__ + " expression", tname)
                if n.kwargs:
                    add("calls", "keyword arguments in calls", tname)
            elif isinstance(n, nodes.Getattr):
                if isinstance(n.node, nodes.Name) and n.node.name == "loop":
                    add("loop attributes", "loop." + n.attr, tname)
                else:
                    add("expressions", "attribute access a.b", tname)
            elif isinstance(n, nodes.Getitem):
                if isinstance(n.arg, nodes.Slice):
                    s = n.arg
                    f = lambda x: "" if x is None else (_arg_repr(x) if isinstance(x, nodes.Const) else ("-" + _arg_repr(x.node) if isinstance(x, nodes.Neg) else "…"))
                    shape = f(s.start) + ":" + f(s.stop) + (":" + f(s.step) if s.step is not None else "")
                    add("slices", "[" + shape + "]", tname)
                elif isinstance(n.arg, nodes.Const):
                    add("subscripts", "a[" + type(n.arg.value).__name__ + " literal]", tname)
                elif isinstance(n.arg, nodes.Neg):
                    add("subscripts", "a[-N] negative index", tname)
                else:
                    add("subscripts", "a[expr]", tname)
                if isinstance(n.node, nodes.Name) and n.node.name == "loop":
                    add("loop attributes", "loop[...]", tname)
            elif isinstance(n, nodes.Compare):
                for op in n.ops:
                    add("operators", {"eq": "==", "ne": "!=", "lt": "<", "lteq": "<=", "gt": ">", "gteq": ">=",
                                      "in": "in", "notin": "not in"}[op.op], tname)
                if len(n.ops) > 1:
                    add("operators", "chained comparison", tname)
            elif isinstance(n, nodes.BinExpr):
                sym = n.operator
                add("operators", sym, tname)
                if isinstance(n, (nodes.Mod,)) and isinstance(n.left, nodes.Const) and isinstance(n.left.value, str):
                    add("operators", "% string formatting ('...' % x)", tname)
                if isinstance(n, nodes.Mul) and any(isinstance(x, nodes.Const) and isinstance(x.value, str) for x in (n.left, n.right)):
                    add("operators", "* string repetition", tname)
                if isinstance(n, nodes.Add) and any(isinstance(x, nodes.Const) and isinstance(x.value, str) for x in (n.left, n.right)):
                    add("operators", "+ on strings", tname)
                if isinstance(n, nodes.Add) and any(isinstance(x, nodes.List) for x in (n.left, n.right)):
                    add("operators", "+ on lists", tname)
            elif isinstance(n, nodes.Concat):
                add("operators", "~ (concat)", tname)
            elif isinstance(n, nodes.UnaryExpr):
                if isinstance(n, nodes.Not) and isinstance(n.node, nodes.Test):
                    add("operators", "is not (negated test)", tname)
                add("operators", "not" if isinstance(n, nodes.Not) else "unary " + n.operator, tname)
            elif isinstance(n, nodes.CondExpr):
                add("operators", "inline if (a if c else b)" if n.expr2 is not None else "inline if without else", tname)
            elif isinstance(n, nodes.List):
                add("literals", "list [..]" if n.items else "empty list []", tname)
            elif isinstance(n, nodes.Dict):
                add("literals", "dict {..}" if n.items else "empty dict {}", tname)
            elif isinstance(n, nodes.Tuple) and n.ctx == "load":
                add("literals", "tuple (..)", tname)
            elif isinstance(n, nodes.Const):
                v = n.value
                key = {bool: "true/false", type(None): "none"}.get(type(v))
                if key:
                    add("literals", key, tname)
            # statements
            if isinstance(n, nodes.For):
                add("statements", "for", tname)
                if isinstance(n.target, nodes.Tuple):
                    add("statements", "for a, b in … (unpacking)", tname)
                if n.test is not None:
                    add("statements", "for … in … if cond (filtered loop)", tname)
                if n.else_:
                    add("statements", "for … else", tname)
                if n.recursive:
                    add("statements", "for … recursive", tname)
            elif isinstance(n, nodes.If):
                add("statements", "if", tname)
                if n.elif_:
                    add("statements", "elif", tname)
                if n.else_:
                    add("statements", "else", tname)
            elif isinstance(n, nodes.Macro):
                add("statements", "macro", tname)
                if n.defaults:
                    add("statements", "macro with default arguments", tname)
                names = {x.name for x in n.find_all(nodes.Name)}
                if "varargs" in names:
                    add("statements", "macro using varargs", tname)
                if "kwargs" in names:
                    add("statements", "macro using kwargs", tname)
                ctx = dict(ctx, macro=n.name)
            elif isinstance(n, nodes.CallBlock):
                if isinstance(n.call.node, nodes.ExtensionAttribute):
                    add("statements", "generation (transformers extension)", tname)
                else:
                    add("statements", "call (call block)", tname)
            elif isinstance(n, nodes.FilterBlock):
                add("statements", "filter (filter block)", tname)
            elif isinstance(n, nodes.Assign):
                add("statements", "set", tname)
                if isinstance(n.target, nodes.NSRef):
                    add("statements", "set ns.attr = … (namespace assignment)", tname)
                elif isinstance(n.target, nodes.Tuple):
                    add("statements", "set a, b = … (unpacking)", tname)
            elif isinstance(n, nodes.AssignBlock):
                add("statements", "set … endset (block set)", tname)
                if n.filter is not None:
                    add("statements", "block set with filter", tname)
            elif isinstance(n, nodes.With):
                add("statements", "with", tname)
            elif isinstance(n, nodes.Break):
                add("statements", "break", tname)
            elif isinstance(n, nodes.Continue):
                add("statements", "continue", tname)
            elif isinstance(n, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends, nodes.Block)):
                add("statements", type(n).__name__.lower(), tname)
            elif isinstance(n, nodes.Scope):
                add("statements", "scope", tname)
            for ch in n.iter_child_nodes():
                walk(ch, ctx)

        walk(ast, {"macro": None})
    return F


def features_markdown(F, templates, conversations, ntemplates):
    total = ntemplates
    lines = [
        "# Jinja features used by the chat templates",
        "",
        f"Generated by `{GENERATOR} --features` from the {total} templates in the templates folder",
        "(jinja2 " + jinja2.__version__ + "; parse tree walked with jinja2.nodes). Each line: feature — number of",
        "templates using it (names when 3 or fewer). Method receiver types come from tracing the renders",
        f"of the {len(conversations)} conversations (only methods those renders reached).",
        "",
    ]
    order = ["filters", "filter arguments used", "filters named by string (map)", "tests", "test arguments used",
             "tests named by string (select/reject/selectattr/rejectattr)", "methods",
             "method call shapes (argument kinds)",
             "method receivers (traced)", "global functions", "global call shapes", "calls", "statements",
             "loop attributes", "operators", "expressions", "subscripts", "slices", "literals", "lexical",
             "string literal escapes", "context variables (read from the render context)", "parse errors"]
    for cat in order + sorted(set(F) - set(order)):
        if cat not in F:
            continue
        lines.append(f"## {cat}")
        for key in sorted(F[cat], key=lambda k: (-len(F[cat][k]), k)):
            ts = sorted(F[cat][key])
            who = " (" + ", ".join(t[:-6] for t in ts) + ")" if len(ts) <= 3 else ""
            lines.append(f"- `{key}` — {len(ts)}{who}")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="Reference outputs of chat templates as transformers renders them.")
    ap.add_argument("--templates", default="../shared/templates")
    ap.add_argument("--conversations", default="tests/data/chat_templates/conversations.json")
    ap.add_argument("--out", default="tests/data/chat_templates/expected.json")
    ap.add_argument("--table", action="store_true", help="print which templates fail on which conversations")
    ap.add_argument("--features", nargs="?", const=DEFAULT_FEATURES, default=None,
                    help="also write the Jinja feature survey (markdown) to this path")
    a = ap.parse_args()

    templates = load_templates(repo_path(a.templates))
    with open(repo_path(a.conversations), encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]

    env = make_env()
    results = []
    for tname, src in templates:
        try:
            tmpl = env.from_string(src)
            compile_error = None
        except Exception as e:
            compile_error = {"error": str(e), "error_type": type(e).__name__, "raised": False}
        for conv in conversations:
            r = {"template": tname, "conversation": conv["name"]}
            r.update(compile_error if compile_error else render_one(tmpl, conv))
            results.append(r)

    doc = {"generator": GENERATOR, "jinja2_version": jinja2.__version__, "now": NOW.isoformat(),
           "bos_token": BOS, "eos_token": EOS, "results": results}
    out = repo_path(a.out)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")

    errs = [r for r in results if "error" in r]
    raised = sum(1 for r in errs if r["raised"])
    print(f"templates={len(templates)} conversations={len(conversations)} rendered={len(results) - len(errs)} "
          f"errors={len(errs)} (raised={raised} other={len(errs) - raised}) -> {os.path.relpath(out, REPO)}")

    if a.table:
        cnames = [c["name"] for c in conversations]
        print()
        print("Legend: . ok   R raise_exception   E other error;  columns:")
        for i, c in enumerate(cnames):
            print(f"  {i:2d} {c}")
        by = {(r["template"], r["conversation"]): r for r in results}
        w = max(len(t) for t, _ in templates)
        print(" " * w + "  " + " ".join(f"{i:2d}" for i in range(len(cnames))))
        for tname, _ in templates:
            row = []
            for c in cnames:
                r = by[(tname, c)]
                row.append(" ." if "error" not in r else (" R" if r["raised"] else " E"))
            if any(x != " ." for x in row):
                print(f"{tname:<{w}}  " + " ".join(row))
        print(f"(templates with no errors: {sum(1 for t, _ in templates if all('error' not in by[(t, c)] for c in cnames))})")
        print()
        print("Distinct errors:")
        msgs = defaultdict(list)
        for r in errs:
            msgs[(r["template"], r["error_type"], r["raised"], r["error"])].append(r["conversation"])
        for (t, et, rz, m), cs in sorted(msgs.items()):
            m1 = m if len(m) <= 110 else m[:107] + "..."
            print(f"  {t}: {'raise_exception' if rz else et}: {m1!r} [{', '.join(cs)}]")

    if a.features:
        F = survey(templates, env)
        tenv = make_env(TracingEnv)
        TracingEnv.calls = defaultdict(set)
        for tname, src in templates:
            TracingEnv.current = tname
            try:
                tmpl = tenv.from_string(src)
            except Exception:
                continue
            for conv in conversations:
                render_one(tmpl, conv)
        for (typ, name, tag), ts in TracingEnv.calls.items():
            if typ == "GenerationTracker":
                continue
            key = f"{typ}.{name}()" + ("" if tag == "ok" else f" [{tag}]")
            F["method receivers (traced)"][key] |= ts
        md = features_markdown(F, templates, conversations, len(templates))
        fp = repo_path(a.features)
        with open(fp, "w", encoding="utf-8", newline="\n") as f:
            f.write(md)
        print(f"features -> {os.path.relpath(fp, REPO)}")


if __name__ == "__main__":
    main()
