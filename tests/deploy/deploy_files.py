"""check_deploy.py files: deploy/ parses; the Kubernetes manifests, Compose, the Grafana dashboard and
the Dockerfile carry what a deployment needs and point at each other."""

import json
import os
import re

from deploy_lib import (
    deploy_files, load_yaml_docs, load_yaml, rel, k8s_objects, dashboard_queries, adapter_rules,
    adapter_exposed, dockerignore_patterns, dockerignored, dockerfile_instructions, build_packages,
    yaml)


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


def image_config(src, target):
    """What the Dockerfile's `target` stage gives the running container: EXPOSE ports, ENV, USER."""
    exposed, env, user = set(), {}, None
    for stage, inst, args in dockerfile_instructions(src):
        if stage != target:
            continue
        if inst == "EXPOSE":
            exposed |= {int(p.split("/")[0]) for p in args.split()}
        elif inst == "ENV":
            env.update(dict(kv.split("=", 1) for kv in args.split() if "=" in kv))
        elif inst == "USER":
            user = args
    return exposed, env, user


def check_compose_image(src, c, kv):
    """The kvserve service agrees with the image it builds: it publishes the ports the image
    exposes and serves on, mounts the models where the image looks for them, keeps the image's
    non-root user and HEALTHCHECK, and Prometheus scrapes the port the image serves HTTP on."""
    target = kv.get("build", {}).get("target")
    exposed, env, user = image_config(src, target)
    models_dir = os.path.dirname(env.get("KVSERVE_MODEL", ""))  # the image's own, before Compose's
    env.update({k: str(v) for k, v in (kv.get("environment") or {}).items()})
    http_port, grpc_port = int(env.get("KVSERVE_HTTP_PORT", 0)), int(env.get("KVSERVE_GRPC_PORT", 0))
    c.check({http_port, grpc_port} <= exposed, "Dockerfile %s: EXPOSE %s must include the HTTP and gRPC ports %s"
            % (target, sorted(exposed), (http_port, grpc_port)))
    published = {int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in kv.get("ports", [])}
    c.check(published == exposed, "compose.yaml: kvserve publishes container ports %s, the image exposes %s"
            % (sorted(published), sorted(exposed)))
    mounts = [re.sub(r"\$\{[^}]*\}", "HOST", str(v)).split(":") for v in kv.get("volumes", [])]
    c.check(any(m[1] == models_dir and m[2:] == ["ro"] for m in mounts if len(m) >= 2),
            "compose.yaml: kvserve must mount the models read-only at %s (the image's KVSERVE_MODEL directory)"
            % models_dir)
    c.check(user is not None and user.split(":")[0] not in ("0", "root") and kv.get("user") in (None, user),
            "compose.yaml: kvserve must run as the image's non-root USER (%s), got %s" % (user, kv.get("user")))
    c.check("healthcheck" not in kv or kv["healthcheck"].get("disable") is not True,
            "compose.yaml: kvserve must keep the image's HEALTHCHECK")
    prom = load_yaml(os.path.join(src, "deploy/prometheus/prometheus.yml"))
    targets = [t for j in prom["scrape_configs"] if j["job_name"] == "kvserve"
               for sc in j.get("static_configs", []) for t in sc["targets"]]
    c.check(targets == ["kvserve:%d" % http_port],
            "prometheus.yml: job kvserve must scrape the service at the image's HTTP port kvserve:%d (got %s)"
            % (http_port, targets))


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
    check_compose_image(src, c, kv)
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
        c.check('["kvserve", "healthcheck"]' in got.get("HEALTHCHECK", ""),
                "Dockerfile (%s): HEALTHCHECK must run `kvserve healthcheck`" % stage)
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
