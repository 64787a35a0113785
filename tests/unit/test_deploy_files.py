"""The deployment files validate as their consumers would take them, without a cluster, a cloud or Ray running.

KubeRay manifests against the CRD schemas in ``data.kuberay_crds_path`` (unknown fields rejected), ``ray up``
files against Ray's own schema and config filling, Serve config files against ``AppArgs`` and the config tree,
and the house rules of STYLE.md ("Deployment files").
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from cluster import deploy_check as dc
from core.config import REPO_ROOT, load_config
from serve.args import AppArgs

K8S = REPO_ROOT / "k8s"
RAY_UP = REPO_ROOT / "cluster" / "ray-up"
CONFIGS = REPO_ROOT / "configs"
MANIFESTS = ["rayservice.yaml", "raycluster.yaml"]
RAY_UP_FILES = ["aws-gpu.yaml", "gcp-gpu.yaml"]


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def crds_dir() -> Path:
    path = Path(load_config().data.kuberay_crds_path)
    if not path.is_dir():
        pytest.skip(f"KubeRay CRDs not found at {path} (data.kuberay_crds_path; ENGRAM_DATA__KUBERAY_CRDS_PATH)")
    return path


@pytest.fixture(scope="module")
def rayservice() -> dict:
    return _yaml(K8S / "rayservice.yaml")


def _serve_args(name: str) -> AppArgs:
    (app,) = _yaml(CONFIGS / name)["applications"]
    return AppArgs.model_validate(app["args"])


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


# --- config profile and Serve config files -----------------------------------------------------------------


def test_gpu_profile_validates_with_the_papers_settings():
    cfg = load_config("gpu")
    assert cfg.profile == "gpu"
    assert (cfg.embedder.model, cfg.embedder.device) == ("intfloat/e5-large-v2", "cuda")
    assert (cfg.embedder.query_prefix, cfg.embedder.passage_prefix) == ("query: ", "passage: ")
    assert cfg.tiers.gate.similarity_threshold == 0.84
    assert cfg.tiers.rerank.kind == "cross_encoder" and cfg.tiers.rerank.device == "cuda"
    assert cfg.tiers.rerank.model == "cross-encoder/ms-marco-MiniLM-L-6-v2"
    assert (cfg.engine.backend, cfg.engine.dtype, cfg.engine.max_model_len) == ("vllm", "bfloat16", 8192)
    assert {cfg.model_for(role) for role in ("assistant", "master", "summary")} == {"qwen2.5-coder-1.5b"}
    assert cfg.episodic.segment_tokens == 4096 <= cfg.engine.max_model_len
    assert (cfg.cluster.tier_shards, cfg.cluster.assistant_actors, cfg.cluster.router_shards) == (8, 8, 2)


@pytest.mark.parametrize("name, profile", [("serve-cpu.yaml", "cpu"), ("serve-cpu-quality.yaml", "cpu-quality"),
                                           ("serve-gpu.yaml", "gpu")])
def test_serve_config_args_validate(name, profile):
    config = _yaml(CONFIGS / name)
    (app,) = config["applications"]
    assert app["import_path"] == "serve.app:build_app" and app["route_prefix"] == "/"
    args = AppArgs.model_validate(app["args"])  # extra="forbid": a misspelled deployment field fails here
    assert args.profile == profile
    cfg = load_config(args.profile, args.config)
    assert cfg.profile == profile


def test_serve_gpu_is_cluster_facing():
    config = _yaml(CONFIGS / "serve-gpu.yaml")
    assert config["proxy_location"] == "EveryNode"
    assert config["http_options"]["host"] == "0.0.0.0"
    args = _serve_args("serve-gpu.yaml")
    assert args.llm.num_gpus == 1 and args.llm.num_replicas >= 2
    assert args.ingress.num_replicas == 2


def _demand(args: AppArgs) -> tuple[float, list[float]]:
    """(CPUs, GPU shares per replica) the Serve application and the config's actors reserve."""
    deployments = [args.ingress, args.embedder, args.admission, args.llm, args.master]
    cfg = load_config(args.profile, args.config).cluster
    actors = cfg.tier_shards + cfg.assistant_actors + cfg.router_shards
    cpus = sum(d.num_replicas * d.num_cpus for d in deployments) + actors * cfg.actor_num_cpus
    return cpus, [d.num_gpus for d in deployments for _ in range(d.num_replicas) if d.num_gpus]


def _fits(cpus: float, gpu_shares: list[float], nodes: int, cpus_per_node: float, gpus_per_node: int) -> bool:
    """Whole-GPU replicas take a GPU each; fractional shares pack into the GPUs left (first fit)."""
    whole = sum(1 for g in gpu_shares if g >= 1)
    free = [1.0] * (nodes * gpus_per_node - whole)
    for share in sorted((g for g in gpu_shares if g < 1), reverse=True):
        slot = next((i for i, f in enumerate(free) if f >= share - 1e-9), None)
        if slot is None:
            return False
        free[slot] -= share
    return whole <= nodes * gpus_per_node and cpus <= nodes * cpus_per_node


def test_serve_gpu_fits_the_minimum_clusters(rayservice):
    cpus, gpus = _demand(_serve_args("serve-gpu.yaml"))
    assert gpus and not _fits(cpus, gpus, nodes=2, cpus_per_node=64, gpus_per_node=1)  # the check can fail
    (worker,) = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    limits = _containers(worker)[0]["resources"]["limits"]
    assert _fits(cpus, gpus, worker["minReplicas"], float(limits["cpu"]), int(limits[dc.GPU]))
    for name in RAY_UP_FILES:
        config = _yaml(RAY_UP / name)
        head = config["available_node_types"][config["head_node_type"]]
        assert head["resources"] == {"CPU": 0}
        (node,) = [t for k, t in config["available_node_types"].items() if k != config["head_node_type"]]
        assert _fits(cpus, gpus, node["min_workers"], node["resources"]["CPU"], node["resources"]["GPU"]), name


# --- KubeRay manifests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MANIFESTS)
def test_kuberay_manifest_validates_against_crd(name, crds_dir):
    manifest = _yaml(K8S / name)
    assert manifest["apiVersion"] == "ray.io/v1"
    assert dc.validate_manifest(manifest, crds_dir) == []
    assert dc.manifest_rules(manifest, dc._serve_configs(CONFIGS)) == []


@pytest.mark.parametrize(
    "mutate, unexpected",
    [
        (lambda s: s["headGroupSpec"].__setitem__("rayStartParam", s["headGroupSpec"].pop("rayStartParams")),
         "rayStartParam"),
        (lambda s: s["workerGroupSpecs"][0].__setitem__("minReplica", 1), "minReplica"),
        (lambda s: _containers(s["headGroupSpec"])[0].__setitem__("imagePullPolicyy", "Always"), "imagePullPolicyy"),
        (lambda s: _containers(s["workerGroupSpecs"][0])[0]["env"][1]["valueFrom"].__setitem__("secretRef", {}),
         "secretRef"),
    ],
)
def test_misspelled_field_is_rejected(rayservice, crds_dir, mutate, unexpected):
    manifest = copy.deepcopy(rayservice)
    mutate(manifest["spec"]["rayClusterConfig"])
    errors = dc.validate_manifest(manifest, crds_dir)
    assert len(errors) == 1 and f"'{unexpected}' was unexpected" in errors[0]


def test_wrong_types_are_rejected(rayservice, crds_dir):
    manifest = copy.deepcopy(rayservice)
    spec = manifest["spec"]["rayClusterConfig"]
    spec["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # rayStartParams values are strings
    _containers(spec["workerGroupSpecs"][0])[0]["resources"]["limits"]["memory"] = "24 GiB"  # not a quantity
    errors = dc.validate_manifest(manifest, crds_dir)
    assert any("num-cpus: 0 is not of type 'string'" in e for e in errors)
    assert any("limits.memory: '24 GiB' does not match" in e for e in errors)
    assert dc.validate_manifest({**manifest, "apiVersion": "ray.io/v1alpha1"}, crds_dir)


def test_strict_rejects_unknown_fields_but_keeps_open_maps():
    schema = dc.strict({
        "type": "object",
        "properties": {
            "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
            "maybe": {"type": "string", "nullable": True},
        },
    })
    ok = {"limits": {"cpu": 4, "memory": "1Gi"}, "free": {"a": 1, "b": 2}, "items": [{"n": "x"}], "maybe": None}
    jsonschema.validate(ok, schema)
    for bad in ({"extra": 1}, {"items": [{"m": "x"}]}, {"limits": {"cpu": 1.5}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_rayservice_serve_config_equals_serve_gpu(rayservice):
    assert yaml.safe_load(rayservice["spec"]["serveConfigV2"]) == _yaml(CONFIGS / "serve-gpu.yaml")


@pytest.mark.parametrize("name", MANIFESTS)
def test_kuberay_house_rules(name):
    manifest = _yaml(K8S / name)
    spec = dc.cluster_spec(manifest)
    assert spec["rayVersion"] == ray.__version__
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert spec["authOptions"]["mode"] == "token"
    gpu_groups = 0
    for _, group in dc.node_groups(manifest):
        for c in _containers(group):
            assert dc.image_tag(c["image"]).split("-")[0] == spec["rayVersion"]
            res = c["resources"]
            if dc.GPU in res["limits"]:
                gpu_groups += 1
                assert res["requests"][dc.GPU] == res["limits"][dc.GPU]
            env = {e["name"]: e for e in c["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == spec["authOptions"]["secretName"]
    assert gpu_groups >= 1


def test_house_rules_catch_violations(rayservice):
    manifest = copy.deepcopy(rayservice)
    spec = manifest["spec"]["rayClusterConfig"]
    spec["headGroupSpec"]["rayStartParams"].pop("num-cpus")
    worker = _containers(spec["workerGroupSpecs"][0])[0]
    worker["image"] = "engram-cluster:2.59.0-py311-gpu"
    worker["resources"]["requests"][dc.GPU] = "2"
    worker["env"][1] = {"name": "RAY_AUTH_TOKEN", "value": "literal"}
    manifest["spec"]["serveConfigV2"] = "applications: []\n"
    errors = "\n".join(dc.manifest_rules(manifest, dc._serve_configs(CONFIGS)))
    for expected in ("num-cpus", "2.59.0", "requests (2) must equal limits (1)", "secretKeyRef", "serveConfigV2"):
        assert expected in errors


def test_image_built_from_the_ray_image_of_the_same_version(rayservice):
    (base,) = re.findall(r"^FROM\s+(\S+)", (REPO_ROOT / "docker" / "gpu.Dockerfile").read_text(), re.M)
    assert dc.tag_matches(dc.image_tag(base), ray.__version__)
    images = {c["image"] for _, g in dc.node_groups(rayservice) for c in _containers(g)}
    assert {dc.image_tag(i) for i in images} == {dc.image_tag(base)}
    assert {_yaml(RAY_UP / n)["docker"]["image"] for n in RAY_UP_FILES} == {base}


# --- ray up cluster files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RAY_UP_FILES)
def test_ray_up_file_validates(name):
    path = RAY_UP / name
    config = _yaml(path)
    jsonschema.validate(config, dc.ray_schema())  # the schema inside the ray package
    assert dc.validate_ray_up(path) == []  # schema + Ray's prepare_config/validate_config + house rules
    filled = dc.fill_ray_up(config)
    head = filled["available_node_types"][filled["head_node_type"]]
    assert (head["min_workers"], head["max_workers"]) == (0, 0)  # filled in by Ray
    assert filled["head_setup_commands"][: len(config["setup_commands"])] == config["setup_commands"]
    assert filled["worker_setup_commands"] == config["setup_commands"]


@pytest.mark.parametrize("name", RAY_UP_FILES)
def test_ray_up_file_starts_the_project(name):
    config = _yaml(RAY_UP / name)
    assert config["file_mounts"]["~/engram"] == "."
    assert config["setup_commands"] == ["bash ~/engram/install-gpu.sh"]
    assert any("--num-cpus=0" in c for c in config["head_start_ray_commands"])
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in config[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token" in c for c in starts)
    assert "serve deploy configs/serve-gpu.yaml" in (RAY_UP / name).read_text()


def test_install_script_parses():
    subprocess.run(["bash", "-n", str(REPO_ROOT / "install-gpu.sh")], check=True)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c.__setitem__("head_start_ray_command", c.pop("head_start_ray_commands")),
         "'head_start_ray_command' was unexpected"),
        (lambda c: c["available_node_types"]["gpu_worker"]["resources"].__setitem__("GPU", 0.5), "is not of type"),
        (lambda c: c.__setitem__("head_node_type", "ray.head.default"), "ray: ValueError"),  # Ray's validate_config
        (lambda c: c.__setitem__("max_workers", 1), "ray: ValueError"),  # sum of min_workers > max_workers
        (lambda c: c["worker_start_ray_commands"].__setitem__(1, c["worker_start_ray_commands"][1].replace(
            "RAY_AUTH_MODE=token", "RAY_AUTH_MODE=disabled")), "RAY_AUTH_MODE differs"),
        (lambda c: c["docker"].__setitem__("image", "rayproject/ray:2.59.0-py311-gpu"), "no tag starting with Ray"),
    ],
)
def test_ray_up_errors_are_caught(tmp_path, mutate, expected):
    config = _yaml(RAY_UP / "aws-gpu.yaml")
    mutate(config)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    errors = dc.validate_ray_up(path)
    assert any(expected in e for e in errors), errors


# --- the command ------------------------------------------------------------------------------------------


def test_cli_checks_every_file(crds_dir, capsys):
    assert dc.main(["--crds", str(crds_dir)]) == 0
    out = capsys.readouterr().out
    for name in [f"k8s/{m}" for m in MANIFESTS] + [f"cluster/ray-up/{r}" for r in RAY_UP_FILES]:
        assert f"OK   {name}" in out


def test_cli_fails_on_a_bad_manifest(crds_dir, rayservice, tmp_path, capsys):
    bad = copy.deepcopy(rayservice)
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["rayStartParam"] = {}
    (tmp_path / "k8s").mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "k8s" / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert dc.main(["--crds", str(crds_dir), "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL k8s/bad.yaml" in out and "'rayStartParam' was unexpected" in out
    assert out.count("FAIL") == 1
