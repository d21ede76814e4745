#!/usr/bin/env bash
# bench-cluster.sh runs cmd/reprise-bench with reprise journalling on a
# 3-node NATS JetStream cluster on loopback, with 3 replicas (R3).
#
#   deploy/bench-cluster.sh [reprise-bench flags...]
#   deploy/bench-cluster.sh --short --only ttft,resume     # a smoke run
#   deploy/bench-cluster.sh > bench-r3.md                  # the full run
#
# It builds nats-server at the version go.mod pins (from the module cache,
# or through the Go module proxy) and reprise-bench into a temporary
# directory, starts three nats-server processes (each with its own store
# directory there), waits until every node sees the same JetStream meta
# leader and reports healthy, then runs
#
#   reprise-bench --nats nats://127.0.0.1:P1,...,P3 --journal-replicas 3 "$@"
#
# and prints its report on standard output (this script's messages and the
# bench's progress go to standard error). On exit, however it ends, it stops
# the three servers and removes the temporary directory. The exit status is
# the benchmark's. See docs/scaling.md, "Measuring on a 3-node cluster".
#
# Environment (all optional):
#   BENCH_NATS_PORTS      client ports, comma-separated     (24221,24222,24223)
#   BENCH_ROUTE_PORTS     cluster route ports               (26221,26222,26223)
#   BENCH_MONITOR_PORTS   monitoring (HTTP) ports           (28221,28222,28223)
#   BENCH_NATS_SERVER     a nats-server binary to use instead of building one
#   BENCH_READY_TIMEOUT   seconds to wait for the cluster   (60)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IFS=, read -r -a client_ports <<<"${BENCH_NATS_PORTS:-24221,24222,24223}"
IFS=, read -r -a route_ports <<<"${BENCH_ROUTE_PORTS:-26221,26222,26223}"
IFS=, read -r -a monitor_ports <<<"${BENCH_MONITOR_PORTS:-28221,28222,28223}"
ready_timeout=${BENCH_READY_TIMEOUT:-60}
nodes=3

say() { echo "bench-cluster: $*" >&2; }
die() {
	say "$*"
	exit 1
}

for list in client_ports route_ports monitor_ports; do
	declare -n ports=$list
	[[ ${#ports[@]} -eq $nodes ]] || die "$list: want $nodes ports, got '${ports[*]}'"
	unset -n ports
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/reprise-bench-cluster.XXXXXX")
pids=()     # the nats-servers
bench_pid=""

# cleanup stops the benchmark and the servers this script started (by
# their pids) and removes the temporary directory.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $bench_pid ]]; then
		kill "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	if [[ ${#pids[@]} -gt 0 ]]; then
		kill "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# in_use reports whether something on 127.0.0.1 accepts connections on port $1.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# build makes the two binaries: nats-server at go.mod's version, and the bench.
build() {
	cd "$root"
	nats_server=${BENCH_NATS_SERVER:-}
	if [[ -z $nats_server ]]; then
		nats_server=$tmp/nats-server
		say "building nats-server $(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)"
		go build -o "$nats_server" github.com/nats-io/nats-server/v2
	fi
	say "building reprise-bench"
	go build -o "$tmp/reprise-bench" ./cmd/reprise-bench
}

# start_node starts node $1 (0-based) in the background, routed to the others.
start_node() {
	local i=$1 routes=() j
	for j in $(seq 0 $((nodes - 1))); do
		[[ $j -eq $i ]] || routes+=("nats://127.0.0.1:${route_ports[$j]}")
	done
	mkdir -p "$tmp/n$i"
	"$nats_server" -a 127.0.0.1 -p "${client_ports[$i]}" -m "${monitor_ports[$i]}" \
		-js -sd "$tmp/n$i" --server_name "n$i" \
		--cluster_name reprise-bench --cluster "nats://127.0.0.1:${route_ports[$i]}" \
		--routes "$(
			IFS=,
			echo "${routes[*]}"
		)" \
		-l "$tmp/n$i.log" &
	pids+=($!)
}

# meta_leader prints the JetStream meta leader node $1 knows of (nothing if none).
meta_leader() {
	curl -fsS --max-time 2 "http://127.0.0.1:${monitor_ports[$1]}/jsz" 2>/dev/null |
		tr -d ' \n' | grep -o '"meta_cluster":{[^}]*' | grep -o '"leader":"[^"]*"' | cut -d'"' -f4 || true
}

# formed reports whether every node sees the same meta leader and is healthy.
formed() {
	local i leader first=""
	for i in $(seq 0 $((nodes - 1))); do
		leader=$(meta_leader "$i")
		[[ -n $leader ]] || return 1
		[[ -z $first || $leader == "$first" ]] || return 1
		first=$leader
		curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:${monitor_ports[$i]}/healthz" 2>/dev/null || return 1
	done
	say "cluster formed; meta leader $first"
}

# wait_formed polls until the cluster formed, a server died, or the timeout.
wait_formed() {
	local deadline=$((SECONDS + ready_timeout)) i
	until formed; do
		for i in "${!pids[@]}"; do
			kill -0 "${pids[$i]}" 2>/dev/null || {
				tail -n 20 "$tmp/n$i.log" >&2 || true
				die "nats-server n$i exited"
			}
		done
		if ((SECONDS >= deadline)); then
			for i in $(seq 0 $((nodes - 1))); do
				say "n$i log:"
				tail -n 10 "$tmp/n$i.log" >&2 || true
			done
			die "no JetStream meta leader after ${ready_timeout}s"
		fi
		sleep 0.5
	done
}

for p in "${client_ports[@]}" "${route_ports[@]}" "${monitor_ports[@]}"; do
	! in_use "$p" || die "port $p on 127.0.0.1 is in use (set BENCH_NATS_PORTS, BENCH_ROUTE_PORTS, BENCH_MONITOR_PORTS)"
done
build
urls=()
for i in $(seq 0 $((nodes - 1))); do
	start_node "$i"
	urls+=("nats://127.0.0.1:${client_ports[$i]}")
done
say "started nats-server n0..n$((nodes - 1)) (pids ${pids[*]}) in $tmp"
wait_formed

nats=$(
	IFS=,
	echo "${urls[*]}"
)
say "reprise-bench --nats $nats --journal-replicas 3 $*"
# In the background, so that a signal to this script stops it at once.
"$tmp/reprise-bench" --nats "$nats" --journal-replicas 3 "$@" &
bench_pid=$!
rc=0
wait "$bench_pid" || rc=$?
bench_pid=""
exit "$rc"
