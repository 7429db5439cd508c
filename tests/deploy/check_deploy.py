#!/usr/bin/python3
"""Checks of deploy/, the Dockerfile and .dockerignore that need neither Docker nor a cluster.

  check_deploy.py --source-dir DIR files                   manifests, Compose, Dockerfile, dashboard
  check_deploy.py --source-dir DIR promtool                promtool on the config, rules, queries
  check_deploy.py --source-dir DIR --kvserve BIN server    against a running `kvserve serve`

files     every YAML and JSON file under deploy/ parses; the Kubernetes manifests carry what a
          deployment needs (probe paths, ports, GPU request, grace period >= preStop + drain,
          HPA metrics wired through the prometheus-adapter rules, PDB, session-affinity hash);
          Compose, Prometheus and Grafana files point at each other; the Dockerfile's stages,
          packages, COPY sources (present, not .dockerignored) and runtime settings.
promtool  `promtool check config` / `check rules` / `test rules`, and every PromQL expression of
          the dashboard and the adapter rules parsed by promtool (as recording rules).
server    starts `kvserve serve --model synthetic:tiny` on a free loopback port, scrapes /metrics
          and checks that every metric the dashboard, alert rules, adapter rules and HPA use
          exists there with the type the query assumes (a _bucket series needs a histogram)
          and with the label names and values the queries select; that every KVSERVE_* variable
          and `kvserve serve` flag named in deploy/ and the Dockerfile is a real one; the image's
          health probe against the server; the runtime-package resolver on the binary; and
          that SIGTERM drains and exits 0.

Exit status: 0 pass, 1 fail, 77 skipped (python3-yaml or promtool missing: Debian packages
python3-yaml and prometheus). Run with Debian's /usr/bin/python3.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

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


# ---- files ----------------------------------------------------------------------------------

def check_files(src, c):
    # 1. Everything parses.
    for path in deploy_files(src, (".yaml", ".yml")):
        try:
            load_yaml_docs(path)
            c.check(True, "")
        except Exception as e:  # noqa: BLE001 - report any parse error
            c.fail("%s does not parse as YAML: %s" % (rel(src, path), e))
    for path in deploy_files(src, (".json",)):
        try:
            json.load(open(path))
            c.check(True, "")
        except Exception as e:  # noqa: BLE001
            c.fail("%s does not parse as JSON: %s" % (rel(src, path), e))
    if c.failures:
        return

    objs, where = k8s_objects(src)

    def get(kind, name):
        obj = objs.get((kind, name))
        c.check(obj is not None, "deploy/k8s has no %s %s" % (kind, name))
        return obj

    cm = get("ConfigMap", "kvserve-config")
    dep = get("Deployment", "kvserve")
    svc = get("Service", "kvserve")
    pdb = get("PodDisruptionBudget", "kvserve")
    mon = objs.get(("PodMonitor", "kvserve")) or objs.get(("ServiceMonitor", "kvserve"))
    c.check(mon is not None, "deploy/k8s has no PodMonitor or ServiceMonitor kvserve")
    hpa = get("HorizontalPodAutoscaler", "kvserve")
    rule = get("PrometheusRule", "kvserve")
    dr = get("DestinationRule", "kvserve-session-affinity")
    if None in (cm, dep, svc, pdb, mon, hpa, rule, dr):
        return
    env = cm["data"]

    # Deployment.
    pod = dep["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    c.check(dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(),
            "Deployment selector does not match its pod labels")
    ctr = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    c.check(ports.get("http") == 8080, "Deployment: container port http must be 8080 (got %s)" % ports.get("http"))
    c.check(ports.get("grpc") == 50051, "Deployment: container port grpc must be 50051 (got %s)" % ports.get("grpc"))
    c.check(str(env.get("KVSERVE_HTTP_PORT")) == "8080", "ConfigMap KVSERVE_HTTP_PORT must be 8080 like the container port")
    c.check(str(env.get("KVSERVE_GRPC_PORT")) == "50051", "ConfigMap KVSERVE_GRPC_PORT must be 50051 like the container port")

    def probe(name, path):
        p = ctr.get(name)
        if not c.check(p is not None and "httpGet" in p, "Deployment: %s must be an httpGet probe" % name):
            return
        c.check(p["httpGet"].get("path") == path, "Deployment: %s path must be %s" % (name, path))
        port = p["httpGet"].get("port")
        c.check(port in ("http", 8080), "Deployment: %s must use the HTTP port (got %s)" % (name, port))

    probe("livenessProbe", "/health")
    probe("readinessProbe", "/ready")

    limits = ctr.get("resources", {}).get("limits", {})
    requests = ctr.get("resources", {}).get("requests", {})
    c.check(str(limits.get("nvidia.com/gpu")) == "1", "Deployment: limits nvidia.com/gpu must be 1")
    if "nvidia.com/gpu" in requests:
        c.check(str(requests["nvidia.com/gpu"]) == str(limits.get("nvidia.com/gpu")),
                "Deployment: nvidia.com/gpu request and limit must be equal")
    if "cpu" in requests and "KVSERVE_THREADS" in env:
        c.check(int(env["KVSERVE_THREADS"]) <= float(str(requests["cpu"]).rstrip("m")) /
                (1000 if str(requests["cpu"]).endswith("m") else 1),
                "ConfigMap KVSERVE_THREADS exceeds the container's CPU request")

    env_from = [e.get("configMapRef", {}).get("name") for e in ctr.get("envFrom", [])]
    c.check("kvserve-config" in env_from, "Deployment: envFrom must reference ConfigMap kvserve-config")

    grace = float(env.get("KVSERVE_SHUTDOWN_GRACE", 30))
    pre = ctr.get("lifecycle", {}).get("preStop")
    pre_sleep = 0.0
    if c.check(pre is not None, "Deployment: a preStop hook is required"):
        if "sleep" in pre and isinstance(pre["sleep"], dict):
            pre_sleep = float(pre["sleep"]["seconds"])
        elif "exec" in pre:
            cmd = pre["exec"]["command"]
            nums = [float(x) for x in cmd if re.fullmatch(r"\d+(\.\d+)?", str(x))]
            c.check("sleep" in " ".join(map(str, cmd)) and nums, "Deployment: preStop should sleep N seconds")
            pre_sleep = nums[0] if nums else 0.0
    tgps = spec.get("terminationGracePeriodSeconds", 30)
    c.check(tgps >= pre_sleep + grace + 1,
            "Deployment: terminationGracePeriodSeconds %s < preStop %s s + --shutdown-grace %s s + 1 s"
            % (tgps, pre_sleep, grace))
    c.check(tgps <= pre_sleep + grace + 60,
            "Deployment: terminationGracePeriodSeconds %s is far above preStop + --shutdown-grace (%s s)"
            % (tgps, pre_sleep + grace))

    mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts", [])}
    model = str(env.get("KVSERVE_MODEL", ""))
    c.check(model.startswith("/models/") and "/models" in mounts,
            "KVSERVE_MODEL (%s) must be a file on the volume mounted at /models" % model)
    sc = spec.get("securityContext", {})
    c.check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0,
            "Deployment: the pod must run as a non-root user")

    # Service.
    c.check(svc["spec"]["selector"].items() <= pod_labels.items(), "Service selector does not match the pods")
    sports = {p["name"]: p for p in svc["spec"]["ports"]}
    for name, number in (("http", 8080), ("grpc", 50051)):
        p = sports.get(name)
        if c.check(p is not None, "Service: port %s missing" % name):
            c.check(p["port"] == number, "Service: port %s must be %d" % (name, number))
            c.check(p.get("targetPort") in (name, number), "Service: port %s must target the container's %s" % (name, name))

    # PodDisruptionBudget.
    c.check(pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items(), "PDB selector does not match the pods")
    c.check("maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"], "PDB needs maxUnavailable or minAvailable")
    if "minAvailable" in pdb["spec"] and isinstance(pdb["spec"]["minAvailable"], int):
        c.check(pdb["spec"]["minAvailable"] < hpa["spec"].get("minReplicas", 1),
                "PDB minAvailable must stay below the HPA's minReplicas, or no drain can proceed")

    # Pod/ServiceMonitor.
    endpoints = mon["spec"].get("podMetricsEndpoints") or mon["spec"].get("endpoints") or []
    c.check(mon["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
            or mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"].get("labels", {}).items(),
            "%s selector does not match kvserve" % mon["kind"])
    c.check(any(e.get("port") == "http" and e.get("path", "/metrics") == "/metrics" for e in endpoints),
            "%s must scrape port http at /metrics" % mon["kind"])
    if mon.get("spec", {}).get("jobLabel"):
        job = pod_labels.get(mon["spec"]["jobLabel"])
        c.check(job == "kvserve", "PodMonitor jobLabel gives job=%s; the alert rules expect job=\"kvserve\"" % job)

    # PrometheusRule == alerts.yml.
    alerts = load_yaml(os.path.join(src, "deploy/prometheus/alerts.yml"))
    c.check(rule["spec"]["groups"] == alerts["groups"],
            "deploy/k8s/prometheusrule.yaml spec.groups differs from deploy/prometheus/alerts.yml")

    # HPA through prometheus-adapter.
    c.check(hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment" and hpa["spec"]["scaleTargetRef"]["name"] == "kvserve",
            "HPA must scale Deployment kvserve")
    c.check(hpa["spec"].get("minReplicas", 1) <= hpa["spec"]["maxReplicas"], "HPA minReplicas > maxReplicas")
    rules = adapter_rules(src)
    values = load_yaml(os.path.join(src, "deploy/k8s/prometheus-adapter-values.yaml"))
    c.check(values["rules"]["custom"] == rules,
            "prometheus-adapter-values.yaml rules.custom differs from prometheus-adapter-rules.yaml")
    exposed = adapter_exposed(rules)
    hpa_series = set()
    for m in hpa["spec"]["metrics"]:
        if m["type"] not in ("Pods", "Object", "External"):
            continue
        name = m[m["type"].lower()]["metric"]["name"]
        if c.check(name in exposed, "HPA metric %s is not published by the prometheus-adapter rules" % name):
            series, matchers = exposed[name]
            hpa_series.add((series, tuple(matchers)))
    c.check(any(s == "kvserve_kv_cache_usage_ratio" for s, _ in hpa_series),
            "HPA must scale on kvserve_kv_cache_usage_ratio")
    c.check(any(s == "kvserve_requests" and ("state", "=", "waiting") in m for s, m in hpa_series),
            "HPA must scale on waiting requests (kvserve_requests{state=\"waiting\"})")
    for r in rules:
        c.check(all(k in r["resources"]["overrides"] for k in ("namespace", "pod")),
                "adapter rule %s must map the namespace and pod labels" % r["seriesQuery"])

    # Session affinity.
    hash_cfg = dr["spec"].get("trafficPolicy", {}).get("loadBalancer", {}).get("consistentHash", {})
    c.check(str(hash_cfg.get("httpHeaderName", "")).lower() == "x-session-id",
            "DestinationRule must hash on the X-Session-Id header")
    c.check(dr["spec"]["host"].split(".")[0] == "kvserve", "DestinationRule host must be the kvserve Service")
    routes = [o for (k, _), o in objs.items() if k in ("HTTPRoute", "GRPCRoute")]
    backends = {(o["kind"], b["name"], b.get("port")) for o in routes for r in o["spec"]["rules"] for b in r["backendRefs"]}
    c.check(("HTTPRoute", "kvserve", 8080) in backends, "an HTTPRoute must send traffic to Service kvserve:8080")
    c.check(("GRPCRoute", "kvserve", 50051) in backends, "a GRPCRoute must send traffic to Service kvserve:50051")
    gateways = {n for (k, n) in objs if k == "Gateway"}
    for o in routes:
        for p in o["spec"]["parentRefs"]:
            c.check(p["name"] in gateways, "%s %s: parent Gateway %s is not defined" % (o["kind"], o["metadata"]["name"], p["name"]))

    # Kustomization.
    kust = load_yaml(os.path.join(src, "deploy/k8s/kustomization.yaml"))
    for r in kust["resources"]:
        c.check(os.path.exists(os.path.join(src, "deploy/k8s", r)), "kustomization.yaml lists missing %s" % r)

    check_compose(src, c)
    check_dashboard(src, c)
    check_dockerfile(src, c)


def check_compose(src, c):
    compose = load_yaml(os.path.join(src, "deploy/compose.yaml"))
    services = compose.get("services", {})
    for s in ("kvserve", "prometheus", "grafana"):
        c.check(s in services, "compose.yaml: service %s missing" % s)
    if "kvserve" not in services:
        return
    kv = services["kvserve"]
    ports = " ".join(map(str, kv.get("ports", [])))
    c.check("8080" in ports and "50051" in ports, "compose.yaml: kvserve must publish 8080 and 50051")
    c.check(kv.get("build", {}).get("target") in ("cpu", "cuda"), "compose.yaml: kvserve must build a Dockerfile target")
    grace = float(str(kv.get("environment", {}).get("KVSERVE_SHUTDOWN_GRACE", 30)))
    stop = kv.get("stop_grace_period", "10s")
    m = re.fullmatch(r"(\d+)(s|m)", str(stop))
    stop_s = int(m.group(1)) * (60 if m.group(2) == "m" else 1) if m else 10
    c.check(stop_s > grace, "compose.yaml: stop_grace_period %s must exceed KVSERVE_SHUTDOWN_GRACE %s" % (stop, grace))
    base = os.path.join(src, "deploy")
    for name in ("prometheus", "grafana"):
        for v in services.get(name, {}).get("volumes", []):
            host = str(v).split(":")[0]
            if host.startswith("."):
                c.check(os.path.exists(os.path.join(base, host)), "compose.yaml: %s mounts missing %s" % (name, host))
    prom = load_yaml(os.path.join(src, "deploy/prometheus/prometheus.yml"))
    targets = [t for j in prom["scrape_configs"] if j["job_name"] == "kvserve"
               for sc in j.get("static_configs", []) for t in sc["targets"]]
    c.check(targets == ["kvserve:8080"], "prometheus.yml: job kvserve must scrape kvserve:8080 (got %s)" % targets)
    ds = load_yaml(os.path.join(src, "deploy/grafana/provisioning/datasources/prometheus.yml"))
    c.check(any(d.get("url") == "http://prometheus:9090" for d in ds["datasources"]),
            "Grafana data source must point at http://prometheus:9090")
    prov = load_yaml(os.path.join(src, "deploy/grafana/provisioning/dashboards/kvserve.yml"))
    dash_dirs = {p["options"]["path"] for p in prov["providers"]}
    mounted = [str(v).split(":")[1] for v in services.get("grafana", {}).get("volumes", []) if "kvserve.json" in str(v)]
    c.check(any(os.path.dirname(m) in dash_dirs for m in mounted),
            "compose.yaml must mount deploy/grafana/kvserve.json into the provisioned dashboard folder")
    gpu = load_yaml(os.path.join(src, "deploy/compose.gpu.yaml"))
    gkv = gpu["services"]["kvserve"]
    c.check(gkv.get("build", {}).get("target") == "cuda", "compose.gpu.yaml must build the cuda target")
    devices = gkv.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    c.check(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices),
            "compose.gpu.yaml must reserve an NVIDIA GPU")


def check_dashboard(src, c):
    dash = json.load(open(os.path.join(src, "deploy/grafana/kvserve.json")))
    queries = dashboard_queries(dash)
    exprs = " ".join(q for _, q, _ in queries)
    ds_vars = {v["name"] for v in dash.get("templating", {}).get("list", []) if v.get("type") == "datasource"}
    for p in dash["panels"]:
        uid = p.get("datasource", {}).get("uid", "")
        c.check(uid.strip("${}") in ds_vars or uid == "prometheus",
                "dashboard panel '%s': data source %s is neither the variable nor 'prometheus'" % (p["title"], uid))
    ids = [p["id"] for p in dash["panels"]]
    c.check(len(ids) == len(set(ids)), "dashboard: panel ids repeat")
    required = {
        "KV usage": r"kvserve_kv_cache_usage_ratio",
        "cache blocks by state": r"by \(state\) \(kvserve_kv_cache_blocks",
        "tokens/s": r"kvserve_tokens_per_second|rate\(kvserve_generation_tokens_total",
        "TTFT p50": r"histogram_quantile\(0\.5, [^;]*kvserve_time_to_first_token_seconds_bucket",
        "TTFT p99": r"histogram_quantile\(0\.99, [^;]*kvserve_time_to_first_token_seconds_bucket",
        "inter-token p50": r"histogram_quantile\(0\.5, [^;]*kvserve_inter_token_latency_seconds_bucket",
        "inter-token p99": r"histogram_quantile\(0\.99, [^;]*kvserve_inter_token_latency_seconds_bucket",
        "waiting requests": r'kvserve_requests\{[^}]*state="waiting"|by \(state\) \(kvserve_requests\{',
        "running requests": r'kvserve_requests\{[^}]*state="running"|by \(state\) \(kvserve_requests\{',
        "preemptions": r"kvserve_preemptions_total",
        "evictions by reason": r"by \(reason\) \(rate\(kvserve_kv_evictions_total",
        "prefix-cache hit rate": r"kvserve_prefix_cache_hits_total[^;]*/[^;]*kvserve_prefix_cache_queries_total",
        "chat sessions": r"kvserve_chat_sessions",
    }
    joined = ";".join(q for _, q, _ in queries)
    for what, pattern in required.items():
        c.check(re.search(pattern, joined) is not None, "dashboard has no panel for %s (/%s/)" % (what, pattern))
    c.check("kvserve_" in exprs, "dashboard has no kvserve queries")


def check_dockerfile(src, c):
    instrs = dockerfile_instructions(src)
    froms = [(s, a) for s, i, a in instrs if i == "FROM"]
    stages = {s: a.split()[0] for s, a in froms}
    c.check(stages.get("build-cpu") == "debian:12", "Dockerfile: stage build-cpu must be FROM debian:12")
    c.check(stages.get("cpu") == "debian:12-slim", "Dockerfile: stage cpu must be FROM debian:12-slim")
    devel, base = stages.get("build-cuda", ""), stages.get("cuda", "")
    c.check(re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-devel-ubuntu\d\d\.\d\d", devel) is not None,
            "Dockerfile: build-cuda must be FROM nvidia/cuda:${CUDA_VERSION}-devel-<ubuntu> (got %s)" % devel)
    c.check(re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-(base|runtime)-ubuntu\d\d\.\d\d", base) is not None,
            "Dockerfile: cuda must be FROM nvidia/cuda:${CUDA_VERSION}-base|runtime-<ubuntu> (got %s)" % base)
    c.check(devel.split("-")[-1] == base.split("-")[-1], "Dockerfile: CUDA build and runtime images differ in OS")
    c.check(froms and froms[-1][0] == "cuda", "Dockerfile: the CUDA runtime stage should be the last (default) target")
    version = [a for s, i, a in instrs if i == "ARG" and s is None and a.startswith("CUDA_VERSION=")]
    c.check(bool(version) and re.fullmatch(r"CUDA_VERSION=13\.0\.\d+", version[0]) is not None,
            "Dockerfile: a global ARG CUDA_VERSION=13.0.x is required (the toolkit the project builds with)")

    # Build packages: the README's (scripts/install-deps.sh), by running that script or by
    # installing a superset of its build list.
    pkgs = set(build_packages(src))
    c.check(len(pkgs) > 5, "cannot read the build packages from scripts/install-deps.sh or README.md")
    for stage in ("build-cpu", "build-cuda"):
        runs = " ".join(a for s, i, a in instrs if s == stage and i == "RUN")
        copies = " ".join(a for s, i, a in instrs if s == stage and i == "COPY")
        if "install-deps.sh" in runs:
            c.check("scripts/install-deps.sh" in copies, "Dockerfile (%s): runs install-deps.sh without copying it" % stage)
            c.check("--test" not in runs, "Dockerfile (%s): the image needs no test tools (install-deps.sh --test)" % stage)
        else:
            missing = sorted(p for p in pkgs if p not in runs.split())
            c.check(not missing, "Dockerfile (%s): does not install %s, which the README's build does" % (stage, missing))
        c.check("-DKVSERVE_CUDA=%s" % ("ON" if stage == "build-cuda" else "OFF") in runs,
                "Dockerfile: %s must configure -DKVSERVE_CUDA=%s" % (stage, "ON" if stage == "build-cuda" else "OFF"))
        c.check("runtime-packages.sh" in runs, "Dockerfile: %s must list the runtime packages" % stage)

    # COPY sources: present, not .dockerignored, and covering the folders CMake builds.
    patterns = dockerignore_patterns(src)
    copied = {}
    for s, i, a in instrs:
        if i not in ("COPY", "ADD") or "--from=" in a:
            continue
        words = [w for w in a.split() if not w.startswith("--")]
        for source in words[:-1]:
            path = os.path.normpath(source)
            copied.setdefault(s, set()).add(path)
            full = os.path.join(src, path)
            if not c.check(os.path.exists(full), "Dockerfile (%s): COPY source %s does not exist" % (s, source)):
                continue
            files = [path] if os.path.isfile(full) else [
                os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(full) for f in fs]
            ignored = [f for f in files if dockerignored(patterns, f)]
            c.check(not ignored, "Dockerfile (%s): COPY %s but .dockerignore drops %s" % (s, source, ignored[:3]))
    cmake = open(os.path.join(src, "CMakeLists.txt")).read()
    depth, needed = 0, ["CMakeLists.txt", "cmake"]
    for line in cmake.splitlines():
        code = line.split("#")[0]
        if re.match(r"\s*if\s*\(", code):
            depth += 1
        elif re.match(r"\s*endif\s*\(", code):
            depth -= 1
        m = re.match(r"\s*add_subdirectory\((\w+)", code)
        if m and depth == 0:
            needed.append(m.group(1))
    for stage in ("build-cpu", "build-cuda"):
        for d in needed:
            c.check(d in copied.get(stage, set()), "Dockerfile (%s): no COPY of %s (CMake needs it)" % (stage, d))
    for d in (".git", "build", "build-deploy", "tests/e2e/node_modules"):
        c.check(dockerignored(patterns, d), ".dockerignore should leave out %s" % d)

    # Runtime stages: same settings, no compilers, non-root, ports, health check.
    def settings(stage):
        return [(i, a) for s, i, a in instrs if s == stage and i in ("ENV", "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD")]

    c.check(settings("cpu") == settings("cuda"), "Dockerfile: the cpu and cuda runtime stages differ in ENV/USER/EXPOSE/HEALTHCHECK/ENTRYPOINT/CMD")
    for stage in ("cpu", "cuda"):
        got = dict(settings(stage))
        c.check(set(got.get("EXPOSE", "").split()) == {"8080", "50051"}, "Dockerfile (%s): EXPOSE 8080 50051" % stage)
        user = got.get("USER", "0").split(":")[0]
        c.check(user.isdigit() and user != "0", "Dockerfile (%s): USER must be a numeric non-root uid (got %s)" % (stage, user))
        c.check("/health" in got.get("HEALTHCHECK", "") or "kvserve-healthcheck" in got.get("HEALTHCHECK", ""),
                "Dockerfile (%s): HEALTHCHECK on /health required" % stage)
        c.check("KVSERVE_MODEL=/models/" in got.get("ENV", ""), "Dockerfile (%s): ENV KVSERVE_MODEL=/models/..." % stage)
        c.check("kvserve" in got.get("ENTRYPOINT", ""), "Dockerfile (%s): ENTRYPOINT kvserve" % stage)
        runs = " ".join(a for s, i, a in instrs if s == stage and i == "RUN")
        for bad in ("build-essential", "g++", "gcc", "cmake", "-dev ", "curl"):
            c.check(bad not in runs, "Dockerfile (%s): runtime stage installs %s" % (stage, bad.strip()))
        c.check("install-runtime.sh" in runs, "Dockerfile (%s): runtime stage must run install-runtime.sh" % stage)
    uid = dict(settings("cpu")).get("USER", "").split(":")[0]
    pod_uid = None
    for doc in load_yaml_docs(os.path.join(src, "deploy/k8s/deployment.yaml")):
        pod_uid = doc["spec"]["template"]["spec"].get("securityContext", {}).get("runAsUser")
    c.check(str(pod_uid) == uid, "deployment.yaml runAsUser %s differs from the image's USER %s" % (pod_uid, uid))


# ---- promtool -------------------------------------------------------------------------------

def check_promtool(src, c):
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: promtool is not installed (Debian: apt-get install --no-install-recommends prometheus)")
        return SKIP

    def run(args, what, cwd=None):
        r = subprocess.run([promtool] + args, capture_output=True, text=True, cwd=cwd)
        c.check(r.returncode == 0, "%s failed:\n%s%s" % (what, r.stdout, r.stderr))
        return r

    pdir = os.path.join(src, "deploy/prometheus")
    run(["check", "config", "prometheus.yml"], "promtool check config deploy/prometheus/prometheus.yml", pdir)
    run(["check", "rules", "alerts.yml"], "promtool check rules deploy/prometheus/alerts.yml", pdir)
    if os.path.exists(os.path.join(pdir, "alerts_test.yml")):
        run(["test", "rules", "alerts_test.yml"], "promtool test rules deploy/prometheus/alerts_test.yml", pdir)

    # Every other PromQL expression, parsed by promtool as recording rules.
    exprs = []
    dash = json.load(open(os.path.join(src, "deploy/grafana/kvserve.json")))
    for where, q, _ in dashboard_queries(dash):
        if q.startswith("label_values("):
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            q = m.group(1) if m else q
        exprs.append(("dashboard: " + where, q))
    for r in adapter_rules(src):
        exprs.append(("adapter seriesQuery", r["seriesQuery"]))
        exprs.append(("adapter metricsQuery", r["metricsQuery"]))
    with tempfile.TemporaryDirectory() as tmp:
        for n, (where, q) in enumerate(exprs):
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                yaml.safe_dump({"groups": [{"name": "check", "rules": [{"record": "check:expr:%d" % n,
                                                                          "expr": promql_for_promtool(q)}]}]}, f)
            r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
            c.check(r.returncode == 0, "%s: PromQL does not parse: %s\n%s" % (where, q, r.stdout + r.stderr))
    return 0


# ---- server ---------------------------------------------------------------------------------

def parse_exposition(text):
    """({family: type}, {sample name: [labels dict]})."""
    types, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s", line)
            if m:
                labels = dict((k, v) for k, v in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
                samples.setdefault(m.group(1), []).append(labels)
    return types, samples


def resolve_metric(name, types, samples):
    """None when `name` is usable in PromQL against this exposition, else the reason."""
    for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram", "summary")), ("_count", ("histogram", "summary"))):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            base = name[: -len(suffix)]
            if types[base] in kinds:
                return None
            return "%s is a %s: it has no %s series" % (base, types[base], suffix)
    if name in types:
        if types[name] in ("histogram", "summary"):
            return "%s is a %s: query %s_bucket / _sum / _count" % (name, types[name], name)
        return None
    if name in samples:
        return None
    return "no metric %s in /metrics" % name


def labels_of(name, samples):
    """Label names and their values over the series a name selects."""
    out = {}
    for labels in samples.get(name, []):
        for k, v in labels.items():
            out.setdefault(k, set()).add(v)
    return out


def check_expr(c, where, expr, legend, types, samples, extra_names=()):
    names = metric_names(expr)
    label_pool = set(TARGET_LABELS) | {"le"}
    for name in names:
        if name in extra_names:
            continue
        reason = resolve_metric(name, types, samples)
        if not c.check(reason is None, "%s: %s (in: %s)" % (where, reason, expr)):
            continue
        label_pool |= set(labels_of(name, samples))
    for name, matchers in selectors(expr):
        if name in extra_names:
            continue
        have = labels_of(name, samples)
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if not c.check(label in have, "%s: %s has no label %s (in: %s)" % (where, name, label, expr)):
                continue
            if op == "=":
                c.check(value in have[label], "%s: %s{%s} has no value %r (has %s)" % (where, name, label, value, sorted(have[label])))
    for label in grouping_labels(expr):
        c.check(label in label_pool, "%s: groups by %s, which no metric of the query has (in: %s)" % (where, label, expr))
    for label in LEGEND_RE.findall(legend or ""):
        c.check(label in label_pool, "%s: legend uses {{%s}}, which the query does not return" % (where, label))


def http_get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None, ""


def subcommands(kvserve):
    r = subprocess.run([kvserve, "--help"], capture_output=True, text=True, timeout=30)
    text = r.stdout.split("Subcommands:", 1)[1] if "Subcommands:" in r.stdout else ""
    return set(re.findall(r"^\s+([a-z][a-z0-9-]*)\s", text, re.M))


def help_flags(kvserve, sub):
    """(flags, environment variables) of `kvserve SUB`, or (None, None) without that command."""
    if sub not in subcommands(kvserve):
        return None, None
    r = subprocess.run([kvserve, sub, "--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return None, None
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", r.stdout))
    flags |= set(re.findall(r"(?<![\w-])(-[a-z])\b,", r.stdout))
    envs = set(re.findall(r"\(Env:(KVSERVE_[A-Z0-9_]+)\)", r.stdout))
    return flags, envs


def readme_commands(text, sub):
    """Flags given to `kvserve SUB` in the README's code blocks (continuation lines joined)."""
    out = []
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    blocks += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S))
    for block in blocks:
        for cmd in block.replace("\\\n", " ").splitlines():
            for m in re.finditer(r"\bkvserve(?::\w+)?\s+%s\b(.*?)(?:&&|\||;|$)" % sub, cmd):
                out.append(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])(?=[\s=]|$)", m.group(1)))
    return out


def check_server(src, kvserve, c):
    if not kvserve or not os.access(kvserve, os.X_OK):
        c.fail("kvserve binary not found: %s" % kvserve)
        return
    serve_flags, serve_envs = help_flags(kvserve, "serve")
    if not c.check(serve_flags is not None and serve_envs, "`kvserve serve --help` failed"):
        return

    # KVSERVE_* variables named anywhere in deploy/ and the Dockerfile are the server's, except
    # the probe's own and Compose's host-side settings.
    not_flags = {"KVSERVE_MODELS_DIR", "KVSERVE_HEALTHCHECK_HOST", "KVSERVE_HEALTHCHECK_TIMEOUT",
                 "KVSERVE_HEALTHCHECK_API_KEY", "KVSERVE_HEALTHCHECK"}
    texts = {rel(src, p): open(p).read() for p in deploy_files(src, (".yaml", ".yml", ".md", ".json", ".sh"))}
    texts["Dockerfile"] = open(os.path.join(src, "Dockerfile")).read()
    for path, text in sorted(texts.items()):
        for env in sorted(set(re.findall(r"\bKVSERVE_[A-Z0-9_]*[A-Z0-9]\b", text))):
            if env in not_flags:
                continue
            c.check(env in serve_envs, "%s names %s, which is not a `kvserve serve` variable" % (path, env))

    # Flags in deploy/README.md's commands.
    readme = texts.get("deploy/README.md", "")
    c.check(bool(readme), "deploy/README.md is missing")
    for flags in readme_commands(readme, "serve"):
        for f in flags:
            c.check(f in serve_flags, "deploy/README.md: `kvserve serve %s` is not a flag of serve" % f)
    plan_flags, _ = help_flags(kvserve, "plan")
    plan_cmds = readme_commands(readme, "plan")
    c.check(bool(plan_cmds), "deploy/README.md should show `kvserve plan` for sizing")
    c.check(plan_flags is not None, "kvserve has no `plan` subcommand for deploy/README.md's `kvserve plan` lines")
    for flags in plan_cmds if plan_flags is not None else []:
        for f in flags:
            c.check(f in plan_flags, "deploy/README.md: `kvserve plan %s` is not a flag of plan" % f)

    # The runtime-package resolver on this binary (the Dockerfile runs it in its build stages).
    # A CUDA build here links the toolkit's libraries from /usr/local/cuda, which may come from
    # NVIDIA's tarball (no package owns them); the CUDA image gets them from its base image.
    if shutil.which("dpkg") and shutil.which("ldd"):
        r = subprocess.run(["bash", os.path.join(src, "deploy/docker/runtime-packages.sh"), kvserve],
                           capture_output=True, text=True,
                           env=dict(os.environ, RUNTIME_PACKAGES_IGNORE="^/usr/local/cuda"))
        pkgs = r.stdout.split()
        if c.check(r.returncode == 0, "runtime-packages.sh failed on %s:\n%s" % (kvserve, r.stderr)):
            c.check("libc6" in pkgs and "libstdc++6" in pkgs, "runtime-packages.sh missed libc6/libstdc++6: %s" % pkgs)
            c.check(not [p for p in pkgs if p.endswith("-dev") or p.startswith(("gcc", "g++", "cpp", "binutils"))],
                    "runtime-packages.sh lists build-only packages: %s" % pkgs)
            print("runtime packages of this build: " + " ".join(pkgs))

    # The server.
    work = tempfile.mkdtemp(prefix="kvserve-deploy-")
    out_path = os.path.join(work, "serve.out")
    err_path = os.path.join(work, "serve.err")
    proc = subprocess.Popen(
        [kvserve, "serve", "--model", "synthetic:tiny", "--host", "127.0.0.1", "--http-port", "0",
         "--grpc-port", "-1", "--threads", "1", "--shutdown-grace", "5"],
        stdout=open(out_path, "w"), stderr=open(err_path, "w"),
        env={k: v for k, v in os.environ.items() if not k.startswith("KVSERVE_")})
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"HTTP on http://127\.0\.0\.1:(\d+)", open(out_path).read())
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        if not c.check(port is not None, "kvserve serve did not print its HTTP port:\n" + open(err_path).read()[-2000:]):
            return
        base = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 120
        while http_get(base + "/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        c.check(http_get(base + "/ready")[0] == 200, "kvserve never became ready")
        status, text = http_get(base + "/metrics", timeout=30)
        if not c.check(status == 200, "GET /metrics answered %s" % status):
            return
        types, samples = parse_exposition(text)
        c.check(len(types) > 10, "GET /metrics has only %d metric families" % len(types))

        # Dashboard, alerts, adapter rules, HPA.
        dash = json.load(open(os.path.join(src, "deploy/grafana/kvserve.json")))
        for where, q, legend in dashboard_queries(dash):
            check_expr(c, "dashboard '%s'" % where, q, legend, types, samples)
        alerts = load_yaml(os.path.join(src, "deploy/prometheus/alerts.yml"))
        for r in alert_rules(alerts):
            check_expr(c, "alert %s" % r["alert"], r["expr"], "", types, samples)
            for text_ in r.get("annotations", {}).values():
                for label in re.findall(r"\$labels\.(\w+)", text_):
                    pool = set(TARGET_LABELS)
                    for n in metric_names(r["expr"]):
                        pool |= set(labels_of(n, samples))
                    c.check(label in pool, "alert %s: annotation uses $labels.%s, which its query lacks" % (r["alert"], label))
        rules = adapter_rules(src)
        for r in rules:
            check_expr(c, "adapter rule", r["seriesQuery"], "", types, samples)
            query = r["metricsQuery"].replace("<<.Series>>", metric_names(r["seriesQuery"])[0])
            query = query.replace("<<.GroupBy>>", "pod").replace("<<.LabelMatchers>>", 'namespace="kvserve"')
            check_expr(c, "adapter rule", query, "", types, samples)
        exposed = adapter_exposed(rules)
        objs, _ = k8s_objects(src)
        hpa = objs.get(("HorizontalPodAutoscaler", "kvserve"))
        for m in (hpa or {}).get("spec", {}).get("metrics", []):
            if m["type"] == "Pods":
                name = m["pods"]["metric"]["name"]
                series = exposed.get(name, (name, []))[0]
                c.check(resolve_metric(series, types, samples) is None,
                        "HPA metric %s -> %s is not in /metrics" % (name, series))

        # The image's health probe, against this server.
        probe = os.path.join(src, "deploy/docker/healthcheck.sh")
        penv = {k: v for k, v in os.environ.items() if not k.startswith("KVSERVE_")}
        r = subprocess.run(["bash", probe], env=dict(penv, KVSERVE_HTTP_PORT=str(port)), capture_output=True, text=True)
        c.check(r.returncode == 0, "healthcheck.sh against a running server exited %d: %s" % (r.returncode, r.stderr))
        r = subprocess.run(["bash", probe, "/ready"], env=dict(penv, KVSERVE_HTTP_PORT=str(port)), capture_output=True, text=True)
        c.check(r.returncode == 0, "healthcheck.sh /ready against a ready server exited %d: %s" % (r.returncode, r.stderr))
        r = subprocess.run(["bash", probe, "/no-such-path"], env=dict(penv, KVSERVE_HTTP_PORT=str(port)), capture_output=True, text=True)
        c.check(r.returncode == 1, "healthcheck.sh on a 404 path should exit 1, exited %d" % r.returncode)

        # SIGTERM drains and exits 0 (what the preStop + grace period in deployment.yaml rely on).
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
            c.check(rc == 0, "kvserve serve exited %d after SIGTERM (expected 0)" % rc)
        except subprocess.TimeoutExpired:
            c.fail("kvserve serve did not exit within 30 s of SIGTERM with --shutdown-grace 5")
        r = subprocess.run(["bash", probe], env=dict(penv, KVSERVE_HTTP_PORT=str(port), KVSERVE_HEALTHCHECK_TIMEOUT="2"),
                           capture_output=True, text=True)
        c.check(r.returncode == 1, "healthcheck.sh against a stopped server should exit 1, exited %d" % r.returncode)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if c.failures:
            print("--- kvserve stderr (tail)")
            print(open(err_path).read()[-2000:])
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--kvserve", help="the kvserve binary (server check)")
    ap.add_argument("check", choices=["files", "promtool", "server"])
    args = ap.parse_args()
    src = os.path.abspath(args.source_dir)
    c = Checker()
    if args.check == "files":
        check_files(src, c)
    elif args.check == "promtool":
        if check_promtool(src, c) == SKIP:
            return SKIP
    else:
        check_server(src, args.kvserve, c)
    return c.finish("deploy " + args.check)


if __name__ == "__main__":
    sys.exit(main())
