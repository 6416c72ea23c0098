#!/usr/bin/env bash
# What the web page's browser test (scripts/browser_test.py) needs, installed where missing:
# headless Chromium and its WebDriver server, chromedriver (Debian: the `chromium` and
# `chromium-driver` packages), python3 (standard library only) and a font. Idempotent: a
# machine that has them is left as it is. Ubuntu ships Chromium only as a snap: install it
# and chromedriver by hand there, or point CHROMIUM / CHROMEDRIVER at any Chromium or Chrome
# and its matching driver.
set -euo pipefail
have() { [ -n "${2:-}" ] && [ -x "$2" ] || command -v "$1" >/dev/null; }

missing=()
have chromium "${CHROMIUM:-}" || have chromium-browser || have google-chrome || missing+=(chromium)
have chromedriver "${CHROMEDRIVER:-}" || missing+=(chromium-driver)
command -v python3 >/dev/null || missing+=(python3)
# A bare container has no fonts: the page's text would not render in the screenshots.
font="$(find /usr/share/fonts /usr/local/share/fonts -name '*.[ot]tf' -print -quit 2>/dev/null ||
  true)"
[ -n "$font" ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "error: the browser test needs ${missing[*]} (Chromium, chromedriver, python3, or" \
      "your distribution's equivalents; CHROMIUM and CHROMEDRIVER may name their paths)" >&2
    exit 1
  fi
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "error: the browser test needs ${missing[*]}: run this as root or install sudo" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "== installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
