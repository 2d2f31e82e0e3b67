#!/usr/bin/env bash
# Before `npm test`: the one system program the tests need beyond Node and g++ is headless Chromium, which
# renders the HTML report (harness/test/browser.ts). On a fresh Debian machine as root it is installed from
# Debian's archive; elsewhere this says what to install. The tool itself never needs it.
set -euo pipefail
for c in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
  if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test prerequisites: installing Debian's chromium for the HTML report tests" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  exit 0
fi
echo "test prerequisites: headless Chromium is missing; install it (Debian: sudo apt-get install chromium) or set CHROMIUM=/path/to/chrome" >&2
exit 1
