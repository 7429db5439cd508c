"""check_deploy.py kustomize: what `kubectl kustomize deploy/k8s` renders (what `kubectl apply -k`
would send), checked as objects: every listed resource is rendered into the namespace, the probes
point at /health and /ready on the HTTP port, resources and the security context are set (non-root
as the image's USER, read-only root filesystem, no privilege escalation, all capabilities
dropped), every reference resolves (selectors, ConfigMap, PVC, volumes, ports) and every HPA
metric is published by the prometheus-adapter rules (whose series deploy_metrics finds in a
running server's /metrics); then the inference-gateway overlay (deploy_gateway.py)."""

import os
import shutil
import subprocess

from deploy_gateway import check_overlay
from deploy_lib import SKIP, adapter_exposed, adapter_rules, dockerfile_instructions, load_yaml, load_yaml_docs, yaml


def render(src, c):
    """The rendered objects; SKIP without kubectl; None when rendering failed (recorded in c)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return SKIP
    p = subprocess.run([kubectl, "kustomize", os.path.join(src, "deploy/k8s")], capture_output=True, text=True,
                       timeout=120)
    if not c.check(p.returncode == 0, "kubectl kustomize deploy/k8s failed: %s" % p.stderr.strip()):
        return None
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def image_user(src):
    """The numeric UID of the Dockerfile's last USER (the runtime stages)."""
    users = [args for _, inst, args in dockerfile_instructions(src) if inst == "USER"]
    return int(users[-1].split(":")[0]) if users else None


def check_container(c, ctr, env, pod_sc, uid):
    name = ctr["name"]
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    http_port = int(env.get("KVSERVE_HTTP_PORT", 8080))
    c.check(ports.get("http") == http_port, "container %s: port http %s is not KVSERVE_HTTP_PORT %s"
            % (name, ports.get("http"), http_port))
    scheme = "HTTPS" if env.get("KVSERVE_TLS_CERT_FILE") else "HTTP"
    for probe, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        get = ctr.get(probe, {}).get("httpGet")
        if not c.check(get is not None, "container %s: %s must be an httpGet probe" % (name, probe)):
            continue
        c.check(get.get("path") == path, "container %s: %s path %s, expected %s" % (name, probe, get.get("path"), path))
        port = get.get("port")
        c.check(ports.get(port, port) == http_port, "container %s: %s port %s is not the HTTP port" % (name, probe, port))
        c.check(get.get("scheme", "HTTP") == scheme, "container %s: %s scheme must be %s" % (name, probe, scheme))

    res = ctr.get("resources", {})
    for kind in ("cpu", "memory"):
        c.check(kind in res.get("requests", {}), "container %s: no %s request" % (name, kind))
    c.check("memory" in res.get("limits", {}), "container %s: no memory limit" % name)

    sc = ctr.get("securityContext", {})
    c.check(sc.get("allowPrivilegeEscalation") is False, "container %s: allowPrivilegeEscalation must be false" % name)
    c.check(sc.get("readOnlyRootFilesystem") is True, "container %s: readOnlyRootFilesystem must be true" % name)
    c.check(sc.get("privileged") is not True, "container %s: must not be privileged" % name)
    c.check("ALL" in sc.get("capabilities", {}).get("drop", []), "container %s: must drop ALL capabilities" % name)
    run_as = sc.get("runAsUser", pod_sc.get("runAsUser"))
    c.check(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, "container %s: runAsNonRoot must be true" % name)
    c.check(run_as not in (None, 0), "container %s: runAsUser must be a non-root UID" % name)
    c.check(uid is None or run_as == uid, "container %s: runAsUser %s is not the image's USER %s" % (name, run_as, uid))


def check_rendered(src, c):
    docs = render(src, c)
    if docs is SKIP or docs is None:
        return docs
    kust_dir = os.path.join(src, "deploy/k8s")
    kust = load_yaml(os.path.join(kust_dir, "kustomization.yaml"))
    listed = sum(len(load_yaml_docs(os.path.join(kust_dir, r))) for r in kust["resources"])
    c.check(len(docs) == listed, "kustomize rendered %d objects; the listed resources hold %d" % (len(docs), listed))
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    namespaces = {n for k, n in objs if k == "Namespace"}
    for (kind, name), obj in objs.items():
        if kind != "Namespace":
            ns = obj["metadata"].get("namespace")
            c.check(ns in namespaces, "%s %s is rendered into namespace %s, which is not rendered" % (kind, name, ns))

    dep = objs.get(("Deployment", "kvserve"))
    if not c.check(dep is not None, "no Deployment kvserve rendered"):
        return None
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    c.check(dep["spec"]["selector"]["matchLabels"].items() <= labels.items(), "Deployment selector misses its pods")
    env = {}
    for ctr in spec["containers"]:
        for ref in ctr.get("envFrom", []):
            cm = ref.get("configMapRef")
            if cm and c.check(("ConfigMap", cm["name"]) in objs or cm.get("optional"),
                              "envFrom ConfigMap %s is not rendered" % cm["name"]):
                env.update(objs.get(("ConfigMap", cm["name"]), {}).get("data", {}))
    uid = image_user(src)
    for ctr in spec["containers"]:
        check_container(c, ctr, env, spec.get("securityContext", {}), uid)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["mountPath"] for m in ctr.get("volumeMounts", [])}
        for m in ctr.get("volumeMounts", []):
            c.check(m["name"] in volumes, "volumeMount %s has no volume" % m["name"])
        c.check("/tmp" in mounts, "a read-only root filesystem needs a writable /tmp mount")
    for v in spec.get("volumes", []):
        claim = v.get("persistentVolumeClaim", {}).get("claimName")
        if claim:
            c.check(("PersistentVolumeClaim", claim) in objs, "volume %s: PVC %s is not rendered" % (v["name"], claim))

    container_ports = {p["name"] for ctr in spec["containers"] for p in ctr.get("ports", [])}
    for (kind, name), obj in objs.items():
        selector = obj.get("spec", {}).get("selector")
        if kind in ("Service", "PodDisruptionBudget", "PodMonitor") and selector is not None:
            match = selector.get("matchLabels", selector)
            c.check(match.items() <= labels.items(), "%s %s selects no kvserve pod" % (kind, name))
        if kind == "Service":
            for p in obj["spec"]["ports"]:
                target = p.get("targetPort", p["port"])
                c.check(target in container_ports or isinstance(target, int),
                        "Service %s: targetPort %s is no container port" % (name, target))

    exposed = adapter_exposed(adapter_rules(src))
    hpas = [o for (k, _), o in objs.items() if k == "HorizontalPodAutoscaler"]
    c.check(bool(hpas), "no HorizontalPodAutoscaler rendered")
    for hpa in hpas:
        ref = hpa["spec"]["scaleTargetRef"]
        c.check((ref["kind"], ref["name"]) in objs, "HPA scales %s %s, which is not rendered" % (ref["kind"], ref["name"]))
        for m in hpa["spec"].get("metrics", []):
            if m["type"] in ("Pods", "Object", "External"):
                metric = m[m["type"].lower()]["metric"]["name"]
                c.check(metric in exposed, "HPA metric %s is not published by the prometheus-adapter rules" % metric)
    return check_overlay(src, c, len(docs))
