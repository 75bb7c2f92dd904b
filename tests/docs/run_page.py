"""Run one page's blocks in page order, as a reader pasting them would: Python blocks in one namespace,
shell commands one by one with bash, each checked against the exit status the page gives (0 unless
its comment says otherwise).

Usage: python tests/docs/run_page.py ITEMS.json, a list of {"where", "kind", "text", "status"}.
Prints the failing item's place and output and exits 1 at the first failure.
"""
from __future__ import annotations

import json
import subprocess
import sys
import traceback

COMMAND_TIMEOUT_S = 300


def _python(item: dict, namespace: dict) -> bool:
    try:
        exec(compile(item["text"], item["where"], "exec"), namespace)
    except BaseException:  # noqa: BLE001 - a SystemExit or KeyboardInterrupt of a block fails it too
        traceback.print_exc()
        return False
    return True


def _shell(item: dict) -> bool:
    done = subprocess.run(["bash", "-c", item["text"]], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode == item["status"]:
        return True
    print((done.stdout + done.stderr)[-3000:])
    print(f"`{item['text']}` exited {done.returncode}, the page says {item['status']}")
    return False


def main(path: str) -> int:
    namespace: dict = {"__name__": "__main__"}
    for item in json.loads(open(path).read()):
        print(f"--- {item['where']} ({item['kind']})", flush=True)
        sys.stdout.flush()
        ok = _python(item, namespace) if item["kind"] == "python" else _shell(item)
        if not ok:
            print(f"FAILED: the {item['kind']} block at {item['where']}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
