#!/usr/bin/env bash
# Run a weight image with its weights from the node's store: no unpack, no copy.
#
#   contrib/nerdctl/run-weight-image.sh REGISTRY/models/llama:8b busybox:latest REGISTRY/apps/llama:8b
#
# 1. builds a weight image (the base's layers plus a pointer layer naming the artifact at /models/llama),
# 2. pulls and runs it through the weightsnap snapshotter, printing the weights' sha256 digests
#    (the same as the artifact's, as `weightsnap inspect ARTIFACT` lists them).
# Needs weightsnapd serving and containerd configured with contrib/containerd/weightsnap.toml.
set -euo pipefail
artifact=${1:?artifact reference}; base=${2:?base image}; image=${3:?weight image reference}

weightsnap image build --base "$base" --weights "$artifact" --at /models/llama -t "$image"
nerdctl --snapshotter weightsnap run --rm "$image" sh -c 'sha256sum /models/llama/*'
