#!/usr/bin/env bash
# Builds the release binaries of a tagged commit:
#   git tag v0.3.0 && scripts/release.sh v0.3.0
# writes dist/lem-v0.3.0-linux-amd64, dist/lem-v0.3.0-linux-arm64 and
# dist/SHA256SUMS (DIST=DIR writes them elsewhere). Both are CGO_ENABLED=0
# builds (no C toolchain); they link only glibc's dynamic loader, which lem
# uses to open the NVIDIA driver and NVRTC at run time. The arm64 binary
# runs the pure-Go CPU kernels (the assembly kernels are amd64 only); its
# CUDA path is the same code, untested on arm64 hosts.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release.sh VERSION (a tag such as v0.3.0)}
if [[ -z ${LEM_RELEASE_ANY:-} ]]; then
  [[ -z $(git status --porcelain --untracked-files=no) ]] || { echo "release: the work tree has changes" >&2; exit 1; }
  [[ $(git describe --tags --exact-match 2>/dev/null) == "$version" ]] || { echo "release: HEAD is not tagged $version" >&2; exit 1; }
fi
dist=${DIST:-dist}
mkdir -p "$dist"
for arch in amd64 arm64; do
  out=$dist/lem-$version-linux-$arch
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=true \
    -ldflags "-s -w -X main.version=$version" -o "$out" ./cmd/lem
  echo "built $out"
done
(cd "$dist" && sha256sum lem-$version-linux-* > SHA256SUMS && cat SHA256SUMS)
