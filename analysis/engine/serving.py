"""Which devices' telemetry describes a call: the step names one device (its `hw.id`, else the
server that answered, `server.address:server.port`) and may name its server beside a GPU; the
server's GPUs and a GPU's server are found by what says whose a GPU is (dcgm-exporter's pod
labels, the server's own spans naming `hw.id`: `ingest_device.labels`), else by host; a
Kubernetes Service's pods by their k8s resource attributes (docs/otlp.md, "Which server and GPU
served a call")."""

from __future__ import annotations

import json
import re

from django.db import connection

from analysis.hardware import family_of
from ingest.conventions import ROLE_GPU, ROLE_SERVER, SERVED_BY_LABEL, host_of_server

# The named devices, every device on their hosts (as recorded, or read off the name), and the
# servers whose k8s workload or Service has one of the names a Service address gives.
_SQL = """WITH named AS (SELECT name, host, role, labels FROM ingest_device
                      WHERE project_id = %(p)s AND name = ANY(%(names)s))
SELECT name, host, role, labels FROM named
UNION
SELECT name, host, role, labels FROM ingest_device
WHERE project_id = %(p)s AND ((host <> '' AND (host = ANY(%(hosts)s) OR host IN (SELECT host FROM named)))
    OR (role = 'server' AND (labels->>'k8s.service.name' = ANY(%(services)s)
        OR labels->>'k8s.deployment.name' = ANY(%(services)s) OR labels->>'k8s.statefulset.name' = ANY(%(services)s)
        OR split_part(labels->>'k8s.pod.name', '-', 1) = ANY(%(heads)s))))"""
# The GPUs dcgm-exporter attributes to pods (its pod label), for the pods found.
_POD_GPUS_SQL = """SELECT name, host, role, labels FROM ingest_device
WHERE project_id = %(p)s AND role = 'gpu' AND labels->>'k8s.pod.name' = ANY(%(pods)s)"""
# A Kubernetes Service's DNS name: <service>.<namespace>.svc[.<cluster domain>].
_SERVICE_DNS = re.compile(r"^(?P<service>[a-z0-9-]+)\.(?P<namespace>[a-z0-9-]+)\.svc(\.|$)")
_WORKLOADS = ("k8s.service.name", "k8s.deployment.name", "k8s.statefulset.name")


class Relations(dict):
    """device → the other devices whose samples describe the calls it served (a dict, as before),
    and what the verdict must say when they cannot be told apart:
    - `pools`: a Service key (`vllm-llama.inference.svc.cluster.local:8000`) → its pods' server
      keys (a call to it went to one of them, which one the client does not say);
    - `shared`: a server key → itself and the other servers on its GPUs' host, when nothing says
      which GPUs are whose (no pod labels, no server span naming `hw.id`);
    - `labels`: device → its labels (`ingest_device.labels`: a GPU's index `gpu`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pools: dict[str, tuple[str, ...]] = {}
        self.shared: dict[str, tuple[str, ...]] = {}
        self.labels: dict[str, dict] = {}
        self.hosts: dict[str, str] = {}


def _row(row) -> tuple[str, str, str, dict]:
    """(name, host, role, labels) with the labels decoded (Django's cursor hands jsonb over as text)."""
    name, host, role, labels = row
    if isinstance(labels, str):
        labels = json.loads(labels)
    return name, host, role, labels if isinstance(labels, dict) else {}


def _service_of(device: str) -> tuple[str, str] | None:
    """(service, namespace) of a server key that names a Kubernetes Service by its DNS name."""
    address = device.rpartition(":")[0] if device.rpartition(":")[2].isdigit() else device
    match = _SERVICE_DNS.match(address.lower())
    return (match["service"], match["namespace"]) if match else None


# A pod a Deployment made is named <deployment>-<pod-template-hash>-<5 characters>, a
# StatefulSet's <statefulset>-<ordinal> (Kubernetes API conventions for generated names).
def _pod_of(pod: str, workload: str) -> bool:
    rest = pod[len(workload) + 1:] if pod.startswith(workload + "-") else ""
    return bool(re.fullmatch(r"([a-z0-9]{5,10}-)?[a-z0-9]{5}|\d+", rest))


def _behind(labels: dict, service: str, namespace: str) -> bool:
    """Whether a server series' pod is one of the Service's (same namespace where both say)."""
    if labels.get("k8s.namespace.name") and namespace and labels["k8s.namespace.name"] != namespace:
        return False
    return (any(labels.get(k) == service for k in _WORKLOADS)
            or _pod_of(labels.get("k8s.pod.name", ""), service))


def related_devices(project_id: int, devices: set[str]) -> Relations:
    """device → the other devices whose samples describe the calls it served: a server's GPUs
    (those attributed to it: dcgm-exporter's pod label, its own spans' `hw.id`; else its host's
    that no other server is attributed); a GPU's servers; for a name with no port (a client that
    named only the host), every server and GPU on that host; for a server key no series carries,
    the server on the same short host and port (the client spelled the host otherwise: a full
    name, upper case); for a Kubernetes Service, its pods and theirs (`Relations.pools`)."""
    out = Relations()
    if not devices:
        return out
    guessed = {d: host_of_server(d) for d in devices}
    services = {d: s for d in devices if (s := _service_of(d))}
    names = sorted({s for s, _ in services.values()})
    with connection.cursor() as cursor:
        cursor.execute(_SQL, {"p": project_id, "names": sorted(devices), "hosts": sorted(set(guessed.values())),
                              "services": names, "heads": sorted({n.split("-")[0] for n in names})})
        rows = [_row(r) for r in cursor.fetchall()]
        pods = sorted({labels["k8s.pod.name"] for _, _, role, labels in rows
                       if role == ROLE_SERVER and labels.get("k8s.pod.name")})
        if pods:
            cursor.execute(_POD_GPUS_SQL, {"p": project_id, "pods": pods})
            rows += [_row(r) for r in cursor.fetchall()]
    known = {name: (host, role) for name, host, role, _ in rows}
    labels = {name: given for name, _, _, given in rows}
    out.labels = {n: v for n, v in labels.items() if v}
    out.hosts = {n: h for n, (h, _) in known.items() if h}
    servers = [n for n, (_, r) in known.items() if r == ROLE_SERVER]
    gpus = [n for n, (_, r) in known.items() if r == ROLE_GPU]

    def owners(gpu: str) -> set[str]:
        """The servers a GPU is attributed to."""
        mine = labels.get(gpu, {})
        found = {mine[SERVED_BY_LABEL]} if mine.get(SERVED_BY_LABEL) else set()
        pod = mine.get("k8s.pod.name")
        if pod:
            found |= {s for s in servers if labels.get(s, {}).get("k8s.pod.name") == pod
                      and labels[s].get("k8s.namespace.name", mine.get("k8s.namespace.name"))
                      == mine.get("k8s.namespace.name", labels[s].get("k8s.namespace.name"))}
        return found

    owned = {g: owners(g) for g in gpus}

    def gpus_of(names: set[str], host: str) -> tuple[tuple[str, ...], bool]:
        """(the GPUs of a server known by `names`, whether they are told apart from other servers')."""
        attributed = tuple(sorted(g for g, o in owned.items() if names & o))
        if attributed:
            return attributed, True
        on_host = [g for g in gpus if known[g][0] == host]
        free = tuple(sorted(g for g in on_host if not owned[g]))
        neighbours = [s for s in servers if known[s][0] == host and s not in names]
        told = not neighbours or len(free) < len(on_host)
        return free, told

    for device in devices:
        host, role = known.get(device, ("", ""))
        host = host or guessed[device]
        if device in services and role != ROLE_SERVER:
            service, namespace = services[device]
            members = tuple(sorted(s for s in servers if _behind(labels.get(s, {}), service, namespace)))
            if members:
                out.pools[device] = members
                found: list[str] = list(members)
                for member in members:
                    theirs = gpus_of({member}, known[member][0])[0]
                    if theirs:
                        out[member] = theirs
                    found += theirs
                out[device] = tuple(dict.fromkeys(found))
                continue
        if not host:
            continue
        if role == ROLE_GPU:
            mine = owned.get(device) or set()
            others = tuple(sorted(mine)) if mine else tuple(sorted(
                n for n in servers if known[n][0] == host and n != device))
        elif role == ROLE_SERVER or ":" in device:
            # A server the client names by another spelling of its host than its metrics carry
            # (vllm-a.prod.internal:8000 dialed, vllm-a:8000 scraped): the same host and port.
            port = device.rpartition(":")[2]
            alias = tuple(sorted(n for n in servers if known[n][0] == host and n != device
                                 and n.rpartition(":")[2] == port)) if role in (ROLE_SERVER, "") else ()
            mine, told = gpus_of({device, *alias}, host)
            others = alias + mine
            if not told:  # this server (by whichever name) and the others on its host
                out.shared[device] = (device, *sorted(s for s in servers if known[s][0] == host
                                                      and s != device and s not in alias))
        else:
            others = tuple(sorted(n for n, (h, r) in known.items()
                                  if h == host and r in (ROLE_SERVER, ROLE_GPU) and n != device))
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
