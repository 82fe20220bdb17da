#!/usr/bin/env bash
# Runs every Fuzz target of the module for the given time each (default 3s).
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzztime=${1:-3s}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/ratewarden-fuzz.log 2>&1 || { cat /tmp/ratewarden-fuzz.log; exit 1; }
	done
done
