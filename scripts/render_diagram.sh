#!/usr/bin/env bash
# Renders docs/pipeline.dot (the pipeline and the runtime, at the top of docs/DESIGN.md) to
# docs/pipeline.png with Graphviz, installing Debian's graphviz if it is missing. Run it after
# editing the .dot file, and commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
command -v dot >/dev/null 2>&1 || install_packages graphviz
dot -Tpng -Gdpi=110 docs/pipeline.dot -o docs/pipeline.png
echo "docs/pipeline.png: $(du -k docs/pipeline.png | cut -f1) KB"
