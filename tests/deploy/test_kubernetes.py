"""The Kubernetes manifests under deploy/kubernetes/: rendered the way ``kubectl apply -k``
renders them, validated against the Kubernetes JSON schemas offline (``kubernetes-validate``,
strict: unknown fields are errors), checked field by field against the Pod Security Standards'
restricted profile, and checked against the Dockerfile, docker-compose.yml, the service's routes
and settings, and the measured RSS in bench/RESULTS*.md.

kustomize is not installed here, so :func:`build` renders the small subset the manifests use
(resources, components, namespace, labels, images, JSON 6902 patches) and refuses any other
kustomization field, so a feature it does not know cannot be silently skipped.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import make_settings

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = {"cpu": KUBE / "overlays" / "cpu", "gpu": KUBE / "overlays" / "gpu"}
K8S_VERSIONS = ["1.37.0", "1.33.0"]  # the newest schemas the package ships, and an older one
# Settings of API.md 1.1 that other parts of the service add (admission, streaming).
CONTRACT_SETTINGS = {
    "POSENC_MAX_INFLIGHT_BYTES",
    "POSENC_QUEUE_TIMEOUT",
    "POSENC_MAX_STREAM_ELEMENTS",
}

# ---------------------------------------------------------------- a small kustomize

KNOWN_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "components",
    "namespace",
    "labels",
    "images",
    "patches",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/', got {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 add / replace / remove / test on a copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op["path"])
        parent, last = _parent(doc, parts), parts[-1]
        kind = op["op"]
        if kind == "add":
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                parent.insert(index, op["value"])
            else:
                parent[last] = op["value"]
        elif kind == "replace":
            key: Any = int(last) if isinstance(parent, list) else last
            if isinstance(parent, dict) and last not in parent:
                raise KeyError(f"replace of a missing path {op['path']}")
            parent[key] = op["value"]
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "test":
            value = parent[int(last)] if isinstance(parent, list) else parent[last]
            if value != op["value"]:
                raise ValueError(f"test failed at {op['path']}: {value!r} != {op['value']!r}")
        else:
            raise ValueError(f"unsupported JSON patch op {kind!r}")
    return doc


def _matches(obj: dict, target: dict) -> bool:
    meta = obj["metadata"]
    for key, want in target.items():
        have = {"kind": obj["kind"], "name": meta["name"], "namespace": meta.get("namespace")}
        if key not in have:
            raise ValueError(f"unsupported patch target field {key!r}")
        if have[key] != want:
            return False
    return True


def _pod_specs(obj: dict) -> list[dict]:
    if obj["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
        return [obj["spec"]["template"]["spec"]]
    return []


def _set_image(image: str, rule: dict) -> str:
    name, tag = image, None
    if "@" in name:
        name, _ = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    if name != rule["name"]:
        return image
    new = rule.get("newName", name)
    if "digest" in rule:
        return f"{new}@{rule['digest']}"
    tag = rule.get("newTag", tag)
    return f"{new}:{tag}" if tag else new


def _transform(folder: Path, spec: dict, objs: list[dict]) -> list[dict]:
    for component in spec.get("components", []):
        objs = build(folder / component, objs)
    if "namespace" in spec:
        for obj in objs:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    for entry in spec.get("labels", []):
        extra = set(entry) - {"pairs"}
        if extra:  # includeSelectors / includeTemplates: not used, not implemented
            raise ValueError(f"unsupported labels options {sorted(extra)}")
        for obj in objs:
            obj["metadata"].setdefault("labels", {}).update(entry["pairs"])
    for rule in spec.get("images", []):
        for obj in objs:
            for pod in _pod_specs(obj):
                for container in pod.get("containers", []) + pod.get("initContainers", []):
                    container["image"] = _set_image(container["image"], rule)
    for patch in spec.get("patches", []):
        text = patch["patch"] if "patch" in patch else (folder / patch["path"]).read_text()
        ops = yaml.safe_load(text)
        if not isinstance(ops, list):
            raise ValueError("only JSON 6902 patches (a list of operations) are supported")
        hits = [i for i, obj in enumerate(objs) if _matches(obj, patch["target"])]
        if not hits:
            raise ValueError(f"patch target {patch['target']} matches nothing in {folder}")
        for i in hits:
            objs[i] = json_patch(objs[i], ops)
    return objs


def build(folder: Path, inherited: list[dict] | None = None) -> list[dict]:
    """The objects ``kubectl kustomize folder`` gives (for the subset described above).

    ``inherited``: the objects a Component is applied to (a Component has no resources of
    its own here).
    """
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN_FIELDS
    if unknown:
        raise ValueError(f"{folder}: kustomization fields this helper does not render: {unknown}")
    expected_kind = "Component" if inherited is not None else "Kustomization"
    if spec["kind"] != expected_kind:
        raise ValueError(f"{folder}: kind {spec['kind']}, expected {expected_kind}")
    objs: list[dict] = [] if inherited is None else inherited
    for resource in spec.get("resources", []):
        path = folder / resource
        if path.is_dir():
            objs += build(path)
        else:
            objs += [copy.deepcopy(d) for d in yaml.safe_load_all(path.read_text()) if d]
    objs = _transform(folder, spec, objs)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"{folder}: the same object twice: {keys}")
    return objs


def rendered(name: str, *components: str) -> dict[str, dict]:
    folder = OVERLAYS[name]
    objs = build(folder)
    for component in components:
        objs = build(KUBE / "components" / component, objs)
    return {o["kind"]: o for o in objs}


RENDERINGS = {
    "cpu": lambda: rendered("cpu"),
    "gpu": lambda: rendered("gpu"),
    "cpu+hpa-inflight": lambda: rendered("cpu", "hpa-inflight"),
    "gpu+hpa-inflight": lambda: rendered("gpu", "hpa-inflight"),
}


@pytest.fixture(params=sorted(RENDERINGS))
def objects(request: pytest.FixtureRequest) -> dict[str, dict]:
    return RENDERINGS[request.param]()


def pod(objects: dict[str, dict]) -> dict:
    return objects["Deployment"]["spec"]["template"]["spec"]


def container(objects: dict[str, dict]) -> dict:
    (only,) = pod(objects)["containers"]
    return only


# ---------------------------------------------------------------- the helper itself


def test_json_patch_by_rfc_6902_examples() -> None:
    doc = {"foo": ["bar", "baz"], "q": {"a": 1}}
    assert json_patch(doc, [{"op": "add", "path": "/foo/1", "value": "qux"}])["foo"] == [
        "bar",
        "qux",
        "baz",
    ]
    assert json_patch(doc, [{"op": "add", "path": "/foo/-", "value": "z"}])["foo"][-1] == "z"
    assert json_patch(doc, [{"op": "remove", "path": "/q/a"}])["q"] == {}
    assert json_patch(doc, [{"op": "replace", "path": "/foo/0", "value": 7}])["foo"][0] == 7
    with pytest.raises(KeyError):
        json_patch(doc, [{"op": "replace", "path": "/q/b", "value": 1}])
    with pytest.raises(ValueError, match="test failed"):
        json_patch(doc, [{"op": "test", "path": "/q/a", "value": 2}])
    assert doc == {"foo": ["bar", "baz"], "q": {"a": 1}}  # the input is left alone


@pytest.mark.parametrize(
    ("image", "rule", "want"),
    [
        ("posenc", {"name": "posenc", "newTag": "cuda"}, "posenc:cuda"),
        ("posenc:1", {"name": "posenc", "newName": "r.io/x/posenc"}, "r.io/x/posenc:1"),
        ("localhost:5000/posenc", {"name": "posenc", "newTag": "2"}, "localhost:5000/posenc"),
        ("posenc:1", {"name": "posenc", "digest": "sha256:ab"}, "posenc@sha256:ab"),
    ],
)
def test_image_rules(image: str, rule: dict, want: str) -> None:
    assert _set_image(image, rule) == want


# ---------------------------------------------------------------- schema validation


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(
    name: str, version: str
) -> None:
    objs = RENDERINGS[name]()
    assert set(objs) == {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    }
    for obj in objs.values():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - the failure
            pytest.fail(f"{name}: {obj['kind']} {obj['metadata']['name']}: {exc.message}")


def test_the_schemas_catch_a_mistake() -> None:
    """The validation can fail: a misspelt field and a wrong type are both errors."""
    deployment = rendered("cpu")["Deployment"]
    typo = json_patch(
        deployment,
        [
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/readOnlyRootFilesytem",
                "value": True,
            }
        ],
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_VERSIONS[0], strict=True)
    wrong = json_patch(deployment, [{"op": "replace", "path": "/spec/replicas", "value": "two"}])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, K8S_VERSIONS[0], strict=True)


# ---------------------------------------------------------------- Pod Security Standards


ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def test_pod_security_standards_restricted(objects: dict[str, dict]) -> None:
    """Every control of the baseline and restricted profiles (kubernetes.io/docs/concepts/
    security/pod-security-standards), checked on the rendered pod template."""
    spec = pod(objects)
    pod_sc = spec.get("securityContext", {})
    for host in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert spec.get(host) in (None, False) or (host == "hostUsers" and spec[host] is False)
    for volume in spec["volumes"]:
        kinds = set(volume) - {"name"}
        assert kinds <= ALLOWED_VOLUMES, volume
    assert "sysctls" not in pod_sc
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        assert sc.get("privileged") in (None, False)
        assert sc.get("allowPrivilegeEscalation") is False
        assert "ALL" in sc["capabilities"]["drop"]
        assert set(sc["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        assert non_root is True
        assert sc.get("runAsUser", pod_sc.get("runAsUser")) not in (None, 0)
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost")
        assert sc.get("procMount") in (None, "Default")
        assert not any("hostPort" in p for p in c.get("ports", []))
        assert sc.get("readOnlyRootFilesystem") is True
        assert "appArmorProfile" not in sc or sc["appArmorProfile"]["type"] != "Unconfined"
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["automountServiceAccountToken"] is False


# ---------------------------------------------------------------- against the image and the service


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_port_user_and_command_match_the_dockerfile(objects: dict[str, dict]) -> None:
    text = dockerfile()
    (expose,) = re.findall(r"^EXPOSE (\d+)$", text, re.M)
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, re.M)
    argv = yaml.safe_load(cmd)
    assert argv[argv.index("--port") + 1] == expose
    (user,) = re.findall(r"^USER (\d+):(\d+)$", text, re.M)
    c = container(objects)
    (port,) = c["ports"]
    assert (port["name"], port["containerPort"]) == ("http", int(expose))
    assert "command" not in c and "args" not in c  # the image's CMD runs
    sc = {**pod(objects)["securityContext"], **c["securityContext"]}
    assert (sc["runAsUser"], sc["runAsGroup"]) == (int(user[0]), int(user[1]))
    annotations = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == expose


def test_probes_point_at_open_routes_of_the_service(objects: dict[str, dict], gpt2_file) -> None:  # type: ignore[no-untyped-def]
    """The probes' paths answer 200 without a token even with POSENC_API_KEY set (probes send
    none), on the named port; liveness is /healthz, readiness and start-up /readyz."""
    from fastapi.testclient import TestClient

    from service.app import create_app

    c = container(objects)
    paths = {
        kind: c[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    assert paths["livenessProbe"]["path"] == "/healthz"
    assert paths["readinessProbe"]["path"] == paths["startupProbe"]["path"] == "/readyz"
    assert {p["port"] for p in paths.values()} == {"http"}
    # the start-up probe allows a slow start; readiness and liveness then take over
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    with TestClient(create_app(make_settings(gpt2_file, api_key="secret"))) as client:
        for probe in paths.values():
            assert client.get(probe["path"]).status_code == 200, probe
        assert client.get("/v1/info").status_code == 401  # the key is in force


def test_images_are_the_compose_images(objects: dict[str, dict]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    variant = objects["Deployment"]["metadata"]["labels"]["posenc.dev/variant"]
    want = compose["posenc-gpu" if variant == "gpu" else "posenc"]["image"]
    assert container(objects)["image"] == want


def test_settings_come_from_the_configmap_and_the_required_secret(
    objects: dict[str, dict],
) -> None:
    from service.config import Settings

    c = container(objects)
    config = objects["ConfigMap"]
    assert c["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    known = {f"POSENC_{name.upper()}" for name in Settings.model_fields} | CONTRACT_SETTINGS
    assert set(config["data"]) <= known, set(config["data"]) - known
    assert "POSENC_API_KEY" not in config["data"]
    (key,) = [e for e in c["env"] if e["name"] == "POSENC_API_KEY"]
    ref = key["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is False and ref["name"] and ref["key"]
    # the values are ones the service accepts
    values = {k.removeprefix("POSENC_").lower(): v for k, v in config["data"].items()}
    settings = Settings(**{k: v for k, v in values.items() if k in Settings.model_fields})
    assert settings.log_format == "json"
    variant = objects["Deployment"]["metadata"]["labels"]["posenc.dev/variant"]
    assert settings.device == ("cuda" if variant == "gpu" else "cpu")


def test_models_volume_is_read_only_and_tmp_is_the_only_writable_path(
    objects: dict[str, dict],
) -> None:
    c = container(objects)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert set(mounts) == {"/models", "/tmp"}
    assert mounts["/models"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod(objects)["volumes"]}
    models = volumes[mounts["/models"]["name"]]
    assert models["persistentVolumeClaim"]["readOnly"] is True
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


def _mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


def measured_peak_rss_mib(variant: str) -> float:
    name = "RESULTS-cuda.md" if variant == "gpu" else "RESULTS.md"
    text = (ROOT / "bench" / name).read_text()
    (mib,) = re.findall(
        r"\| peak RSS, posenc --workers 1 \(whole run above\) \| (\d+) MiB \|", text
    )
    return float(mib)


def test_memory_is_sized_from_the_measured_rss(objects: dict[str, dict]) -> None:
    """requests >= the bench's peak RSS of one process (cache full); limit >= that plus the
    bytes of responses in flight that admission allows."""
    variant = objects["Deployment"]["metadata"]["labels"]["posenc.dev/variant"]
    peak = measured_peak_rss_mib(variant)
    resources = container(objects)["resources"]
    inflight = int(objects["ConfigMap"]["data"]["POSENC_MAX_INFLIGHT_BYTES"]) / 2**20
    assert _mib(resources["requests"]["memory"]) >= peak
    assert _mib(resources["limits"]["memory"]) >= peak + inflight
    assert _mib(resources["limits"]["memory"]) <= 4 * peak  # not sized blindly either
    assert "cpu" in resources["requests"]  # the HPA's CPU utilisation is relative to it


def test_gpu_variant_requests_a_gpu(objects: dict[str, dict]) -> None:
    variant = objects["Deployment"]["metadata"]["labels"]["posenc.dev/variant"]
    resources = container(objects)["resources"]
    if variant == "gpu":
        assert resources["limits"]["nvidia.com/gpu"] == "1"
        assert resources["requests"]["nvidia.com/gpu"] == "1"
        tolerations = pod(objects)["tolerations"]
        assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)
        assert objects["Deployment"]["metadata"]["namespace"] == "posenc-gpu"
    else:
        assert "nvidia.com/gpu" not in resources.get("limits", {})
        assert objects["Deployment"]["metadata"]["namespace"] == "posenc"


def test_service_hpa_and_pdb_select_the_deployment(objects: dict[str, dict]) -> None:
    deployment = objects["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = objects["Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == container(objects)["ports"][0]["name"]
    assert (
        objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    )
    hpa = objects["HorizontalPodAutoscaler"]
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert (
        hpa["spec"]["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    )
    namespaces = {o["metadata"]["namespace"] for o in objects.values()}
    assert len(namespaces) == 1
    assert all(
        o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "posenc" for o in objects.values()
    )


def test_hpa_metrics() -> None:
    cpu = rendered("cpu")["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert [m["type"] for m in cpu] == ["Resource"]
    assert cpu[0]["resource"]["name"] == "cpu"
    both = rendered("cpu", "hpa-inflight")["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert [m["type"] for m in both] == ["Resource", "Pods"]
    assert both[1]["pods"]["metric"]["name"] == "posenc_inflight_bytes"


def test_the_prerequisites_name_every_claim_and_secret_the_pods_need(
    objects: dict[str, dict],
) -> None:
    """A first `kubectl apply -k` left pods Pending or in CreateContainerConfigError: the
    docs' prerequisites list every PersistentVolumeClaim and Secret the manifests refer to
    but do not create, and the namespace of each overlay."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text.split("### Prerequisites", 1)[1].split("\n### ", 1)[0]
    spec = pod(objects)
    claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}  # fmt: skip
    secrets = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for c in spec["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    created = {(o["kind"], o["metadata"]["name"]) for o in objects.values()}
    needed = {("PersistentVolumeClaim", n) for n in claims} | {("Secret", n) for n in secrets}
    assert claims and secrets
    for kind, name in needed - created:
        assert f"`{name}`" in section, (kind, name)
    assert f"`{objects['Deployment']['metadata']['namespace']}`" in text
