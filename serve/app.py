"""``build_app(args) -> Application``: the whole service as one Serve application.

Named in Serve config files as ``import_path: serve.app:build_app`` (configs/serve-cpu.yaml,
configs/serve-gpu.yaml); ``args`` validates as :class:`serve.args.AppArgs`. The config tree is loaded
once here and handed to every deployment as plain data.

Deployments: ``MemoryAPI`` (FastAPI ingress) -> ``Embedder``, ``Admission`` (when
``admission.mode == 'classifier'``), ``Master`` -> an LLM pool; one ``LLMPool`` deployment per distinct
model of the roles (``models.assistant`` / ``master`` / ``summary``, ``serve.pool.pools``; roles that name
the same model share it). The stateful actors (tier shards, routers, assistants) are created by the ingress
on first use (``serve.topology``) and call their roles' pools too.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application

from core.config import EngramConfig, load_config
from serve.args import AppArgs, DeploymentArgs
from serve.deployments import AdmissionService, EmbedderService, MasterService
from serve.ingress import MemoryAPI, app
from serve.pool import LLMPool, pools


def _options(d: DeploymentArgs) -> dict[str, Any]:
    return {
        "num_replicas": d.num_replicas,
        "max_ongoing_requests": d.max_ongoing_requests,
        "ray_actor_options": {"num_cpus": d.num_cpus, "num_gpus": d.num_gpus, "resources": dict(d.resources)},
    }


def check_ready(config: EngramConfig) -> None:
    """Fail fast, before any replica starts, on what would only fail later inside one."""
    from core import model_store

    for engine, roles in pools(config).values():
        tuned = model_store.adapted(engine.model)
        if tuned is not None:
            model_store.adapter_file(tuned)  # raises ModelFileError, naming the retrain command, without its adapter
        model = model_store.known(tuned.base if tuned is not None else engine.model)
        if model is not None and model_store.state(model, engine.cache_dir) == "absent":
            raise FileNotFoundError(
                f"{'/'.join(roles)} role(s) use {model.name}, which is not in {model_store.store(engine.cache_dir)}: "
                f"fetch it once with `engram models fetch {model.name}` ({model.size / 2**30:.1f} GiB download)"
            )
    if config.admission.mode == "classifier":
        from inference.admission import configured_weights, require_weights

        require_weights(configured_weights(config), " or set admission.mode: store_all")
    if config.auth.required:
        from serve.auth import KeyStore

        keys = config.auth.keys_file
        if not KeyStore(keys).list():  # a corrupt file raises KeyFileError, naming it
            raise FileNotFoundError(
                f"auth.required is true but {keys} holds no API key, so every request would get a 401; make one "
                f"with `engram keys create --admin --keys-file {keys}` (or --tenant USER instead of --admin), or "
                "set auth.required: false on a private dev box"
            )


def build_app(args: AppArgs | dict[str, Any]) -> Application:
    args = AppArgs.model_validate(args)
    config = load_config(args.profile, args.config)
    check_ready(config)
    data = config.model_dump(mode="json")
    llms = [serve.deployment(LLMPool, name=name, **_options(args.llm_pools.get(roles[0], args.llm)))
            .bind(engine.model_dump(mode="json")) for name, (engine, roles) in pools(config).items()]
    embedder = serve.deployment(EmbedderService, name="Embedder", **_options(args.embedder)).bind(data)
    master = serve.deployment(MasterService, name="Master", **_options(args.master)).bind(data)
    admission = None
    if config.admission.mode == "classifier":
        admission = serve.deployment(AdmissionService, name="Admission", **_options(args.admission)).bind(data)
    ingress = serve.deployment(serve.ingress(app)(MemoryAPI), name="MemoryAPI", **_options(args.ingress))
    # NOTE: the LLM pools are bound into the graph through the ingress so that Serve deploys them; assistants and
    # the master reach them by name (serve.get_deployment_handle, in the application they run in: the replica
    # context names it), since actors are not part of the graph.
    return ingress.bind(data, embedder, master, admission, llms)
