"""check_deploy.py kustomize, the inference-gateway overlay: what `kubectl kustomize
deploy/inference-gateway` renders, checked against the InferencePool v1 API
(inference.networking.k8s.io/v1: selector.matchLabels, one targetPorts entry, endpointPickerRef)
and for what makes the pieces fit: the pool selects kvserve's pods on its HTTP port, the route
and the pool name rendered objects, the picker's flags name its pool and config file, its
configuration's plugins exist, its KV-event socket is the one the kvserve pods connect to, and
its block size, hash seed and model are kvserve's. The picker's metric flags are checked
against a running kvserve's /metrics by the server check (epp_metric_flags)."""

import os
import re
import shutil
import subprocess

from deploy_lib import SKIP, yaml

OVERLAY = "deploy/inference-gateway"
POOL_SPEC_KEYS = {"selector", "targetPorts", "endpointPickerRef"}
PICKER_REF_KEYS = {"group", "kind", "name", "port", "failureMode"}


def rendered_overlay(src, c):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return SKIP
    p = subprocess.run([kubectl, "kustomize", os.path.join(src, OVERLAY)], capture_output=True, text=True, timeout=120)
    if not c.check(p.returncode == 0, "kubectl kustomize %s failed: %s" % (OVERLAY, p.stderr.strip())):
        return None
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(p.stdout) if d}


def flag_values(args):
    """{'--flag': value} from ['--flag=value', ...] or ['--flag', 'value', ...]."""
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            out[a] = args[i + 1]
            i += 1
        else:
            out[a] = ""
        i += 1
    return out


def picker_container(src):
    """The endpoint picker's container in the overlay's files (no kubectl needed)."""
    for name in sorted(os.listdir(os.path.join(src, OVERLAY))):
        if name.endswith(".yaml"):
            for d in yaml.safe_load_all(open(os.path.join(src, OVERLAY, name))):
                if d and d.get("kind") == "Deployment":
                    for ctr in d["spec"]["template"]["spec"]["containers"]:
                        if "--pool-name" in flag_values(ctr.get("args", [])):
                            return ctr
    return None


def epp_metric_flags(src):
    """{flag: metric name} of the picker's --*-metric flags."""
    ctr = picker_container(src)
    flags = flag_values(ctr.get("args", [])) if ctr else {}
    return {k: v for k, v in flags.items() if k.endswith("-metric") and v}


def check_pool(c, pool, objs, ns, pod_labels, http_port):
    c.check(pool["apiVersion"] == "inference.networking.k8s.io/v1", "InferencePool must be inference.networking.k8s.io/v1")
    spec = pool.get("spec", {})
    c.check(set(spec) <= POOL_SPEC_KEYS and POOL_SPEC_KEYS <= set(spec),
            "InferencePool spec keys %s, the v1 API has exactly %s" % (sorted(spec), sorted(POOL_SPEC_KEYS)))
    match = spec.get("selector", {}).get("matchLabels", {})
    c.check(set(spec.get("selector", {})) == {"matchLabels"} and match and
            all(isinstance(v, str) for v in match.values()), "InferencePool selector must be matchLabels of strings")
    c.check(match.items() <= pod_labels.items(), "InferencePool selects no kvserve pod: %s" % match)
    ports = spec.get("targetPorts", [])
    c.check(len(ports) == 1 and set(ports[0]) == {"number"}, "InferencePool targetPorts must be one {number: N}")
    c.check(ports and ports[0].get("number") == http_port, "InferencePool targets port %s, kvserve's HTTP port is %s"
            % (ports and ports[0].get("number"), http_port))
    ref = spec.get("endpointPickerRef", {})
    c.check(set(ref) <= PICKER_REF_KEYS and "name" in ref, "endpointPickerRef keys %s (v1: %s)" % (sorted(ref), PICKER_REF_KEYS))
    c.check(ref.get("kind", "Service") == "Service" and ref.get("group", "") == "", "endpointPickerRef must be a Service")
    c.check(ref.get("failureMode", "FailClose") in ("FailOpen", "FailClose"), "endpointPickerRef.failureMode")
    svc = objs.get(("Service", ref.get("name")))
    if c.check(svc is not None, "endpointPickerRef names Service %s, which is not rendered" % ref.get("name")):
        port = ref.get("port", {}).get("number", 9002)
        c.check(port in [p["port"] for p in svc["spec"]["ports"]], "picker Service %s has no port %s" % (svc["metadata"]["name"], port))
        c.check(svc["metadata"]["namespace"] == ns, "the picker Service must be in the pool's namespace")
    return svc


def check_overlay(src, c, objs_base_count):
    objs = rendered_overlay(src, c)
    if objs is SKIP or objs is None:
        return objs
    kust = yaml.safe_load(open(os.path.join(src, OVERLAY, "kustomization.yaml")))
    own = sum(sum(1 for d in yaml.safe_load_all(open(os.path.join(src, OVERLAY, r))) if d)
              for r in kust["resources"] if r.endswith(".yaml"))
    c.check(len(objs) == objs_base_count + own, "the overlay rendered %d objects: the base's %d and its own %d expected"
            % (len(objs), objs_base_count, own))
    dep = objs.get(("Deployment", "kvserve"))
    cm = objs.get(("ConfigMap", "kvserve-config"), {}).get("data", {})
    pools = [o for (k, _), o in objs.items() if k == "InferencePool"]
    if not c.check(dep is not None and len(pools) == 1, "the overlay must render Deployment kvserve and one InferencePool"):
        return None
    pool, ns = pools[0], pools[0]["metadata"]["namespace"]
    pod = dep["spec"]["template"]
    ctr = pod["spec"]["containers"][0]
    http_port = int(cm.get("KVSERVE_HTTP_PORT", 8080))
    svc = check_pool(c, pool, objs, ns, pod["metadata"]["labels"], http_port)
    env = {e["name"]: e for e in ctr.get("env", [])}
    c.check(env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP",
            "kvserve needs POD_IP from status.podIP for its KV-event topic")

    # The route sends the API to the pool through a rendered Gateway.
    routes = [o for (k, _), o in objs.items() if k == "HTTPRoute"]
    c.check(len(routes) == 1, "the overlay should render one HTTPRoute")
    for route in routes:
        for parent in route["spec"]["parentRefs"]:
            c.check(("Gateway", parent["name"]) in objs, "HTTPRoute parent Gateway %s is not rendered" % parent["name"])
        refs = [b for rule in route["spec"]["rules"] for b in rule.get("backendRefs", [])]
        c.check(refs and all(b.get("group") == "inference.networking.k8s.io" and b.get("kind") == "InferencePool" and
                             b.get("name") == pool["metadata"]["name"] for b in refs),
                "HTTPRoute backendRefs must all be the InferencePool %s" % pool["metadata"]["name"])

    # The picker: its Deployment behind the Service, its flags, its RBAC, its configuration.
    if svc is None:
        return None
    pickers = [o for (k, _), o in objs.items() if k == "Deployment" and
               svc["spec"]["selector"].items() <= o["spec"]["template"]["metadata"]["labels"].items()]
    if not c.check(len(pickers) == 1, "Service %s selects %d Deployments, expected the picker" % (svc["metadata"]["name"], len(pickers))):
        return None
    pspec = pickers[0]["spec"]["template"]["spec"]
    pctr = pspec["containers"][0]
    flags = flag_values(pctr.get("args", []))
    c.check(flags.get("--pool-name") == pool["metadata"]["name"] and flags.get("--pool-namespace") == ns,
            "picker --pool-name/--pool-namespace must name the InferencePool")
    named_ports = {p["name"]: p["containerPort"] for p in pctr.get("ports", [])}
    for p in svc["spec"]["ports"]:
        c.check(p["targetPort"] in named_ports or p["targetPort"] in named_ports.values(),
                "picker Service port %s targets %s, no port of the picker" % (p["name"], p["targetPort"]))
    sa = pspec.get("serviceAccountName")
    bound = [b for (k, _), b in objs.items() if k == "RoleBinding" and
             any(s.get("name") == sa for s in b["subjects"])]
    rules = [r for b in bound for r in objs.get(("Role", b["roleRef"]["name"]), {}).get("rules", [])]
    for group, resource in (("", "pods"), ("inference.networking.k8s.io", "inferencepools")):
        c.check(any(group in r["apiGroups"] and resource in r["resources"] and {"get", "list", "watch"} <= set(r["verbs"])
                    for r in rules), "the picker's ServiceAccount %s may not watch %s" % (sa, resource))

    config_path = flags.get("--config-file", "")
    mounts = {m["mountPath"]: m["name"] for m in pctr.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pspec.get("volumes", [])}
    cm_name = volumes.get(mounts.get(os.path.dirname(config_path)), {}).get("configMap", {}).get("name")
    text = objs.get(("ConfigMap", cm_name), {}).get("data", {}).get(os.path.basename(config_path))
    if not c.check(text is not None, "picker --config-file %s is no key of a mounted ConfigMap" % config_path):
        return None
    config = yaml.safe_load(text)
    c.check(config.get("kind") == "EndpointPickerConfig", "the picker configuration must be an EndpointPickerConfig")
    plugins = {p.get("name", p["type"]): p for p in config.get("plugins", [])}
    for profile in config.get("schedulingProfiles", []):
        for ref in profile["plugins"]:
            c.check(ref["pluginRef"] in plugins, "profile %s uses plugin %s, which is not defined" % (profile["name"], ref["pluginRef"]))
    precise = [p for p in plugins.values() if p["type"] == "precise-prefix-cache-scorer"]
    if not c.check(len(precise) == 1, "the picker configuration needs one precise-prefix-cache-scorer"):
        return None
    params = precise[0].get("parameters", {})
    c.check(params.get("tokenProcessorConfig", {}).get("blockSize") == int(cm.get("KVSERVE_BLOCK_SIZE", 16)),
            "picker blockSize %s != kvserve's KVSERVE_BLOCK_SIZE %s"
            % (params.get("tokenProcessorConfig", {}).get("blockSize"), cm.get("KVSERVE_BLOCK_SIZE", 16)))
    c.check(params.get("tokenProcessorConfig", {}).get("hashSeed", "") ==
            cm.get("KVSERVE_KV_EVENTS_HASH_SEED", "vllm-none-hash"), "picker hashSeed != kvserve's hash seed")
    c.check(params.get("indexerConfig", {}).get("tokenizersPoolConfig", {}).get("modelName") ==
            cm.get("KVSERVE_SERVED_MODEL_NAME"), "the picker's tokenizer model must be kvserve's served model name")
    events = params.get("kvEventsConfig", {})
    c.check("kv@".startswith(events.get("topicFilter", "kv@")), "kvEventsConfig.topicFilter must accept kv@ topics")
    m = re.fullmatch(r"tcp://\*:(\d+)", events.get("zmqEndpoint", ""))
    if c.check(m is not None and events.get("discoverPods") is False,
               "the picker must bind tcp://*:PORT (discoverPods false): kvserve connects to it"):
        zmq_port = int(m.group(1))
        target = re.fullmatch(r"tcp://([^:]+):(\d+)", cm.get("KVSERVE_KV_EVENTS_ENDPOINT", ""))
        svc_names = {svc["metadata"]["name"], "%s.%s" % (svc["metadata"]["name"], ns),
                     "%s.%s.svc" % (svc["metadata"]["name"], ns), "%s.%s.svc.cluster.local" % (svc["metadata"]["name"], ns)}
        c.check(target is not None and target.group(1) in svc_names,
                "KVSERVE_KV_EVENTS_ENDPOINT must connect to the picker Service %s" % svc["metadata"]["name"])
        if target:
            sp = [p for p in svc["spec"]["ports"] if p["port"] == int(target.group(2))]
            c.check(bool(sp) and named_ports.get(sp[0]["targetPort"], sp[0]["targetPort"]) == zmq_port,
                    "KVSERVE_KV_EVENTS_ENDPOINT's port reaches the picker's port %s, not its KV-event socket %d"
                    % (sp and sp[0]["targetPort"], zmq_port))
    return None
