# The image of k8s/rayservice.yaml and k8s/raycluster.yaml: Ray's GPU image plus this project's GPU stack.
# Its tag starts with the Ray version (KubeRay's rayVersion). From the repository root:
#   docker build -f docker/gpu.Dockerfile -t <registry>/engram-cluster:2.60.0-py311-gpu .
FROM rayproject/ray:2.60.0-py311-gpu
COPY --chown=ray:users . /home/ray/engram
WORKDIR /home/ray/engram
# the model cache is the pods' volume (k8s/: /home/ray/.cache): the model is fetched onto it (docs/deploy.md)
RUN ENGRAM_SKIP_MODEL_FETCH=1 bash install-gpu.sh
