# Helpers shared by scripts/jaeger.sh and scripts/prometheus.sh, which
# each run one throwaway server on loopback. Source it after setting
#   service  the server's command name (checked in /proc/PID/comm)
#   pidfile  where its pid is kept
#   dir      its state directory
#   keep     1 to keep the state directory when it stops
# shellcheck shell=bash

say() { echo "$service.sh: $*" >&2; }
die() {
	say "$*"
	exit 1
}

# running prints the pid of the server this script started, if it is still
# running; the command name is checked so a reused pid is not taken for it.
running() {
	[ -f "$pidfile" ] || return 1
	local pid
	pid="$(cat "$pidfile")"
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$service" ] || return 1
	echo "$pid"
}

# stop ends the server (SIGTERM, SIGKILL after 20 s) and removes its pid
# file and, unless keep is 1, its state directory.
stop() {
	local pid
	if pid="$(running)"; then
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + 20))
		while kill -0 "$pid" 2>/dev/null; do
			if [ "$SECONDS" -ge "$deadline" ]; then
				say "pid $pid did not stop on SIGTERM within 20s; sending SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.2
		done
		say "stopped (pid $pid)"
	else
		say "not running"
	fi
	rm -f "$pidfile"
	if [ "$keep" != 1 ]; then
		rm -rf "$dir"
	fi
}

# status says whether the server runs, where (the address given) and
# where its state is; it exits 1 when it does not run.
status() {
	local pid
	if pid="$(running)"; then
		say "running (pid $pid) on $1, state in $dir"
	else
		say "not running"
		exit 1
	fi
}
