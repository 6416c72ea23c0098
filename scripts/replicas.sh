#!/usr/bin/env bash
# Two `bitnet serve` replicas behind nginx on loopback, with session affinity on a
# conversation id header (so a conversation keeps hitting the replica whose prefix cache
# holds it), driven by bitnet-loadtest. Needs nginx (Debian: apt-get install nginx-light).
#
#   scripts/replicas.sh [MODEL.gguf] [loadtest args...]
#
# Environment: BITNET, LOADTEST (binaries; default target/release/...), PORT (nginx,
# default 8090), THREADS (per replica, default 1), PARALLEL (per replica, default 4).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/models/shakespeare.gguf}
shift || true
BITNET=${BITNET:-$here/target/release/bitnet}
LOADTEST=${LOADTEST:-$here/target/release/bitnet-loadtest}
PORT=${PORT:-8090}
THREADS=${THREADS:-1}
PARALLEL=${PARALLEL:-4}

command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
for b in "$BITNET" "$LOADTEST"; do
    [ -x "$b" ] || { echo "$b is missing: cargo build --release -p bitnet-cli -p bitnet-loadtest" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Each replica on a free port; its first stdout line says which.
urls=()
for i in 1 2; do
    "$BITNET" serve -m "$model" --port 0 -t "$THREADS" --parallel "$PARALLEL" --alias replica \
        >"$work/r$i.out" 2>"$work/r$i.err" &
    pids+=($!)
done
for i in 1 2; do
    for _ in $(seq 200); do
        url=$(sed -n 's/^listening on //p' "$work/r$i.out" 2>/dev/null || true)
        [ -n "$url" ] && break
        sleep 0.05
    done
    [ -n "$url" ] || { echo "replica $i did not start:" >&2; cat "$work/r$i.err" >&2; exit 1; }
    for _ in $(seq 600); do
        curl -sf "$url/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    urls+=("$url")
    echo "replica $i: $url"
done

cat >"$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    upstream bitnet {
        # Session affinity: one conversation, one replica (its prefix cache hits).
        hash \$http_x_conversation_id consistent;
        server ${urls[0]#http://} max_fails=3 fail_timeout=5s;
        server ${urls[1]#http://} max_fails=3 fail_timeout=5s;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$PORT;
        location / {
            proxy_pass http://bitnet;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # Streams (SSE) go out token by token.
            proxy_buffering off;
            proxy_read_timeout 600s;
            # A replica with a full queue answers 503: try the other one.
            proxy_next_upstream error timeout http_503 non_idempotent;
        }
    }
}
CONF
nginx -c "$work/nginx.conf"
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.05
done
echo "nginx: http://127.0.0.1:$PORT"

if [ $# -eq 0 ]; then
    set -- --concurrency 1,4,8 --duration 10s --stream --max-tokens 32
fi
"$LOADTEST" --url "http://127.0.0.1:$PORT" "$@"

# Both replicas served (the load tester names 8 conversations, hashed over the two).
for i in 1 2; do
    n=$(curl -s "${urls[$((i - 1))]}/metrics" | sed -n 's/^bitnet_requests_total //p')
    echo "replica $i served $n requests"
done
