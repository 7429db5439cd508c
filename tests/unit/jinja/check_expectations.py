#!/usr/bin/env python3
# ctest `jinja2_expectations` (label `jinja`): the committed reference outputs of the Jinja
# engine's tests (tests/data/chat_templates/expected.json, tests/data/jinja/snippets.json) are
# what their generators write with this machine's python3-jinja2, so CI sees them reproduced.
# Fields that name the jinja2 version are not compared. Exit 77 (skipped) without jinja2 or
# without ../shared/templates (the chat templates).
#
#   tests/unit/jinja/check_expectations.py SHARED_DIR
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data.pop("jinja2_version", None)
    return data


def main():
    try:
        import jinja2  # noqa: F401
    except ImportError:
        print("python3-jinja2 is not installed: skipped")
        return 77
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared")
    templates = os.path.join(shared, "templates")
    if not os.path.isdir(templates):
        print(f"{templates} is missing: skipped")
        return 77
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            (["scripts/chat-template-expectations.py", "--templates", templates], "tests/data/chat_templates/expected.json"),
            (["scripts/jinja-snippet-expectations.py"], "tests/data/jinja/snippets.json"),
        ]
        for command, committed in runs:
            out = os.path.join(tmp, os.path.basename(committed))
            subprocess.run([sys.executable, *command, "--out", out], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            if load(out) != load(os.path.join(REPO, committed)):
                print(f"{committed} differs from what {command[0]} writes now: regenerate it and review the diff")
                failed += 1
            else:
                print(f"{committed}: reproduced")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
