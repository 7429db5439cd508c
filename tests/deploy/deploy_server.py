"""check_deploy.py promtool and server: promtool on the Prometheus files and queries; a running
`kvserve serve` against everything deploy/ and the Dockerfile expect of it (the inference-gateway
overlay's picker flags included)."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from deploy_gateway import OVERLAY, epp_metric_flags
from deploy_lib import (
    deploy_files, load_yaml, rel, k8s_objects, metric_names, selectors, grouping_labels,
    dashboard_queries, alert_rules, adapter_rules, adapter_exposed, promql_for_promtool, LEGEND_RE,
    TARGET_LABELS, SKIP, yaml)


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

        # The endpoint picker's metric flags (the inference-gateway overlay) name kvserve's gauges.
        picker = epp_metric_flags(src)
        c.check(len(picker) >= 2, "%s: the picker names no queue and KV-usage metric flags" % OVERLAY)
        for flag, name in sorted(picker.items()):
            c.check(types.get(name) == "gauge" and bool(samples.get(name)),
                    "%s: the picker's %s=%s is no gauge in /metrics" % (OVERLAY, flag, name))

        # The image's health probe (`kvserve healthcheck`), against this server.
        penv = {k: v for k, v in os.environ.items() if not k.startswith("KVSERVE_")}

        def probe(*args, **env):
            return subprocess.run([kvserve, "healthcheck", *args], env=dict(penv, KVSERVE_HTTP_PORT=str(port), **env),
                                  capture_output=True, text=True)
        r = probe()
        c.check(r.returncode == 0, "kvserve healthcheck against a running server exited %d: %s" % (r.returncode, r.stderr))
        r = probe("/ready")
        c.check(r.returncode == 0, "kvserve healthcheck /ready against a ready server exited %d: %s"
                % (r.returncode, r.stderr))
        r = probe("/no-such-path")
        c.check(r.returncode == 1 and "404" in r.stderr,
                "kvserve healthcheck on a 404 path should exit 1 naming the status: %d %s" % (r.returncode, r.stderr))

        # SIGTERM drains and exits 0 (what the preStop + grace period in deployment.yaml rely on).
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
            c.check(rc == 0, "kvserve serve exited %d after SIGTERM (expected 0)" % rc)
        except subprocess.TimeoutExpired:
            c.fail("kvserve serve did not exit within 30 s of SIGTERM with --shutdown-grace 5")
        r = probe(KVSERVE_HEALTHCHECK_TIMEOUT="2")
        c.check(r.returncode == 1, "kvserve healthcheck against a stopped server should exit 1, exited %d" % r.returncode)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if c.failures:
            print("--- kvserve stderr (tail)")
            print(open(err_path).read()[-2000:])
        shutil.rmtree(work, ignore_errors=True)
