#!/usr/bin/python3
"""Checks of deploy/, the Dockerfile and .dockerignore that need neither Docker nor a cluster.

  check_deploy.py --source-dir DIR files                   manifests, Compose, Dockerfile, dashboard
  check_deploy.py --source-dir DIR kustomize                `kubectl kustomize deploy/k8s`, as objects
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
import os
import sys

from deploy_files import check_files
from deploy_k8s import check_rendered
from deploy_lib import SKIP, Checker
from deploy_server import check_promtool, check_server


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--kvserve", help="the kvserve binary (server check)")
    ap.add_argument("check", choices=["files", "kustomize", "promtool", "server"])
    args = ap.parse_args()
    src = os.path.abspath(args.source_dir)
    c = Checker()
    if args.check == "files":
        check_files(src, c)
    elif args.check == "kustomize":
        if check_rendered(src, c) == SKIP:
            print("SKIP: kubectl is not installed (Debian: apt-get install kubernetes-client)")
            return SKIP
    elif args.check == "promtool":
        if check_promtool(src, c) == SKIP:
            return SKIP
    else:
        check_server(src, args.kvserve, c)
    return c.finish("deploy " + args.check)


if __name__ == "__main__":
    sys.exit(main())
