"""Which devices' telemetry describes a call: the step names one device (its `hw.id`, else the
server that answered, `server.address:server.port`); the server's GPUs and a GPU's server are
found by host (docs/otlp.md, "Which server and GPU served a call"). One query on ingest_device."""

from __future__ import annotations

from django.db import connection

from analysis.hardware import family_of
from ingest.conventions import ROLE_GPU, ROLE_SERVER, host_of_server

# The named devices, and every device on their hosts (as recorded, or read off the name).
_SQL = """WITH named AS (SELECT name, host, role FROM ingest_device WHERE project_id = %(p)s AND name = ANY(%(names)s))
SELECT name, host, role FROM named
UNION
SELECT name, host, role FROM ingest_device
WHERE project_id = %(p)s AND host <> '' AND (host = ANY(%(hosts)s) OR host IN (SELECT host FROM named))"""


def related_devices(project_id: int, devices: set[str]) -> dict[str, tuple[str, ...]]:
    """device → the other devices whose samples describe the calls it served: a server's GPUs
    (same host); a GPU's servers; for a name with no port (a client that named only the host),
    every server and GPU on that host; for a server key no series carries, the server on the same
    short host and port (the client spelled the host otherwise: a full name, upper case)."""
    if not devices:
        return {}
    guessed = {d: host_of_server(d) for d in devices}
    with connection.cursor() as cursor:
        cursor.execute(_SQL, {"p": project_id, "names": sorted(devices), "hosts": sorted(set(guessed.values()))})
        rows = cursor.fetchall()
    known = {name: (host, role) for name, host, role in rows}
    out: dict[str, tuple[str, ...]] = {}
    for device in devices:
        host, role = known.get(device, ("", ""))
        host = host or guessed[device]
        if not host:
            continue
        if role == ROLE_GPU:
            wanted = (ROLE_SERVER,)
        elif role == ROLE_SERVER or ":" in device:
            wanted = (ROLE_GPU,)
        else:
            wanted = (ROLE_SERVER, ROLE_GPU)
        others = tuple(sorted(n for n, (h, r) in known.items() if h == host and r in wanted and n != device))
        if role in (ROLE_SERVER, "") and ":" in device:
            # A server the client names by another spelling of its host than its metrics carry
            # (vllm-a.prod.internal:8000 dialed, vllm-a:8000 scraped): the same host and port.
            port = device.rpartition(":")[2]
            others = tuple(sorted(n for n, (h, r) in known.items()
                                  if h == host and r == ROLE_SERVER and n != device
                                  and n.rpartition(":")[2] == port)) + others
        if others:
            out[device] = others
    return out


def expand(devices: set[str], related: dict[str, tuple[str, ...]]) -> set[str]:
    """The devices and every device related to them."""
    return set(devices).union(*(related.get(d, ()) for d in devices))


def device_families(project_id: int, devices: set[str]) -> dict[str, str]:
    """device → the hardware family (`analysis.hardware` profile name) its recorded vendor names;
    devices with no vendor, or one no profile knows, are left out (their hardware is unknown)."""
    if not devices:
        return {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, vendor FROM ingest_device WHERE project_id = %s AND name = ANY(%s) AND vendor <> ''",
                       [project_id, sorted(devices)])
        rows = cursor.fetchall()
    return {name: family for name, vendor in rows if (family := family_of(vendor))}
