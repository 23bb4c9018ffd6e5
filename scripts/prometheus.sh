#!/usr/bin/env bash
# Start or stop a throwaway Prometheus on loopback for trainscope's
# end-to-end tests and for trying the dashboards locally.
#
#   scripts/prometheus.sh start [HOST:PORT ...]   scrape these targets every second
#                                                 (default 127.0.0.1:9464, profile-run's
#                                                 --metrics-addr default)
#   scripts/prometheus.sh stop                    stop it by pid and remove its data
#   scripts/prometheus.sh status
#
# start installs the Debian package "prometheus" when prometheus or promtool
# is missing (apt-get update first, no recommended packages, no service
# started by the install), writes a configuration, starts
#   prometheus --web.listen-address=127.0.0.1:9090 --storage.tsdb.path=<dir>/data
# and waits (bounded) until /-/ready answers. On success its only output
# on stdout is one line to eval:
#   export TRAINSCOPE_PROMETHEUS_URL=http://127.0.0.1:9090
# Progress goes to stderr.
#
# Environment:
#   TRAINSCOPE_PROMETHEUS_LISTEN  listen address (default 127.0.0.1:9090; loopback only)
#   TRAINSCOPE_PROMETHEUS_DIR     state directory: config, data, log, pid
#                                 (default ${TMPDIR:-/tmp}/trainscope-prometheus)
#   TRAINSCOPE_PROMETHEUS_WAIT    seconds to wait for readiness (default 60)
#   TRAINSCOPE_PROMETHEUS_INTERVAL  scrape interval and timeout (default 1s; a
#                                 Prometheus duration such as 5s)
#   TRAINSCOPE_PROMETHEUS_KEEP=1  stop keeps the state directory (data and log)
#   TRAINSCOPE_PROMETHEUS_FEATURES  comma-separated --enable-feature values
#                                 (default native-histograms,exemplar-storage:
#                                 scrape the protobuf format, store native
#                                 histograms and exemplars; empty for a server
#                                 with classic histograms and no exemplars)
set -euo pipefail

listen="${TRAINSCOPE_PROMETHEUS_LISTEN:-127.0.0.1:9090}"
dir="${TRAINSCOPE_PROMETHEUS_DIR:-${TMPDIR:-/tmp}/trainscope-prometheus}"
wait_s="${TRAINSCOPE_PROMETHEUS_WAIT:-60}"
interval="${TRAINSCOPE_PROMETHEUS_INTERVAL:-1s}"
pidfile="$dir/prometheus.pid"
features="${TRAINSCOPE_PROMETHEUS_FEATURES-native-histograms,exemplar-storage}"

service=prometheus
keep="${TRAINSCOPE_PROMETHEUS_KEEP:-}"
# shellcheck source=lib/service.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/service.sh"

is_loopback() {
	case "$1" in
	127.*:* | localhost:* | \[::1\]:*) return 0 ;;
	esac
	return 1
}

install_prometheus() {
	if command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v curl >/dev/null; then
		return
	fi
	[ "$(id -u)" = 0 ] || die "prometheus is not installed and installing needs root: apt-get install prometheus"
	say "installing the Debian package prometheus"
	# Keep the package's service from starting: policy-rc.d answering 101
	# is honoured by invoke-rc.d and deb-systemd-invoke. The recommended
	# prometheus-node-exporter is not installed (its service binds 0.0.0.0:9100).
	local policy=/usr/sbin/policy-rc.d ours=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		ours=1
	fi
	local rc=0
	{
		apt-get update &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus curl
	} >&2 || rc=$?
	[ -z "$ours" ] || rm -f "$policy"
	[ "$rc" = 0 ] || die "apt-get install prometheus failed (exit $rc)"
	# Should a service manager have started it anyway, stop it: it would
	# listen on 0.0.0.0:9090.
	if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
		say "stopping the prometheus system service the install started"
		systemctl stop prometheus >&2 || true
		systemctl disable prometheus >&2 || true
	fi
	if [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
		say "stopping the prometheus init script service the install started"
		/etc/init.d/prometheus stop >&2 || true
	fi
}

write_config() {
	local cfg="$dir/prometheus.yml" t
	{
		echo "# written by scripts/prometheus.sh"
		echo "global:"
		echo "  scrape_interval: $interval"
		echo "  scrape_timeout: $interval"
		echo "  evaluation_interval: 1s"
		echo "scrape_configs:"
		echo "  - job_name: trainscope"
		echo "    static_configs:"
		echo "      - targets:"
		for t in "$@"; do
			echo "          - '$t'"
		done
	} >"$cfg"
	promtool check config "$cfg" >&2 || die "promtool rejects $cfg"
}

start() {
	local targets=("$@") t pid
	[ ${#targets[@]} -gt 0 ] || targets=(127.0.0.1:9464)
	for t in "${targets[@]}"; do
		[[ "$t" =~ ^[A-Za-z0-9._-]+:[0-9]+$ || "$t" =~ ^\[[0-9a-fA-F:]+\]:[0-9]+$ ]] || die "scrape target $t is not HOST:PORT"
	done
	is_loopback "$listen" || die "TRAINSCOPE_PROMETHEUS_LISTEN=$listen is not a loopback address"
	[[ "$interval" =~ ^[0-9]+(ms|s|m)$ ]] || die "TRAINSCOPE_PROMETHEUS_INTERVAL=$interval is not a duration such as 1s"
	if pid="$(running)"; then
		die "already running (pid $pid, $dir); run: $0 stop"
	fi
	install_prometheus
	rm -rf "$dir/data"
	mkdir -p "$dir/data"
	write_config "${targets[@]}"
	local feature_flags=()
	[ -z "$features" ] || feature_flags=(--enable-feature="$features")
	say "starting prometheus on $listen, scraping ${targets[*]} every $interval, features: ${features:-none} ($dir)"
	nohup prometheus \
		"${feature_flags[@]}" \
		--config.file="$dir/prometheus.yml" \
		--storage.tsdb.path="$dir/data" \
		--web.listen-address="$listen" \
		--log.level=warn \
		>"$dir/prometheus.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$pidfile"
	local deadline=$((SECONDS + wait_s))
	until curl -fsS -o /dev/null --max-time 2 "http://$listen/-/ready" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$dir/prometheus.log" >&2 || true
			rm -f "$pidfile"
			die "prometheus exited during start-up (log above: $dir/prometheus.log)"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 20 "$dir/prometheus.log" >&2 || true
			stop
			die "prometheus was not ready on $listen within ${wait_s}s"
		fi
		sleep 0.2
	done
	say "ready (pid $pid)"
	echo "export TRAINSCOPE_PROMETHEUS_URL=http://$listen"
}

case "${1:-}" in
start)
	shift
	start "$@"
	;;
stop) stop ;;
status) status "$listen" ;;
*)
	echo "usage: $0 start [HOST:PORT ...] | stop | status" >&2
	exit 2
	;;
esac
