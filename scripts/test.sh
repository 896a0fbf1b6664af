#!/usr/bin/env bash
# The test command: set up (idempotent), lint, type-check, build the documentation site, then run the whole
# suite on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy  # the package, typed ([tool.mypy] in pyproject.toml)
# the documentation site: every page, link, anchor and API entry (mkdocs.yml); into a throw-away folder
site_dir=$(mktemp -d)
trap 'rm -rf "$site_dir"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"
trap - EXIT
exec .venv/bin/python -m pytest "$@"
