#!/usr/bin/env bash
# `kansoku lab load` beside wrk and ab on the same nginx (Debian's, started
# here on a port of its own and stopped by its PID): a 512 B page with
# keep-alive on and off, one thread and all cores, then an open-loop run.
# Usage: scripts/bench-load.sh path/to/kansoku [seconds]
set -euo pipefail
bin="$1"; secs="${2:-5}"
dir=$(mktemp -d)
port=18780
mkdir -p "$dir/www"
head -c 512 /dev/zero | tr '\0' k > "$dir/www/small.html"
cat > "$dir/nginx.conf" <<CONF
user root;
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi;
  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$port; root $dir/www; }
}
CONF
nginx -c "$dir/nginx.conf" -p "$dir" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/small.html" && break; sleep 0.1; done
url="http://127.0.0.1:$port/small.html"
"$bin" lab load "$url" -c 16 -t 1 -d "${secs}s" --peers wrk,ab
"$bin" lab load "$url" -c 16 -d "${secs}s" --peers wrk,ab
"$bin" lab load "$url" -c 4 -t 1 -d "${secs}s" --no-keepalive --peers wrk,ab
"$bin" lab load "$url" -c 16 -d "${secs}s" -R 20000
