"""Which process owns each coordinator backend: every 0.25 s, pg_stat_activity's (backend pid,
client port) joined with `ss -tnp`'s (client port, process) and that process's command line
(gunicorn web, celery worker / worker-periodic / beat, a command). Appends JSON lines
{"backend": pid, "role": ..., "cmdline": ...} to the file given, once per connection (a backend pid may be reused later).

    python contrib/citus-check/connmap.py DATABASE_URL OUT.jsonl   # runs until killed
"""
import json
import re
import subprocess
import sys
import time

import psycopg


def role(cmdline: str) -> str:
    if "gunicorn" in cmdline:
        return "web"
    if "celery" in cmdline:
        for name in ("beat", "periodic", "delivery", "alerts"):
            if name in cmdline:
                return f"celery-{name}"
        return "celery-worker"
    m = re.search(r"manage\.py (\S+)", cmdline)
    return m.group(1) if m else cmdline[:60]


def main(url: str, out: str) -> None:
    seen: set[tuple[int, int]] = set()
    port = int(re.search(r":(\d+)/", url).group(1))
    with psycopg.connect(url, autocommit=True, application_name="connmap") as conn, open(out, "a") as f:
        while True:
            rows = conn.execute("SELECT pid, client_port FROM pg_stat_activity WHERE client_port IS NOT NULL "
                                "AND backend_type = 'client backend'").fetchall()
            new = {cp: pid for pid, cp in rows if (pid, cp) not in seen}
            if new:
                ss = subprocess.run(["ss", "-tnpH", f"dport = :{port}"], capture_output=True, text=True).stdout
                for line in ss.splitlines():
                    parts = line.split()
                    local = int(parts[3].rsplit(":", 1)[1])
                    m = re.search(r"pid=(\d+)", line)
                    if local in new and m:
                        try:
                            cmd = open(f"/proc/{m.group(1)}/cmdline").read().replace("\0", " ")
                        except OSError:
                            continue
                        seen.add((new[local], local))
                        f.write(json.dumps({"backend": new[local], "process": int(m.group(1)),
                                            "client_port": local, "role": role(cmd), "cmdline": cmd[:200], "t": time.time()}) + "\n")
                        f.flush()
            time.sleep(0.25)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
