#!/usr/bin/env bash
# Run staticcheck on the main module.
#
#   scripts/staticcheck.sh [staticcheck flags] [packages]    (default ./...)
#
# The exit status is staticcheck's: 0 when it finds nothing.
#
# The binary is built from the tools module tools/staticcheck (its own
# go.mod pins honnef.co/go/tools, so staticcheck's dependencies stay out of
# ours) into .bin/staticcheck when it is missing or stale: built by another
# Go toolchain than the one on PATH (staticcheck must understand the Go
# version the code is written in), or from another staticcheck version
# than tools/staticcheck/go.mod names. Building takes about a minute on
# 2 cores; CI should cache .bin/staticcheck. Build progress goes to stderr.
#
# Environment:
#   TRAINSCOPE_STATICCHECK_BIN   the binary (default <repo>/.bin/staticcheck)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TRAINSCOPE_STATICCHECK_BIN:-$root/.bin/staticcheck}"
tools="$root/tools/staticcheck"
module=honnef.co/go/tools

say() { echo "staticcheck.sh: $*" >&2; }
die() { say "$*"; exit 2; }

command -v go >/dev/null || die "go is not installed"

# fresh says whether $bin was built by the go on PATH from the staticcheck
# version the tools module pins. go version -m reads both from the binary:
# its first line ends in the toolchain, and a "mod" line names the module of
# the command (a "dep" line each other module).
fresh() {
	[ -x "$bin" ] || return 1
	local info want_go want_mod
	info="$(go version -m "$bin" 2>/dev/null)" || return 1
	want_go="$(go env GOVERSION)"
	want_mod="$(cd "$tools" && go list -m -f '{{.Version}}' "$module")"
	[ "$(head -n 1 <<<"$info" | awk '{print $2}')" = "$want_go" ] || return 1
	awk -v m="$module" -v v="$want_mod" '($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { found = 1 } END { exit !found }' <<<"$info"
}

if ! fresh; then
	say "building $bin from $tools"
	mkdir -p "$(dirname "$bin")"
	(cd "$tools" && go build -o "$bin" "$module/cmd/staticcheck") >&2 ||
		die "building staticcheck failed"
fi

cd "$root"
if [ "$#" -eq 0 ]; then
	set -- ./...
fi
exec "$bin" "$@"
