"""deploy/: the Kubernetes manifests against the Kubernetes schemas, and the fields that matter in
them, the compose quickstart and the Dockerfile — no container engine needed.

Every ``ICEGOV__...`` name used anywhere in deploy/ must be a real setting, and the settings each
deployment sets must load; the policy shipped in the ConfigMap must compile and hot-reload through
the kubelet's symbolic-link swap.
"""

from __future__ import annotations

import copy
import http.server
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from pydantic import BaseModel

from proxy.identity.principals import parse_principals
from proxy.policy.authorizer import PolicyAuthorizer
from proxy.policy.loader import load
from proxy.policy.settings import PolicySettings
from proxy.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SETTING_NAME = re.compile(r"ICEGOV__[A-Z][A-Z0-9_]*[A-Z0-9]")
GOOD_KEY = "k" * 48
LABELS = {"app.kubernetes.io/name": "icegov", "app.kubernetes.io/component": "proxy"}


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object in deploy/k8s, with its file."""
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        found += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


def one(kind: str) -> dict[str, Any]:
    (doc,) = by_kind(kind)
    return doc


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def is_setting(name: str) -> bool:
    """True when ``ICEGOV__A__B`` names a field of ``Settings`` (nested models walked)."""
    model: type[BaseModel] = Settings
    parts = name.removeprefix("ICEGOV__").lower().split("__")
    for index, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        last = index == len(parts) - 1
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if last:
                return False  # a whole group is set field by field
            model = annotation
        elif not last:
            return False
    return True


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("ICEGOV__"):
            monkeypatch.delenv(name)
    return monkeypatch


# --- Kubernetes ------------------------------------------------------------------------------

def test_the_manifests_hold_every_kind_a_deployment_needs() -> None:
    kinds = sorted(doc["kind"] for _, doc in manifests())
    assert kinds == sorted(["ConfigMap", "Deployment", "HorizontalPodAutoscaler",
                            "PersistentVolumeClaim", "PodDisruptionBudget", "Secret", "Service"])


@pytest.mark.parametrize("path", sorted(K8S.glob("*.yaml")), ids=lambda p: p.name)
def test_manifest_is_valid_against_the_kubernetes_schema(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_validator_rejects_what_kubernetes_would() -> None:
    deployment = copy.deepcopy(one("Deployment"))
    container(deployment)["livenessProbe"]["httpGet"]["pathh"] = "/healthz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)
    deployment = copy.deepcopy(one("Deployment"))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_deployment_runs_replicas_with_probes_on_healthz_and_readyz() -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    main = container(deployment)
    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert main[probe]["httpGet"]["port"] in ports
    assert main["resources"]["requests"]["cpu"] and main["resources"]["limits"]["memory"]
    assert main["args"] == ["serve", "--host", "0.0.0.0"]


def test_deployment_runs_as_non_root_on_a_read_only_root() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    main = container(deployment)
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert main["securityContext"]["capabilities"]["drop"] == ["ALL"]
    mounts = {mount["mountPath"] for mount in main["volumeMounts"]}
    env = {item["name"]: item.get("value") for item in main["env"]}
    assert {"/tmp", env["ICEGOV__WAREHOUSE"]} <= mounts  # the only places icegov writes


def test_service_pdb_and_hpa_select_the_deployment() -> None:
    deployment = one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == LABELS
    assert LABELS.items() <= pod_labels.items()
    service, pdb, hpa = one("Service"), one("PodDisruptionBudget"), one("HorizontalPodAutoscaler")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    ports = {port["name"] for port in container(deployment)["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert hpa["spec"]["minReplicas"] >= 2


def test_every_secret_config_map_and_claim_referenced_exists() -> None:
    secrets = {doc["metadata"]["name"]: {**doc.get("data", {}), **doc.get("stringData", {})}
               for doc in by_kind("Secret")}
    maps = {doc["metadata"]["name"]: doc["data"] for doc in by_kind("ConfigMap")}
    claims = {doc["metadata"]["name"] for doc in by_kind("PersistentVolumeClaim")}
    pod = one("Deployment")["spec"]["template"]["spec"]
    for item in container(one("Deployment"))["env"]:
        if "secretKeyRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["secretKeyRef"]
            assert ref["key"] in secrets[ref["name"]], item["name"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert {m["name"] for m in container(one("Deployment"))["volumeMounts"]} == set(volumes)
    for volume in volumes.values():
        if "configMap" in volume:
            keys = maps[volume["configMap"]["name"]]
            assert {item["key"] for item in volume["configMap"]["items"]} <= set(keys)
        if "secret" in volume:
            keys = secrets[volume["secret"]["secretName"]]
            assert {item["key"] for item in volume["secret"]["items"]} <= set(keys)
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_policy_files_are_mounted_whole_so_the_kubelet_updates_them() -> None:
    main = container(one("Deployment"))
    assert all("subPath" not in mount for mount in main["volumeMounts"])  # never updated
    env = {item["name"]: item.get("value") for item in main["env"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in main["volumeMounts"]}
    assert env["ICEGOV__POLICY__MODEL_PATH"] == f"{mounts['policy']}/model.conf"
    assert env["ICEGOV__POLICY__POLICY_PATH"] == f"{mounts['policy']}/policy.csv"
    assert env["ICEGOV__IDENTITY__PRINCIPALS_FILE"] == f"{mounts['secrets']}/principals.yaml"


def test_config_map_policy_compiles_and_principals_parse(tmp_path: Path) -> None:
    data = one("ConfigMap")["data"]
    (tmp_path / "model.conf").write_text(data["model.conf"])
    (tmp_path / "policy.csv").write_text(data["policy.csv"])
    policy = load(tmp_path / "model.conf", tmp_path / "policy.csv")
    assert policy.files.policy_text == data["policy.csv"]
    assert parse_principals(one("Secret")["stringData"]["principals.yaml"]) == {}


def _kubelet_projection(directory: Path, version: str, files: dict[str, str]) -> None:
    """Write ``files`` the way the kubelet projects a ConfigMap: a timestamped directory, an
    atomically swapped ``..data`` link to it, and one link per file through ``..data``."""
    target = directory / f"..{version}"
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text)
    (directory / "..data_tmp").symlink_to(target.name)
    os.replace(directory / "..data_tmp", directory / "..data")
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def test_config_map_edits_reload_through_the_kubelet_symlink_swap(tmp_path: Path) -> None:
    data = one("ConfigMap")["data"]
    _kubelet_projection(tmp_path, "2026_01_01_v1", dict(data))
    settings = PolicySettings(model_path=tmp_path / "model.conf",
                              policy_path=tmp_path / "policy.csv")
    authorizer = PolicyAuthorizer.from_settings(settings)
    assert authorizer.reload_if_changed() is False
    edited = {**data, "policy.csv": data["policy.csv"] + "p, auditor, icegov, BROWSE, allow\n"}
    _kubelet_projection(tmp_path, "2026_01_01_v2", edited)
    assert authorizer.reload_if_changed() is True
    assert authorizer.generation == 2
    assert authorizer.policy.files.policy_text == edited["policy.csv"]


def test_deployment_settings_load_and_the_placeholder_key_is_refused(
        clean_env: pytest.MonkeyPatch) -> None:
    secret = one("Secret")["stringData"]
    env = _deployment_env(secret)
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(SettingsError, match="signing_key must be at least 32 bytes"):
        load_settings()  # as shipped: icegov refuses to start until the key is replaced
    clean_env.setenv("ICEGOV__IDENTITY__SIGNING_KEY", GOOD_KEY)
    with pytest.raises(SettingsError, match="task_key must be at least 32 bytes"):
        load_settings()  # and the plan-task key's placeholder too
    clean_env.setenv("ICEGOV__PLANNING__TASK_KEY", GOOD_KEY[::-1])
    with pytest.raises(SettingsError, match="audit hmac_key must be at least 32 bytes"):
        load_settings()  # and the audit key's placeholder too
    clean_env.setenv("ICEGOV__AUDIT__HMAC_KEY", "h" * 40)
    settings = load_settings()
    assert settings.catalog_db_uri == secret["database-uri"]
    assert settings.idempotency.db_uri == secret["database-uri"]
    assert settings.planning.task_key is not None and settings.audit.hmac_key is not None
    assert settings.policy.model_path == Path(env["ICEGOV__POLICY__MODEL_PATH"])
    assert settings.embedded


def _deployment_env(secret: dict[str, str]) -> dict[str, str]:
    env = {}
    for item in container(one("Deployment"))["env"]:
        source = item.get("valueFrom", {})
        if "fieldRef" in source:  # the pod's own fields (its name): a pod name stands in
            env[item["name"]] = "icegov-7d9f8-abcde"
            continue
        ref = source.get("secretKeyRef")
        env[item["name"]] = secret[ref["key"]] if ref else item["value"]
    return env


# --- every setting name in deploy/ -----------------------------------------------------------

def _deploy_files() -> Iterator[Path]:
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path.name != "setup.sh":
            yield path


def test_every_setting_named_in_deploy_exists() -> None:
    named = {name for path in _deploy_files() for name in SETTING_NAME.findall(path.read_text())}
    assert {"ICEGOV__CATALOG_DB_URI", "ICEGOV__PLANNING__TASK_KEY",
            "ICEGOV__POLICY__MODEL_PATH", "ICEGOV__IDENTITY__SIGNING_KEY"} <= named
    assert sorted(name for name in named if not is_setting(name)) == []


def test_the_setting_name_check_rejects_invented_names() -> None:
    assert is_setting("ICEGOV__IDENTITY__SIGNING_KEY")
    assert is_setting("ICEGOV__CATALOGS")
    assert not is_setting("ICEGOV__POLICY__PATH")
    assert not is_setting("ICEGOV__SIGNING_KEY")
    assert not is_setting("ICEGOV__POLICY")
    assert not is_setting("ICEGOV__PORT__NUMBER")


# --- compose quickstart ----------------------------------------------------------------------

def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


OPERATOR_SET = {"ICEGOV_SIGNING_KEY": GOOD_KEY, "ICEGOV_PLAN_TASK_KEY": GOOD_KEY[::-1]}
"""What the quickstart's operator exports (compose's ``${VAR:?}``: no default)."""


def _interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with nothing set (the default) and ``${VAR:?error}`` with
    what the operator set."""
    value = re.sub(r"\$\{([A-Z_]+):\?[^}]*\}", lambda m: OPERATOR_SET[m.group(1)], value)
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_compose_has_no_fallback_for_any_key() -> None:
    env = compose()["x-icegov-env"]
    for name in ("ICEGOV__IDENTITY__SIGNING_KEY", "ICEGOV__PLANNING__TASK_KEY"):
        assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", env[name]), env[name]


def test_compose_runs_icegov_on_postgres_with_an_object_store_and_spark() -> None:
    services = compose()["services"]
    assert {"postgres", "icegov", "spark", "minio", "rest-catalog", "icegov-s3"} <= set(services)
    assert services["icegov"]["deploy"]["replicas"] >= 2
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith("."):
                assert source in compose()["volumes"], name
            else:
                assert (DEPLOY / source).exists(), volume
    for name in ("postgres", "icegov", "minio", "icegov-s3"):
        assert services[name]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    assert "/readyz" in " ".join(services["icegov"]["healthcheck"]["test"])
    assert services["spark"]["depends_on"]["icegov"]["condition"] == "service_healthy"


def test_compose_icegov_settings_load_and_share_the_postgres_database(
        clean_env: pytest.MonkeyPatch) -> None:
    services = compose()["services"]
    env = {name: _interpolate(str(value))
           for name, value in services["icegov"]["environment"].items()}
    assert all(is_setting(name) for name in env)
    for name, value in env.items():
        clean_env.setenv(name, value)
    settings = load_settings()
    assert settings.embedded
    uri = settings.embedded_db_uri()
    assert uri.startswith("postgresql+psycopg://") and "@postgres:5432/" in uri
    assert settings.idempotency.db_uri == uri
    assert services["icegov"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    policies = {v.split(":")[1] for v in services["icegov"]["volumes"] if v.startswith("../")}
    assert settings.policy.model_path.parent.as_posix() in policies
    assert (DEPLOY / "../policies/model.conf").is_file()


def test_compose_spark_reaches_icegov_and_shares_its_warehouse_path() -> None:
    services = compose()["services"]
    conf = dict(line.split(None, 1) for line in
                (DEPLOY / "spark/spark-defaults.conf").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert conf["spark.sql.catalog.icegov.type"].strip() == "rest"
    assert conf["spark.sql.catalog.icegov.uri"].strip() == "http://icegov:8181"
    warehouse = services["icegov"]["environment"]["ICEGOV__WAREHOUSE"]
    assert f"warehouse:{warehouse}" in services["spark"]["volumes"]
    assert f"warehouse:{warehouse}" in services["icegov"]["volumes"]
    assert services["spark"]["user"].split(":")[0] == _dockerfile_user()


# --- Dockerfile ------------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    instructions = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def _dockerfile_user() -> str:
    users = [rest for keyword, rest in final_stage() if keyword == "USER"]
    return users[-1].split(":")[0]


def test_dockerfile_runs_icegov_as_non_root_from_python_slim() -> None:
    assert dockerfile()[0] == ("ARG", "PYTHON_IMAGE=python:3.11-slim")
    assert [rest for keyword, rest in dockerfile() if keyword == "FROM"] == [
        "${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE}"]
    assert _dockerfile_user() not in ("", "root", "0")
    stage = final_stage()
    assert ("ENTRYPOINT", '["icegov"]') in stage
    assert ("CMD", '["serve", "--host", "0.0.0.0"]') in stage
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ("ARG", f"ICEGOV_VERSION={version}") in stage


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for keyword, rest in dockerfile():
        if keyword == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), source
                assert f"!{source.rstrip('/')}/" in ignored or f"!{source}" in ignored, source


def _healthcheck_program() -> str:
    (check,) = [rest for keyword, rest in final_stage() if keyword == "HEALTHCHECK"]
    command = yaml.safe_load(check[check.index("CMD") + 3:])  # the exec form is a JSON list
    assert command[:2] == ["python", "-c"]
    return str(command[2])


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_dockerfile_healthcheck_asks_healthz(status: int, healthy: bool) -> None:
    handler = type("Handler", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "ICEGOV__PORT": str(server.server_address[1])}
        result = subprocess.run([sys.executable, "-c", _healthcheck_program()], env=env,
                                capture_output=True, timeout=30, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert (result.returncode == 0) is healthy
