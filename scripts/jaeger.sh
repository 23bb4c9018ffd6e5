#!/usr/bin/env bash
# Start or stop a throwaway Jaeger v2 on loopback for trainscope's
# end-to-end tests and for looking at a run's spans locally.
#
#   scripts/jaeger.sh start    build .bin/jaeger if missing, start it, wait until it answers
#   scripts/jaeger.sh stop     stop it by pid and remove its state
#   scripts/jaeger.sh status
#
# Jaeger runs with its built-in all-in-one configuration (memory storage,
# at most 100000 traces; everything is lost when it stops). That
# configuration binds its receivers and extensions to
# ${JAEGER_LISTEN_HOST:-localhost}, which this script sets to 127.0.0.1,
# but its query service to all interfaces (:16686, :16685), so the
# script moves those to 127.0.0.1 with --set; it also turns off the query
# service's tracing of itself, whose spans would otherwise land in the same
# OTLP receiver and blur its counters. Ports: OTLP gRPC 4317, OTLP
# HTTP 4318, query HTTP (API and UI) 16686, query gRPC 16685, and the
# other receivers and extensions of that configuration (14250, 14268,
# 6831/udp, 6832/udp, 9411, 5778, 5779, 13132, 13133, 27777, 27778, and its own
# metrics on 8888).
#
# start builds the binary when it is missing, from the tools module
# tools/jaeger (go build -o .bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger,
# about 6 minutes on 2 cores; CI should cache .bin/jaeger), refuses to
# start when one of the TCP ports is taken, and waits (bounded) until the
# query API answers and both OTLP ports accept connections. On success its
# only output on stdout is lines to eval:
#   export TRAINSCOPE_JAEGER_QUERY=http://127.0.0.1:16686
#   export TRAINSCOPE_OTLP_GRPC=http://127.0.0.1:4317
#   export TRAINSCOPE_OTLP_HTTP=http://127.0.0.1:4318
#   export TRAINSCOPE_JAEGER_METRICS=http://127.0.0.1:8888/metrics
# Progress goes to stderr. The UI at http://127.0.0.1:16686 is a
# placeholder page in a binary built with go build (the UI assets are
# built separately by Jaeger's release process); the API works.
#
# Environment:
#   TRAINSCOPE_JAEGER_BIN    the binary (default <repo>/.bin/jaeger)
#   TRAINSCOPE_JAEGER_DIR    state directory: log, pid (default ${TMPDIR:-/tmp}/trainscope-jaeger)
#   TRAINSCOPE_JAEGER_WAIT   seconds to wait for readiness (default 60)
#   TRAINSCOPE_JAEGER_KEEP=1 stop keeps the state directory (the log)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TRAINSCOPE_JAEGER_BIN:-$root/.bin/jaeger}"
dir="${TRAINSCOPE_JAEGER_DIR:-${TMPDIR:-/tmp}/trainscope-jaeger}"
wait_s="${TRAINSCOPE_JAEGER_WAIT:-60}"
pidfile="$dir/jaeger.pid"
host=127.0.0.1
tcp_ports=(4317 4318 16686 16685 14250 14268 9411 5778 5779 13133 13132 27777 27778 8888)

service=jaeger
keep="${TRAINSCOPE_JAEGER_KEEP:-}"
# shellcheck source=lib/service.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/service.sh"

build() {
	[ -x "$bin" ] && return
	command -v go >/dev/null || die "$bin is missing and go is not installed to build it"
	say "building $bin from $root/tools/jaeger (takes minutes)"
	mkdir -p "$(dirname "$bin")"
	(cd "$root/tools/jaeger" && go build -o "$bin" github.com/jaegertracing/jaeger/cmd/jaeger) >&2 ||
		die "building jaeger failed"
}

# listening says whether something accepts TCP connections on host:port.
listening() {
	(exec 3<>"/dev/tcp/$host/$1") 2>/dev/null
}

start() {
	local pid p
	if pid="$(running)"; then
		die "already running (pid $pid, $dir); run: $0 stop"
	fi
	command -v curl >/dev/null || die "curl is needed to wait for jaeger"
	build
	for p in "${tcp_ports[@]}"; do
		if listening "$p"; then
			die "port $host:$p is already in use: another Jaeger or collector? (ss -ltnp 'sport = :$p')"
		fi
	done
	mkdir -p "$dir"
	say "starting $bin on $host ($dir)"
	JAEGER_LISTEN_HOST="$host" nohup "$bin" \
		--set "extensions.jaeger_query.http.endpoint=$host:16686" \
		--set "extensions.jaeger_query.grpc.endpoint=$host:16685" \
		--set "extensions.jaeger_query.enable_tracing=false" \
		>"$dir/jaeger.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$pidfile"
	local deadline=$((SECONDS + wait_s))
	until curl -fsS -o /dev/null --max-time 2 "http://$host:16686/api/services" 2>/dev/null &&
		listening 4317 && listening 4318; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$dir/jaeger.log" >&2 || true
			rm -f "$pidfile"
			die "jaeger exited during start-up (log above: $dir/jaeger.log)"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$dir/jaeger.log" >&2 || true
			stop
			die "jaeger was not ready within ${wait_s}s"
		fi
		sleep 0.2
	done
	say "ready (pid $pid)"
	echo "export TRAINSCOPE_JAEGER_QUERY=http://$host:16686"
	echo "export TRAINSCOPE_OTLP_GRPC=http://$host:4317"
	echo "export TRAINSCOPE_OTLP_HTTP=http://$host:4318"
	echo "export TRAINSCOPE_JAEGER_METRICS=http://$host:8888/metrics"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status "$host" ;;
*)
	echo "usage: $0 start | stop | status" >&2
	exit 2
	;;
esac
