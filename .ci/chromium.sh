#!/usr/bin/env bash
# Install Chromium from the Debian packages for the browser test (tests/test_ui_browser.py drives
# the MLflow UI through Playwright with this browser; Playwright's own browser download is not used).
# Prints the browser's path on its last line, or nothing when it cannot be installed: the test
# then skips and says why. Idempotent.
set -uo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v chromium >/dev/null 2>&1; then
  { $SUDO apt-get update -q >/dev/null \
    && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null; } \
    || echo "chromium could not be installed: the browser test will be skipped" >&2
fi
command -v chromium || true
