"""deploy/kubernetes/: every manifest valid for the Kubernetes versions docs/kubernetes.md states, and in agreement with
the daemon's code (where clients look for the socket, the socket's mode, the command line serve accepts, the config
file it accepts, its drain time) and with the job pods docs/kubernetes.md shows; and the DaemonSet's daemon, started
here with the container's own arguments, answers its probes.

The built-in kinds are checked by ``kubernetes-validate`` against the API's own schemas, strictly (an unknown field
fails). It knows no custom resources: the ServiceMonitor is checked against ``SERVICE_MONITOR`` below, the part of
Prometheus Operator's CRD (monitoring.coreos.com/v1) that the manifest uses, with its required fields and no field
the CRD lacks; the Volcano job in the docs by the fields Volcano requires, its pod template by Kubernetes' schema.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from client_shim import attach, discovery
from sanitizerd import __version__, config, daemon
from sanitizerd.cli.main import _parser
from sanitizerd.metrics_server import metrics_address
from sanitizerd.sessions.hub import Limits
from sanitizerd.socket_file import SOCKET_MODE
from tests.conftest import ROOT, wait_for_socket
from tests.postgres_server import PostgresServer, postgres  # noqa: F401  (a fixture)
from tests.test_e2e_daemon import free_port

KUBERNETES = ROOT / "deploy" / "kubernetes"
DOC = ROOT / "docs" / "kubernetes.md"
# The oldest and a recent Kubernetes the manifests are written for (docs/kubernetes.md says which).
VERSIONS = ("1.28", "1.33")
Doc = dict[str, Any]

_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
        "action": {
            "enum": [
                "replace",
                "keep",
                "drop",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "hashmod",
                "lowercase",
                "uppercase",
                "keepequal",
                "dropequal",
            ]
        },
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
    },
}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "additionalProperties": False,
            "properties": {"name": _NAME, "namespace": _NAME, "labels": _LABELS},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],  # the CRD requires selector; no endpoint, nothing is scraped
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "minProperties": 1,  # an empty selector selects every Service
                    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _NAME}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],  # a named port of the Service (targetPort is the CRD's other way)
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": _RELABEL},
                            "metricRelabelings": {"type": "array", "items": _RELABEL},
                        },
                    },
                },
            },
        },
    },
}
# What Volcano's admission refuses a Job without (batch.volcano.sh/v1alpha1); the pod templates are checked as pods.
VOLCANO_JOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "batch.volcano.sh/v1alpha1"},
        "kind": {"const": "Job"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["tasks"],
            "properties": {
                "schedulerName": {"const": "volcano"},
                "minAvailable": {"type": "integer", "minimum": 1},
                "tasks": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "replicas", "template"],
                        "properties": {"name": _NAME, "replicas": {"type": "integer", "minimum": 1}},
                    },
                },
            },
        },
    },
}


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in silence; kubectl's decoder refuses them (strict decoding). A
    manifest that says a key twice is read two ways, so it is an error here."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        repeated = sorted({str(key) for key in keys if keys.count(key) > 1})
        if repeated:
            raise yaml.constructor.ConstructorError(None, None, f"keys said twice: {repeated}", node.start_mark)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def load_all(text: str) -> list[Doc]:
    return [doc for doc in yaml.load_all(text, Loader=_UniqueKeyLoader) if doc is not None]


def manifests() -> dict[str, list[Doc]]:
    """Every YAML document under deploy/kubernetes/, by file name."""
    found = {
        path.name: load_all(path.read_text())
        for path in sorted(KUBERNETES.glob("*.y*ml"))
    }
    assert found, f"no manifests under {KUBERNETES}"
    return found


def one(kind: str, files: dict[str, list[Doc]] | None = None) -> Doc:
    docs = [doc for docs in (files or manifests()).values() for doc in docs if doc["kind"] == kind]
    assert len(docs) == 1, f"{len(docs)} {kind} manifests under deploy/kubernetes/"
    return docs[0]


def doc_examples() -> list[Doc]:
    """The YAML blocks of docs/kubernetes.md."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)
    return [doc for block in blocks for doc in load_all(block)]


def daemon_container(daemonset: Doc) -> Doc:
    (container,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "sanitizerd"]
    return container


def arguments(container: Doc) -> dict[str, str]:
    """``--name=value`` arguments by name (the manifests write each option in that one form)."""
    found: dict[str, str] = {}
    for argument in container["args"]:
        name, equals, value = argument.partition("=")
        if equals:
            found[name] = value
    return found


def host_directory(pod_spec: Doc, mount: Doc) -> str:
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
    return str(volume.get("hostPath", {}).get("path", ""))


def pod_specs(example: Doc) -> Iterator[Doc]:
    """The pod specs of a docs example: a Pod's, or each task's of a Volcano job."""
    if example["kind"] == "Pod":
        yield example["spec"]
    else:
        for task in example["spec"]["tasks"]:
            yield task["template"]["spec"]


# --- the schemas ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_the_stated_kubernetes(version: str) -> None:
    checked: set[str] = set()
    for docs in manifests().values():
        for doc in docs:
            if doc["kind"] == "ServiceMonitor":
                jsonschema.validate(doc, SERVICE_MONITOR)
            elif doc["kind"] == "Kustomization":
                continue  # kubectl's own file, not an object of the API: test_kustomization_... reads it
            else:  # an unknown kind raises SchemaNotFoundError: nothing goes unchecked by being new
                kubernetes_validate.validate(doc, version, strict=True)
            checked.add(doc["kind"])
    assert {"Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor", "Secret"} <= checked


@pytest.mark.parametrize("version", VERSIONS)
def test_the_docs_job_examples_are_valid(version: str) -> None:
    kinds: list[str] = []
    for example in doc_examples():
        kinds.append(example["kind"])
        if example["kind"] == "Pod":
            kubernetes_validate.validate(example, version, strict=True)
        else:
            jsonschema.validate(example, VOLCANO_JOB)
            for spec in pod_specs(example):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "task"}, "spec": spec}
                kubernetes_validate.validate(pod, version, strict=True)
    assert sorted(kinds) == ["Job", "Pod"]


def test_the_service_monitor_schema_refuses_what_the_crd_refuses() -> None:
    """The hand-written schema is a check, not a formality: a misspelt field or a missing selector fails it."""
    monitor = one("ServiceMonitor")
    jsonschema.validate(monitor, SERVICE_MONITOR)
    for broken in (
        {**monitor, "spec": {k: v for k, v in monitor["spec"].items() if k != "selector"}},
        {**monitor, "spec": {**monitor["spec"], "endpoint": monitor["spec"]["endpoints"]}},
        {**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": "metrics", "interval": "15 seconds"}]}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SERVICE_MONITOR)


def test_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    files = manifests()
    kustomization = one("Kustomization", files)
    assert sorted(kustomization["resources"]) == sorted(
        name for name in files if name != "kustomization.yaml" and not name.endswith(".example.yaml")
    )
    assert [doc["kind"] for doc in files["store-secret.example.yaml"]] == ["Secret"]


# --- agreement with the daemon's code ------------------------------------------------------------------------------


def test_the_socket_is_where_clients_look_on_the_node_and_in_the_daemon_pod() -> None:
    daemonset = one("DaemonSet")
    container = daemon_container(daemonset)
    socket = Path(arguments(container)["--socket"])
    # where a client looks first, and where serve listens by default as root (as the systemd unit runs it)
    assert socket == discovery.SYSTEM_SOCKET == discovery.default_socket_path(uid=0, environ={})
    assert socket.name == discovery.SOCKET_NAME
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(socket.parent)]
    # the same path on the node: job pods mount that directory
    assert host_directory(daemonset["spec"]["template"]["spec"], mount) == str(socket.parent)
    assert not mount.get("readOnly", False)


def test_the_state_directory_is_the_nodes_and_the_daemons_default(monkeypatch: pytest.MonkeyPatch) -> None:
    daemonset = one("DaemonSet")
    container = daemon_container(daemonset)
    state = arguments(container)["--state-dir"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the default is root's, as the systemd unit's StateDirectory
    assert state == str(daemon.default_state_dir())
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == state]
    assert host_directory(daemonset["spec"]["template"]["spec"], mount) == state


def service_uid_and_gid() -> tuple[int, int]:
    """The daemon's uid and gid, from daemonset.yaml: non-root, and the same in every place that names them."""
    daemonset = one("DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    context = daemon_container(daemonset)["securityContext"]
    uid, gid = context["runAsUser"], context["runAsGroup"]
    assert uid != 0 and gid != 0 and context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    # the init container gives the host directories to that uid and group
    (init,) = spec["initContainers"]
    chown = re.search(r"chown (\d+):(\d+) ", " ".join(init["command"]))
    assert chown is not None and (int(chown[1]), int(chown[2])) == (uid, gid)
    return uid, gid


def test_the_uid_is_the_service_users_in_every_place_that_names_it() -> None:
    uid, gid = service_uid_and_gid()
    text = DOC.read_text()
    # every image in the docs (the daemon's, the job's) names that uid as the service user clients trust
    named: list[tuple[int | None, str]] = []
    for line in re.findall(r"useradd (--[^\n`]*)", text):
        given = re.search(r"--uid (\d+)", line)
        named.append((int(given[1]) if given else None, line.split()[-1]))
    assert len(named) == 2 and set(named) == {(uid, discovery.SERVICE_USER)}, named
    assert f"USER {uid}:{gid}" in text
    assert f"uid {uid}" in text and f"{uid}:{gid}" in text  # the permissions table


def test_job_pods_in_the_docs_mount_the_daemons_socket_and_attach() -> None:
    _uid, gid = service_uid_and_gid()
    daemonset = one("DaemonSet")
    socket = Path(arguments(daemon_container(daemonset))["--socket"])
    host_dir = str(socket.parent)
    # the socket's mode lets the group in and no one else: a pod not running as root needs the daemon's group
    assert SOCKET_MODE & 0o060 == 0o060 and SOCKET_MODE & 0o007 == 0
    examples = doc_examples()
    assert examples
    for example in examples:
        for spec in pod_specs(example):
            context = spec.get("securityContext", {})
            if context.get("runAsUser", 0) != 0:
                assert gid in context.get("supplementalGroups", []), example["metadata"]["name"]
            for container in spec["containers"]:
                mounts = [m for m in container["volumeMounts"] if host_directory(spec, m) == host_dir]
                assert mounts, f"{example['metadata']['name']}: {host_dir} of the node is not mounted"
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                seen = Path(env.get(discovery.HOST_SOCKET_ENV) or discovery.SYSTEM_SOCKET)
                assert any(seen.parent == Path(m["mountPath"]) for m in mounts), (seen, mounts)
                assert seen.name == socket.name
                command = container.get("command", [])
                run = command[:2] == ["sanitizerd", "run"]
                assert run or env.get(attach.ATTACH_ENV) == "1", f"{example['metadata']['name']} does not attach"


def test_the_daemon_shares_the_nodes_namespaces_that_msSanitizers_hooks_need() -> None:
    """``sanitizerd run`` of a CANN program in a job pod: the hooks reach the daemon's socket in msSanitizer's form,
    an abstract socket, through the network namespace they share with it; the daemon names that socket after the
    run's pid and watches that process end, from SO_PEERCRED, which gives 0 for a process outside its pid namespace
    (server/compat_socket.py refuses the run then). So the daemon has the node's network and pids, and a job pod
    that runs ``sanitizerd run`` the node's network."""
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # the store's name still resolves in the cluster
    runs = [pod for example in doc_examples() for pod in pod_specs(example)
            if any(c.get("command", [])[:2] == ["sanitizerd", "run"] for c in pod["containers"])]  # fmt: skip
    assert runs and all(pod.get("hostNetwork") is True for pod in runs)


def test_the_metrics_port_agrees_across_the_daemon_service_and_monitor() -> None:
    files = manifests()
    daemonset, service, monitor = one("DaemonSet", files), one("Service", files), one("ServiceMonitor", files)
    container = daemon_container(daemonset)
    _host, port = metrics_address(arguments(container)["--metrics-addr"].replace("$(HOST_IP)", "192.0.2.1"))
    # the house's port: the systemd unit's and the Prometheus scrape config's
    unit = (ROOT / "deploy" / "systemd" / "sanitizerd.service").read_text()
    assert port == metrics_address(re.search(r"--metrics-addr (\S+)", unit)[1])[1]
    (named,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert named["containerPort"] == port
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == port and service_port["targetPort"] in ("metrics", port)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service_port["name"] and endpoint["path"] == "/metrics"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # each selects the other: the Service the DaemonSet's pods, the monitor the Service
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel["instance"] == ["__meta_kubernetes_pod_node_name"]


def test_serve_accepts_the_daemonsets_command_line_and_config_file(tmp_path: Path) -> None:
    daemonset = one("DaemonSet")
    container = daemon_container(daemonset)
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    # every $(VAR) is a variable of the container: Kubernetes leaves an undefined one in the text as it is
    used = {name for argument in container["args"] for name in re.findall(r"\$\((\w+)\)", argument)}
    assert used <= env.keys(), used - env.keys()
    sample = {"HOST_IP": "192.0.2.1", "CPU_LIMIT": "4", "SANITIZERD_STORE": "postgresql://sanitizerd@db/findings"}
    args = [re.sub(r"\$\((\w+)\)", lambda m: sample[m[1]], a) for a in container["args"]]
    parsed = _parser().parse_args(args)
    assert parsed.command == "serve" and parsed.store and parsed.workers == 4
    # the CPU limit is the worker count
    assert env["CPU_LIMIT"]["resourceFieldRef"] == {
        "containerName": container["name"], "resource": "limits.cpu", "divisor": "1"
    }  # fmt: skip
    # the store's URL and password come from the Secret whose shape the example shows
    secret = one("Secret")
    for name in ("SANITIZERD_STORE", "PGPASSWORD"):
        ref = env[name]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    url = urlsplit(secret["stringData"]["url"])
    assert url.username and url.password is None  # the password is PGPASSWORD's, never on the command line
    # the config file, from the ConfigMap mounted where --config points, is one the daemon's reader accepts
    config_map = one("ConfigMap")
    path = Path(parsed.config)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    written = tmp_path / path.name
    written.write_text(config_map["data"][path.name])
    read = config.read(written)
    assert read.limits["detector_threads"] == 2


def test_the_grace_period_outlasts_the_drain() -> None:
    daemonset = one("DaemonSet")
    config_map = one("ConfigMap")
    drain = dict(config.tomllib.loads(config_map["data"]["sanitizerd.toml"]).get("limits", {})).get(
        "drain_timeout", Limits().drain_timeout
    )
    grace = daemonset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > drain + daemon.ABANDON_MARGIN


def test_the_images_are_the_packages_version() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    for container in spec["containers"] + spec["initContainers"]:
        assert container["image"].rpartition(":")[2] == __version__
    assert f"sanitizerd-{__version__}.tar.gz" in DOC.read_text()


# --- the DaemonSet's daemon, started as its pod starts it -----------------------------------------------------------


def test_the_daemon_starts_as_the_pod_runs_it_and_answers_its_probes(
    postgres: PostgresServer,  # noqa: F811
    short_dir: Path,
) -> None:
    """serve with the container's own arguments and the ConfigMap's file, its directories and port moved to this
    machine's (the pod's mount paths map to directories here), the store a real PostgreSQL database: it starts,
    its liveness command passes, /readyz answers ready, SIGTERM ends it within the grace period, and the liveness
    command then fails."""
    daemonset = one("DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    container = daemon_container(daemonset)
    here = {mount["mountPath"]: short_dir / mount["name"] for mount in container["volumeMounts"]}
    for directory in here.values():
        directory.mkdir(mode=0o700)
    mounted = re.compile("(?<![\\w/])(" + "|".join(re.escape(path) for path in here) + ")(?=/|$|')")

    def moved(text: str) -> str:
        """``text`` with each of the pod's mount paths in it as this machine's directory (one pass: a directory
        here may lie under a path the pod mounts, /tmp)."""
        return mounted.sub(lambda m: str(here[m[1]]), text)

    config_file = Path(moved(arguments(container)["--config"]))
    config_file.write_text(one("ConfigMap")["data"][config_file.name])
    (pod_port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    port = free_port()
    kubelet = {  # what kubelet puts in each variable, for a pod on this machine with a limit of two CPUs
        "HOST_IP": "127.0.0.1",
        "CPU_LIMIT": "2",  # a listener and two worker processes: the shape the DaemonSet runs
        "SANITIZERD_STORE": postgres.url(postgres.new_database()),
        "PGPASSWORD": "unused-by-trust-authentication",
    }
    assert set(kubelet) == {e["name"] for e in container["env"]}
    args = [
        re.sub(r"\$\((\w+)\)", lambda m: kubelet[m[1]], moved(a)).replace(f":{pod_port}", f":{port}")
        for a in container["args"]
    ]
    socket = Path(arguments({"args": args})["--socket"])
    probe = [sys.executable, *(moved(part) for part in container["livenessProbe"]["exec"]["command"][1:])]
    assert probe != [sys.executable, *container["livenessProbe"]["exec"]["command"][1:]]  # it names the socket
    log = short_dir / "daemon.log"
    with open(log, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", *args],
            stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL, env={**os.environ, **kubelet},
        )  # fmt: skip
    try:
        try:
            wait_for_socket(socket, process)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {args}:\n{log.read_text()}") from None
        alive = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert alive.returncode == 0, alive.stderr
        path = container["readinessProbe"]["httpGet"]["path"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as ready:
            assert ready.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(spec["terminationGracePeriodSeconds"])
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert code == 0, log.read_text()
    gone = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert gone.returncode != 0
    assert container["livenessProbe"]["timeoutSeconds"] > 5  # the probe's own wait for the hello's answer


def test_a_key_said_twice_is_refused() -> None:
    """The manifests are read by a loader that refuses repeated keys, as kubectl's strict decoding does."""
    with pytest.raises(yaml.constructor.ConstructorError, match="hostPID"):
        load_all("spec:\n  hostPID: true\n  hostPID: true\n")
    assert load_all("spec:\n  hostPID: true\n") == [{"spec": {"hostPID": True}}]
