"""What the deploy checks share: a failure collector, loaders for deploy/ (YAML, the Kubernetes
manifests), PromQL helpers, the .dockerignore matcher and the Dockerfile parser."""

import os
import re
import sys

SKIP = 77

try:
    import yaml
except ImportError:  # pragma: no cover - depends on the machine
    print("SKIP: PyYAML is not installed for %s (Debian: apt-get install python3-yaml)" % sys.executable)
    sys.exit(SKIP)


class Checker:
    """Collects failures so one run reports all of them."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
        return ok

    def fail(self, message):
        self.failures.append(message)

    def finish(self, what):
        for f in self.failures:
            print("FAIL: " + f)
        print("%s: %d checks passed, %d failed" % (what, self.passed, len(self.failures)))
        return 1 if self.failures else 0


# ---- loading --------------------------------------------------------------------------------

def deploy_files(src, exts):
    out = []
    for root, dirs, files in os.walk(os.path.join(src, "deploy")):
        dirs[:] = sorted(d for d in dirs if d not in ("models", "node_modules"))
        for f in sorted(files):
            if f.endswith(exts):
                out.append(os.path.join(root, f))
    return out


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_yaml(path):
    docs = load_yaml_docs(path)
    if len(docs) != 1:
        raise ValueError("%s: expected one YAML document, found %d" % (path, len(docs)))
    return docs[0]


def rel(src, path):
    return os.path.relpath(path, src)


def k8s_objects(src):
    """{(kind, name): object} over deploy/k8s/*.yaml, plus the file each came from."""
    objs, where = {}, {}
    for path in sorted(deploy_files(src, (".yaml", ".yml"))):
        if os.sep + "k8s" + os.sep not in path:
            continue
        for doc in load_yaml_docs(path):
            if isinstance(doc, dict) and "kind" in doc and "metadata" in doc:
                key = (doc["kind"], doc["metadata"]["name"])
                objs[key] = doc
                where[key] = rel(src, path)
    return objs, where


# ---- PromQL ---------------------------------------------------------------------------------

STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
IDENT_RE = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
SELECTOR_RE = re.compile(r"(kvserve_[A-Za-z0-9_]+)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
LEGEND_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

# Labels Prometheus (or prometheus-operator) attaches to every scraped series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "endpoint", "service"}


def metric_names(expr):
    """kvserve_* metric names an expression selects (string literals ignored)."""
    bare = STRING_RE.sub('""', expr)
    return sorted({t for t in IDENT_RE.findall(bare) if t.startswith("kvserve_")})


def selectors(expr):
    """[(metric, [(label, op, value)])] for each kvserve_*{...} selector."""
    out = []
    for m in SELECTOR_RE.finditer(expr):
        out.append((m.group(1), MATCHER_RE.findall(m.group(2))))
    return out


def grouping_labels(expr):
    labels = set()
    for m in GROUPING_RE.finditer(STRING_RE.sub('""', expr)):
        labels.update(x.strip() for x in m.group(1).split(",") if x.strip())
    return labels


def dashboard_queries(dashboard):
    """[(where, expr, legend)] for every panel target and templating query."""
    out = []

    def visit(node, where):
        if isinstance(node, dict):
            title = node.get("title") or where
            if isinstance(node.get("expr"), str):
                out.append((title, node["expr"], node.get("legendFormat", "")))
            for k, v in node.items():
                if k == "templating":
                    for var in v.get("list", []):
                        if var.get("type") == "query":
                            q = var.get("query")
                            q = q.get("query") if isinstance(q, dict) else q
                            out.append(("variable " + var["name"], q, ""))
                    continue
                visit(v, title)
        elif isinstance(node, list):
            for v in node:
                visit(v, where)

    visit(dashboard, "dashboard")
    return out


def alert_rules(groups_doc):
    return [r for g in groups_doc["groups"] for r in g["rules"]]


def adapter_rules(src):
    """The prometheus-adapter rules of the ConfigMap (the source of truth)."""
    cm = load_yaml(os.path.join(src, "deploy/k8s/prometheus-adapter-rules.yaml"))
    return yaml.safe_load(cm["data"]["config.yaml"])["rules"]


def adapter_exposed(rules):
    """{custom metric name: (series metric, extra matchers from seriesQuery)}."""
    exposed = {}
    for r in rules:
        sel = selectors(r["seriesQuery"])
        series = sel[0][0] if sel else r["seriesQuery"].split("{")[0].strip()
        matchers = [m for m in (sel[0][1] if sel else []) if m[0] not in TARGET_LABELS]
        name = r.get("name", {}).get("as") or series
        exposed[name] = (series, matchers)
    return exposed


def promql_for_promtool(expr):
    """Grafana / adapter templates replaced by values promtool can parse."""
    e = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    e = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", e)
    e = e.replace("<<.Series>>", "kvserve_placeholder").replace("<<.GroupBy>>", "pod")
    e = e.replace("{<<.LabelMatchers>>,", '{namespace="kvserve",').replace("<<.LabelMatchers>>", 'namespace="kvserve"')
    return e


# ---- .dockerignore --------------------------------------------------------------------------

def dockerignore_patterns(src):
    path = os.path.join(src, ".dockerignore")
    patterns = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pat = line[1:] if negate else line
            pat = os.path.normpath(pat.lstrip("/"))
            regex = ""
            i = 0
            while i < len(pat):
                if pat.startswith("**/", i):
                    regex += "(?:.*/)?"
                    i += 3
                elif pat.startswith("**", i):
                    regex += ".*"
                    i += 2
                elif pat[i] == "*":
                    regex += "[^/]*"
                    i += 1
                elif pat[i] == "?":
                    regex += "[^/]"
                    i += 1
                else:
                    regex += re.escape(pat[i])
                    i += 1
            patterns.append((re.compile(regex + r"\Z"), negate, line))
    return patterns


def dockerignored(patterns, relpath):
    """True when Docker leaves relpath (or a folder above it) out of the build context."""
    parts = relpath.split("/")
    for n in range(1, len(parts) + 1):
        prefix = "/".join(parts[:n])
        excluded = False
        for regex, negate, _ in patterns:
            if regex.match(prefix):
                excluded = not negate
        if excluded:
            return True
    return False


# ---- Dockerfile -----------------------------------------------------------------------------

def dockerfile_instructions(src):
    """[(stage or None, INSTRUCTION, args)] with continuation lines joined, comments dropped."""
    lines = open(os.path.join(src, "Dockerfile")).read().splitlines()
    out, stage, buf = [], None, ""
    for line in lines:
        if line.lstrip().startswith("#") and not buf:
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        text, buf = buf.strip(), ""
        if not text:
            continue
        instr, _, args = text.partition(" ")
        instr = instr.upper()
        args = " ".join(args.split())
        if instr == "FROM":
            m = re.search(r"\bAS\s+(\S+)", args, re.I)
            stage = m.group(1) if m else None
        out.append((stage, instr, args))
    return out


def build_packages(src):
    """The packages the README's build installs: the first `apt-get install` of
    scripts/install-deps.sh (the README runs it), else of the README's CI command."""
    script = os.path.join(src, "scripts/install-deps.sh")
    if os.path.exists(script):
        text = open(script).read().replace("\\\n", " ")
    else:
        text = open(os.path.join(src, "README.md")).read()
        m = re.search(r"\.ci/run executes.*?```\w*\n(.*?)```", text, re.S)
        text = m.group(1) if m else ""
    m = re.search(r"apt-get install ([^\n&|;]*)", text)
    return [w for w in m.group(1).split() if not w.startswith("-")] if m else []
