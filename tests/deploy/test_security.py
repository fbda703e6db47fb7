"""What reaches what: Kafka's TLS and principals, the network policies, the log reader's RBAC.

On the production overlay as ``kubectl apply -k`` would send it, and on the dev overlay
where it differs on purpose (plain text to its in-cluster broker: a trial, never production).
docs/deploy-security.md is the prose of these rules.
"""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.kafka.config import KafkaSettings
from gputriage.settings import load_settings
from tests.deploy.rendered import containers, kustomize, name_of, render
from tests.paths import DEPLOY, ROOT

PRINCIPALS = {
    "connect-k8s": "gputriage-connector",
    "connect-autoscaler": "gputriage-connector",
    "connect-kmsg": "gputriage-connector",
    "connect-podresources": "gputriage-connector",
    "connect-dcgm": "gputriage-connector",
    "connect-topo": "gputriage-connector",
    "processor": "gputriage-processor",
    "bridge": "gputriage-bridges",
    "writeback": "gputriage-writeback",
}
"""Each container's Kafka user: one principal per role, whose ACLs
docs/deploy-security.md lists (connectors write raw records, the processor incidents...)."""
API_SERVER_CLIENTS = {
    "gputriage-connect-k8s",
    "gputriage-connect-autoscaler",
    "gputriage-writeback",
}
PRIVATE = [
    ipaddress.IPv4Network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
]
DOC = ROOT / "docs" / "deploy-security.md"


def _kafka(doc: dict[str, Any], container: dict[str, Any], docs: list[dict[str, Any]]) -> Any:
    """The container's ``[kafka]`` settings, from its namespace's ConfigMap and its env."""
    namespace = doc["metadata"]["namespace"]
    [config] = [
        d["data"]
        for d in docs
        if d["kind"] == "ConfigMap"
        and d["metadata"]["name"].startswith("gputriage-config")
        and d["metadata"]["namespace"] == namespace
    ]
    literal = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return load_settings(None, environ={**config, **literal}).kafka


def _ours(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Any, dict[str, Any]]]:
    return [(doc, spec, c) for doc, spec, c in containers(docs) if "gputriage/" in c["image"]]


@pytest.mark.parametrize("overlay", ["production", "production+bridges"])
def test_production_kafka_is_tls_and_sasl_with_a_principal_per_role(overlay: str) -> None:
    docs = render(overlay)
    found = _ours(docs)
    assert len(found) >= 7
    for doc, spec, container in found:
        where = f"{name_of(doc)}:{container['name']}"
        kafka: KafkaSettings = _kafka(doc, container, docs)
        assert kafka.security_protocol == "SASL_SSL", where
        assert kafka.sasl_mechanism.startswith("SCRAM-"), where  # never PLAIN over the wire
        assert kafka.sasl_username == PRINCIPALS[container["name"]], where
        # The CA and the password are files of Secrets mounted into this container, read-only.
        secret_mounts = {
            m["mountPath"]: v["secret"]["secretName"]
            for m in container.get("volumeMounts", [])
            for v in spec.get("volumes", [])
            if v["name"] == m["name"] and "secret" in v and m.get("readOnly")
        }
        for path in (kafka.ssl_cafile, kafka.sasl_password_file):
            assert path, where
            holder = [m for m in secret_mounts if path.startswith(m.rstrip("/") + "/")]
            assert holder, f"{where}: {path} is not in a mounted Secret"
        names = {secret_mounts[m] for m in secret_mounts}
        assert "gputriage-kafka-ca" in names, where
        assert f"gputriage-kafka-{PRINCIPALS[container['name']].removeprefix('gputriage-')}" in (
            names
        ), where
        # The password never as a value: only the file (connectors/kafka/config.py).
        env = {e["name"]: e for e in container.get("env", [])}
        assert "value" not in env.get("GPUTRIAGE_KAFKA_PASSWORD", {}), where


def test_dev_kafka_is_plain_text_to_its_own_broker_only() -> None:
    docs = render("dev")
    for doc, _spec, container in _ours(docs):
        kafka = _kafka(doc, container, docs)
        assert kafka.security_protocol == "PLAINTEXT"
        assert kafka.brokers == ("gputriage-kafka.gputriage.svc:9092",)
    [broker] = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == ("gputriage-kafka")
    ]
    [rule] = broker["spec"]["ingress"]
    [peer] = rule["from"]
    assert peer["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "gputriage",
        "gputriage-node",
    ]


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] != "default-deny"
    ]


def _is_dns(rule: dict[str, Any]) -> bool:
    return {p["port"] for p in rule["ports"]} == {53}


@pytest.mark.parametrize("overlay", ["production", "production+bridges"])
def test_production_egress_names_its_peers(overlay: str) -> None:
    """No rule is open to any address but dcgm-exporter's (the node's own address) and the
    bridges' public HTTPS, which excludes private and link-local addresses."""
    values = _network_values()
    docs = render(overlay)
    for policy in _policies(docs):
        name = policy["metadata"]["name"]
        if name == "gputriage-kafka":
            continue
        egress = policy["spec"]["egress"]
        dns, kafka, *rest = egress
        assert _is_dns(dns), name
        assert dns["to"] == [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ], name
        assert kafka["to"] == [{"ipBlock": {"cidr": values["kafka-cidr"]}}], name
        assert [p["port"] for p in kafka["ports"]] == [int(values["kafka-port"])], name
        if name in API_SERVER_CLIENTS:
            [api] = rest
            assert api["to"] == [{"ipBlock": {"cidr": values["apiserver-cidr"]}}], name
            assert {p["port"] for p in api["ports"]} == {443, 6443}, name
        elif name.startswith("gputriage-bridge-"):
            [vendor] = rest
            [peer] = vendor["to"]
            assert peer["ipBlock"]["cidr"] == "0.0.0.0/0"
            excluded = [ipaddress.IPv4Network(n) for n in peer["ipBlock"]["except"]]
            assert all(any(p.subnet_of(e) for e in excluded) for p in PRIVATE), name
            assert {p["port"] for p in vendor["ports"]} == {443}, name
        elif name == "gputriage-gpu-agents":
            [dcgm] = rest
            assert {p["port"] for p in dcgm["ports"]} == {9400}, name
        else:
            assert rest == [], f"{name}: {rest}"


@pytest.mark.parametrize("overlay", ["production", "dev", "production+bridges"])
def test_metrics_are_open_to_prometheus_only(overlay: str) -> None:
    namespace = _network_values()["prometheus-namespace"] if overlay != "dev" else "monitoring"
    for policy in _policies(render(overlay)):
        if policy["metadata"]["name"] == "gputriage-kafka":
            continue
        for rule in policy["spec"].get("ingress", []):
            assert rule["from"] == [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                }
            ], name_of(policy)


def test_dev_allows_its_broker_by_pod_and_the_api_server_by_port() -> None:
    for policy in _policies(render("dev")):
        name = policy["metadata"]["name"]
        if name == "gputriage-kafka":
            continue
        kafka = policy["spec"]["egress"][1]
        assert kafka["to"][0]["podSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": "gputriage",
            "app.kubernetes.io/component": "kafka",
        }
        assert [p["port"] for p in kafka["ports"]] == [9092]
        if name in API_SERVER_CLIENTS:
            api = policy["spec"]["egress"][2]
            assert "to" not in api  # kind's and minikube's API server: the node's address
            assert {p["port"] for p in api["ports"]} == {443, 6443, 8443}


def _network_values(tree: Path = DEPLOY) -> dict[str, str]:
    path = tree / "overlays" / "production" / "network.yaml"
    values: dict[str, str] = yaml.safe_load(path.read_text(encoding="utf-8"))["data"]
    return values


def test_the_network_values_reach_the_policies_and_only_them(tmp_path: Path) -> None:
    """network.yaml is the one place to set them: a change there lands in every rule."""
    tree = tmp_path / "deploy"
    shutil.copytree(DEPLOY, tree)
    values = {
        "kafka-cidr": "10.20.30.0/24",
        "kafka-port": "19093",
        "apiserver-cidr": "172.31.0.10/32",
        "prometheus-namespace": "observability",
    }
    path = tree / "overlays" / "production" / "network.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(doc["data"]) == set(values)
    doc["data"] = values
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    docs = kustomize(path.parent)
    assert not [d for d in docs if d["metadata"]["name"] == "gputriage-network"], "local-config"
    for policy in _policies(docs):
        name = policy["metadata"]["name"]
        kafka = policy["spec"]["egress"][1]
        assert kafka["to"] == [{"ipBlock": {"cidr": "10.20.30.0/24"}}], name
        assert kafka["ports"][0]["port"] == 19093, name
        selector = policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]
        assert selector["matchLabels"] == {"kubernetes.io/metadata.name": "observability"}
        if name in API_SERVER_CLIENTS:
            assert policy["spec"]["egress"][2]["to"] == [{"ipBlock": {"cidr": "172.31.0.10/32"}}]


def test_production_network_values_fail_closed_until_set() -> None:
    """The shipped values route nowhere (TEST-NET-1): a forgotten one is closed, not open."""
    test_net = ipaddress.IPv4Network("192.0.2.0/24")
    values = _network_values()
    for key in ("kafka-cidr", "apiserver-cidr"):
        assert ipaddress.IPv4Network(values[key]).subnet_of(test_net), key


def test_pod_logs_are_read_in_one_namespace_and_never_cluster_wide() -> None:
    """RBAC cannot narrow pods/log to the autoscaler's pods: its pods' names are generated
    (resourceNames matches whole names only) and RBAC has no label selectors; what holds is a
    Role in the autoscaler's namespace, get only (docs/deploy-security.md says so)."""
    granted = 0
    for doc in render("production"):
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc["rules"]:
            if "pods/log" not in rule["resources"]:
                continue
            granted += 1
            assert doc["kind"] == "Role", f"{name_of(doc)} grants logs cluster-wide"
            assert doc["metadata"]["namespace"] == "kube-system"
            assert rule["resources"] == ["pods/log"]
            assert rule["verbs"] == ["get"]
    assert granted == 1, "the autoscaler connector reads its pods' logs: one Role grants it"
    text = DOC.read_text(encoding="utf-8")
    assert "resourceNames" in text
    assert "pods/log" in text


def test_the_documented_acls_name_the_principals_the_manifests_use() -> None:
    text = DOC.read_text(encoding="utf-8")
    for principal in set(PRINCIPALS.values()):
        assert f"User:{principal}" in text, principal
