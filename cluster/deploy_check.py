"""Offline checks of the deployment files, the way the real consumers would reject them.

- KubeRay manifests (``k8s/``) against the OpenAPI v3 schema of the KubeRay CRDs, read from
  ``data.kuberay_crds_path`` (never copied into the repository), with unknown fields rejected as the API
  server's strict field validation does (:func:`strict`), plus the house rules of :func:`manifest_rules`.
- ``ray up`` cluster files (``cluster/ray-up/``) against ``ray-schema.json`` inside the ray package, then
  Ray's own config filling (``prepare_config``: the provider's ``defaults.yaml``, merged setup commands,
  per-node-type worker bounds) and ``validate_config``, plus :func:`ray_up_rules`. Nothing reaches a cloud:
  ``bootstrap_config`` (credentials, instance-type lookups) is never called.

Every check returns a list of error strings; empty means the file passed.

    python -m cluster.deploy_check        # every file under k8s/ and cluster/ray-up/; OK or errors; exit 1 on any
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
CRD_FILES = {
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayService": "ray.io_rayservices.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
}
API_VERSION = "ray.io/v1"
GPU = "nvidia.com/gpu"
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "definitions")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SUBSCHEMAS = ("additionalProperties", "items", "not")

# NOTE: the CRD files are large, and libyaml (when PyYAML has it) parses them far faster than the Python loader
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --- KubeRay manifests ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _crd_schema(path: str, version: str) -> dict[str, Any]:
    crd = yaml.load(Path(path).read_text(), Loader=_Loader)
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise ValueError(f"{path}: no version {version!r} (has {[v['name'] for v in crd['spec']['versions']]})")


def load_crd_schema(crds_dir: str | Path, kind: str, version: str = "v1") -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``kind`` (RayCluster, RayService, RayJob) at ``version`` from the KubeRay CRD
    file in ``crds_dir``. Cached and shared between callers: treat it as read-only (:func:`strict` copies)."""
    if kind not in CRD_FILES:
        raise ValueError(f"no KubeRay CRD for kind {kind!r} (known: {sorted(CRD_FILES)})")
    path = Path(crds_dir) / CRD_FILES[kind]
    if not path.is_file():
        raise FileNotFoundError(f"KubeRay CRD file not found: {path} (set ENGRAM_DATA__KUBERAY_CRDS_PATH)")
    return _crd_schema(str(path.resolve()), version)


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of an OpenAPI v3 schema (as CRDs carry it) that JSON Schema validators apply like the API server.

    - An object schema with ``properties`` and neither ``additionalProperties`` nor
      ``x-kubernetes-preserve-unknown-fields: true`` gets ``additionalProperties: false`` (unknown fields
      are rejected, as by ``kubectl apply --validate=strict``).
    - ``x-kubernetes-int-or-string: true`` becomes ``anyOf: [integer, string]`` when no ``anyOf`` says so.
    - ``nullable: true`` adds ``"null"`` to the ``type``.

    >>> strict({"type": "object", "properties": {"a": {"type": "string"}}})["additionalProperties"]
    False
    """
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: strict(sub) for name, sub in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [strict(sub) for sub in out[key]]
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
        elif key == "items" and isinstance(out.get(key), list):
            out[key] = [strict(sub) for sub in out[key]]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out and "oneOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@functools.lru_cache(maxsize=8)
def _validator(crds_dir: str, kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(load_crd_schema(crds_dir, kind)))


def _where(path: Iterable[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top level)"


def validate_manifest(manifest: Any, crds_dir: str | Path) -> list[str]:
    """Errors of a KubeRay manifest (``apiVersion: ray.io/v1``) against its kind's CRD schema, unknown fields
    included; ``[]`` when it validates."""
    if not isinstance(manifest, dict):
        return [f"manifest must be a mapping, not {type(manifest).__name__}"]
    if manifest.get("apiVersion") != API_VERSION:
        return [f"apiVersion must be {API_VERSION!r}, not {manifest.get('apiVersion')!r}"]
    kind = manifest.get("kind")
    if kind not in CRD_FILES:
        return [f"kind {kind!r} has no KubeRay CRD (known: {sorted(CRD_FILES)})"]
    validator = _validator(str(Path(crds_dir).resolve()), kind)
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where(e.absolute_path)}: {e.message}" for e in errors]


def image_tag(image: str) -> str | None:
    """The tag of an image reference.

    >>> image_tag("registry:5000/team/engram-cluster:2.60.0-py311-gpu")
    '2.60.0-py311-gpu'
    """
    name = image.rsplit("/", 1)[-1].split("@", 1)[0]
    return name.split(":", 1)[1] if ":" in name else None


def tag_matches(tag: str | None, ray_version: str) -> bool:
    """True when an image tag is the Ray version or starts with it and a dash (``2.60.0``, ``2.60.0-py311-gpu``)."""
    return tag is not None and (tag == ray_version or tag.startswith(ray_version + "-"))


def cluster_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster spec inside a RayCluster, RayService or RayJob manifest."""
    spec = manifest.get("spec") or {}
    kind = manifest.get("kind")
    if kind == "RayService":
        return spec.get("rayClusterConfig") or {}
    if kind == "RayJob":
        return spec.get("rayClusterSpec") or {}
    return spec


def node_groups(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, group spec) of the head ("head") and each worker group of a KubeRay manifest."""
    spec = cluster_spec(manifest)
    if "headGroupSpec" in spec:
        yield "head", spec["headGroupSpec"]
    for group in spec.get("workerGroupSpecs") or []:
        yield group.get("groupName", "?"), group


def _containers(group: dict[str, Any]) -> list[dict[str, Any]]:
    return ((group.get("template") or {}).get("spec") or {}).get("containers") or []


def manifest_rules(manifest: dict[str, Any], serve_configs: dict[str, Any] | None = None) -> list[str]:
    """House rules (STYLE.md, "Deployment files") a schema cannot say; ``[]`` when all hold.

    Image tags start with ``rayVersion``; the head starts with ``num-cpus: "0"``; GPU requests equal limits and
    some worker group has GPUs; token auth is on (``authOptions.mode`` and ``RAY_AUTH_MODE``) and
    ``RAY_AUTH_TOKEN`` comes from a Secret (``secretKeyRef``), never a literal. A RayService's ``serveConfigV2``
    must parse and, when ``serve_configs`` ({name: parsed Serve config file}) is given, equal one of them.
    """
    errors: list[str] = []
    spec = cluster_spec(manifest)
    version = spec.get("rayVersion")
    if not version:
        errors.append("rayVersion is not set")
    if (spec.get("authOptions") or {}).get("mode") != "token":
        errors.append("authOptions.mode must be 'token' (production keeps Ray's token auth on)")
    gpu_groups = 0
    for name, group in node_groups(manifest):
        if name == "head" and (group.get("rayStartParams") or {}).get("num-cpus") != "0":
            errors.append('head: rayStartParams must set num-cpus: "0" (no replicas or actors on the head)')
        for c in _containers(group):
            where = f"{name}/{c.get('name')}"
            if version and not tag_matches(image_tag(c.get("image", "")), version):
                errors.append(f"{where}: image {c.get('image')!r} has no tag starting with rayVersion {version}")
            resources = c.get("resources") or {}
            limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
            if GPU in limits or GPU in requests:
                gpu_groups += int(name != "head")
                want, got = limits.get(GPU), requests.get(GPU)
                if str(want) != str(got):
                    errors.append(f"{where}: {GPU} requests ({got}) must equal limits ({want})")
            env = {e.get("name"): e for e in c.get("env") or []}
            if (env.get("RAY_AUTH_MODE") or {}).get("value") != "token":
                errors.append(f"{where}: env RAY_AUTH_MODE must be 'token'")
            token = env.get("RAY_AUTH_TOKEN") or {}
            if "value" in token or not (token.get("valueFrom") or {}).get("secretKeyRef"):
                errors.append(f"{where}: env RAY_AUTH_TOKEN must come from a Secret (valueFrom.secretKeyRef)")
    if gpu_groups == 0:
        errors.append(f"no worker group requests {GPU}")
    if manifest.get("kind") == "RayService":
        try:
            serve = yaml.safe_load(manifest["spec"]["serveConfigV2"])
        except (KeyError, TypeError, yaml.YAMLError) as e:
            return [*errors, f"spec.serveConfigV2 must be a YAML string: {e}"]
        if serve_configs is not None and serve not in serve_configs.values():
            errors.append(f"spec.serveConfigV2 equals none of {sorted(serve_configs)}")
    return errors


# --- ray up cluster files ---------------------------------------------------------------------------------


def ray_schema() -> dict[str, Any]:
    """``ray/autoscaler/ray-schema.json`` of the installed ray package (what ``ray up`` validates against)."""
    import ray

    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def fill_ray_up(config: dict[str, Any]) -> dict[str, Any]:
    """Ray's own filling of a cluster config, offline: ``prepare_config`` (the provider's ``defaults.yaml``
    under the file's keys, common setup commands merged into head/worker ones, Docker settings checked,
    per-node-type ``min_workers``/``max_workers``), then ``validate_config`` (schema again, ``head_node_type``,
    the sum of ``min_workers`` against ``max_workers``). ``ray up`` does the same before ``bootstrap_config``,
    which needs cloud credentials and is not called. Raises what Ray raises."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    logger = logging.getLogger("ray.autoscaler._private.util")
    level = logger.level
    logger.setLevel(logging.WARNING)  # NOTE: prepare_config logs one INFO line per node type
    try:
        filled = prepare_config(copy.deepcopy(config))
        validate_config(filled)
    finally:
        logger.setLevel(level)
    return filled


_AUTH_MODE = re.compile(r"\bRAY_AUTH_MODE=(\S+?);?(?=\s|$)")


def ray_up_rules(config: dict[str, Any], ray_version: str) -> list[str]:
    """House rules for ``ray up`` files: every ``ray start`` sets the same ``RAY_AUTH_MODE``, and it is
    ``token``; the Docker image's tag starts with the installed Ray version."""
    errors: list[str] = []
    modes = set()
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        for cmd in config.get(key) or []:
            if "ray start" not in cmd:
                continue
            found = [shlex.split(m)[0] for m in _AUTH_MODE.findall(cmd)]
            if not found:
                errors.append(f"{key}: `ray start` without RAY_AUTH_MODE=... in the same command")
            modes.update(found)
    if len(modes) > 1:
        errors.append(f"RAY_AUTH_MODE differs between start commands: {sorted(modes)}")
    elif modes and modes != {"token"}:
        errors.append(f"RAY_AUTH_MODE is {modes.pop()!r}; production keeps token auth on")
    docker = config.get("docker") or {}
    for key in ("image", "head_image", "worker_image"):
        if key in docker and not tag_matches(image_tag(docker[key]), ray_version):
            errors.append(f"docker.{key} {docker[key]!r} has no tag starting with Ray {ray_version}")
    return errors


def validate_ray_up(path: str | Path) -> list[str]:
    """Errors of a ``ray up`` cluster file: Ray's JSON schema, Ray's config filling and validation
    (:func:`fill_ray_up`) and :func:`ray_up_rules`; ``[]`` when it passes."""
    import ray

    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        return [f"cannot read: {e}"]
    if not isinstance(config, dict):
        return ["top level must be a mapping"]
    validator = jsonschema.Draft7Validator(ray_schema())
    errors = [f"schema: {_where(e.absolute_path)}: {e.message}" for e in validator.iter_errors(config)]
    if errors:
        return errors  # Ray's filling assumes a schema-valid file
    try:
        fill_ray_up(config)
    except (ValueError, RuntimeError, KeyError, AssertionError, NotImplementedError, jsonschema.ValidationError) as e:
        errors.append(f"ray: {type(e).__name__}: {e}")
    return errors + ray_up_rules(config, ray.__version__)


# --- command line -----------------------------------------------------------------------------------------


def _serve_configs(configs_dir: Path) -> dict[str, Any]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(configs_dir.glob("serve*.yaml"))}


def check_all(root: Path, crds_dir: Path) -> dict[str, list[str]]:
    """{file (document): errors} for every YAML file under ``root/k8s`` and ``root/cluster/ray-up``."""
    results: dict[str, list[str]] = {}
    serve_configs = _serve_configs(root / "configs")
    for path in sorted((root / "k8s").glob("*.y*ml")):
        name = str(path.relative_to(root))
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as e:
            results[name] = [f"YAML: {e}"]
            continue
        for i, doc in enumerate(docs):
            key = name if len(docs) == 1 else f"{name} (document {i + 1})"
            errors = validate_manifest(doc, crds_dir)
            results[key] = errors or manifest_rules(doc, serve_configs)
    for path in sorted((root / "cluster" / "ray-up").glob("*.y*ml")):
        results[str(path.relative_to(root))] = validate_ray_up(path)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.deploy_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--crds", type=Path, default=None, help="KubeRay CRD folder (default: data.kuberay_crds_path)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    crds = args.crds
    if crds is None:
        from core.config import load_config

        crds = load_config().data.kuberay_crds_path
    if not Path(crds).is_dir():
        print(f"KubeRay CRD folder not found: {crds} (set ENGRAM_DATA__KUBERAY_CRDS_PATH or --crds)")
        return 1
    results = check_all(args.root, Path(crds))
    for name, errors in results.items():
        print(f"{'OK  ' if not errors else 'FAIL'} {name}")
        for error in errors:
            print(f"     {error}")
    failed = sum(bool(e) for e in results.values())
    print(f"{len(results)} checked, {failed} failed" if results else "no deployment files found")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
