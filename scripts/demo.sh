#!/usr/bin/env bash
# Runs the LeNet-5 demo on a fresh machine: installs what is missing, builds, runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
exec "${PYTHON:-python3}" -m lazyfuse.demo
